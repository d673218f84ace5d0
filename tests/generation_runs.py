"""Helpers shared by the generation tests: run options against stand-in servers, actions on cue (once the
servers have generated so many samples), and `eagle-datagen run` as a subprocess that a test can SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eagle_datagen.generation.checkpoint import CheckpointPolicy
from eagle_datagen.generation.publish import PublishOptions
from eagle_datagen.generation.stage import RunOptions, SamplingOverrides
from eagle_datagen.inference.retry import RetryPolicy
from eagle_datagen.standin.sglang.runner import SimServerThread
from eagle_datagen.tokenization.stage import TokenizeOptions

from conftest import REPO, user_record, write_jsonl

CLI_RUN = [sys.executable, "-m", "eagle_datagen.cli", "run", "--tokenizer", "standin:kimi-k2.5", "--trust-remote-code"]


def run_options(
    tmp_path: Path, urls: list[str], run_id: str = "r", prompts: int = 30, output: str | None = None, **changes
) -> RunOptions:
    """A small run (`prompts` prompts of growing length, shards of 10) with quick retries and checkpoints."""
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"question {i}: " + "word " * i) for i in range(prompts)])
    base = dict(
        prompts=TokenizeOptions(
            output=output or str(tmp_path / "out"),
            tokenizer="standin:kimi-k2.5",
            trust_remote_code=True,
            prompts=[str(src)],
        ),
        sglang_urls=urls,
        run_id=run_id,
        sampling=SamplingOverrides(max_new_tokens=1000),
        shard_size=10,
        retry=RetryPolicy(max_attempts=10, base_delay_s=0.01, max_delay_s=0.05),
        checkpoint=CheckpointPolicy(max_samples=8, max_age_s=0.2),
        publish=PublishOptions(draft_vocab_size=100),
        canary=False,
        preflight_wait_s=2,
    )
    return RunOptions(**(base | changes))


def generations(servers: list[SimServerThread]) -> int:
    return sum(server.stats()["generations"] for server in servers)


def after_generations(
    servers: list[SimServerThread],
    count: int,
    action: Callable[[], object],
    stop: threading.Event | None = None,
    timeout_s: float = 120,
) -> threading.Thread:
    """A started thread that runs `action` once the servers have generated `count` samples, so a fault lands
    mid-run however fast the machine is (not on a timer). It gives up if `stop` is set or after timeout_s."""

    def watch() -> None:
        deadline = time.monotonic() + timeout_s
        while not (stop is not None and stop.is_set()) and time.monotonic() < deadline:
            if generations(servers) >= count:
                action()
                return
            time.sleep(0.01)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def checkpointed_samples(root: Path, run_id: str) -> int:
    """Samples checkpointed so far under a local output root (lines of its chunk files)."""
    return sum(len(p.read_bytes().splitlines()) for p in root.glob(f"checkpoints/run={run_id}/shard=*/chunk-*.jsonl"))


@dataclass
class Invocation:
    returncode: int
    stdout: str
    stderr: str
    killed: bool  # ended by the test's SIGKILL


def run_cli(
    args: list[str],
    kill_when: Callable[[], bool] | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 300,
    poll_s: float = 0.05,
) -> Invocation:
    """`eagle-datagen run ARGS` until it exits, or SIGKILL it as soon as `kill_when()` is true.

    Output goes to files, not pipes: a run that logs a lot must not block on a full pipe while we poll."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(CLI_RUN + args, cwd=REPO, env=env or dict(os.environ), stdout=out, stderr=err)
        deadline = time.monotonic() + timeout_s
        try:
            while process.poll() is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"eagle-datagen run did not finish within {timeout_s}s")
                if kill_when is not None and kill_when():
                    process.send_signal(signal.SIGKILL)
                    break
                time.sleep(poll_s)
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
        out.seek(0)
        err.seek(0)
        killed = process.returncode == -signal.SIGKILL  # not when it had exited by itself just before
        return Invocation(process.returncode, out.read().decode(), err.read().decode(), killed)
