"""`make airflow`: the demo's deployment with Airflow's UI, for people who want to click.

Starts SeaweedFS, a stand-in SGLang server and Airflow (SQLite, LocalExecutor) under `--home` (default
`.airflow/`, kept between starts: runs, data and the admin password survive), prints the UI's URL and
login, and runs until Ctrl-C (or SIGTERM), then stops everything it started. The DAGs are unpaused and,
unless `--nightly` is given, unscheduled, so a click on Trigger runs at once.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import time
from pathlib import Path

from eagle_datagen.standin.sglang.config import PROFILES, SimConfig
from eagle_datagen_stack.airflow_env import ADMIN
from eagle_datagen_stack.demo import DEMO_DRAFT_VOCAB
from eagle_datagen_stack.processes import ComponentDied
from eagle_datagen_stack.stack import PROJECT, LocalStack, StackOptions


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no obstacle
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make airflow", description=__doc__)
    parser.add_argument("--home", type=Path, default=PROJECT / ".airflow", help="where everything lives")
    parser.add_argument("--port", type=int, default=8080, help="the UI's port on 127.0.0.1 (default 8080)")
    parser.add_argument("--fresh", action="store_true", help="empty --home first (forget earlier runs)")
    parser.add_argument("--nightly", action="store_true", help="keep the category DAGs' nightly schedule")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="fast", help="stand-in SGLang speed")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not port_is_free(args.port):
        print(f"make airflow: error: port {args.port} on 127.0.0.1 is taken: pass --port (make airflow PORT=8081)")
        return 1
    options = StackOptions(
        home=args.home,
        api_port=args.port,
        sim=SimConfig().with_profile(args.profile),
        schedule="0 3 * * *" if args.nightly else "none",
        draft_vocab_size=DEMO_DRAFT_VOCAB,
        fresh=args.fresh,
    )
    stop = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    with LocalStack(options) as stack:
        assert stack.airflow is not None
        print(
            "\n".join(
                [
                    "",
                    f"Airflow UI: {stack.airflow.api_url}   login: {ADMIN} / {stack.airflow.admin_password()}",
                    f"  DAGs: {', '.join(sorted(stack.expected_dag_ids()))}",
                    f"  connections: sglang_default -> {', '.join(stack.sglang_urls)} (stand-in, {args.profile});"
                    f" aws_default -> SeaweedFS {stack.s3.endpoint_url if stack.s3 else ''}",
                    f"  output root: {stack.output}; Airflow home {stack.airflow.home}; logs {stack.logs}",
                    "  a category run's report: its DAG run page, tab 'Report'",
                    "Ctrl-C stops everything.",
                ]
            ),
            flush=True,
        )
        try:
            while not stop:
                stack.check_alive()
                time.sleep(1)
        except ComponentDied as exc:
            print(f"make airflow: error: {exc}", file=sys.stderr)
            return 1
    print("stopped.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
