"""`make demo`: the main job through Airflow, end to end on this machine, on the embedded default.

Starts a whole deployment under `--home` (default `.demo/`, emptied first): SeaweedFS (the object store),
a stand-in SGLang server with a few injected faults, and Airflow (SQLite, LocalExecutor: api-server,
dag-processor, scheduler). It triggers every category DAG of the demo recipe through Airflow's REST API,
as the trigger form does, waits for the runs and for the release DAG that their assets trigger, copies
the published output root from the object store to `<home>/output/` so it can be read with any Parquet
reader, prints a summary, and stops everything it started.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from eagle_datagen.demo import category_table, example_sample
from eagle_datagen.progress import format_duration
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen_stack.api import FINISHED, AirflowApi
from eagle_datagen_stack.processes import wait_until
from eagle_datagen_stack.sglang_engine import missing_engine
from eagle_datagen_stack.stack import PROJECT, LocalStack, StackOptions

RELEASE_DAG = "eagle_datagen_release"
# The demo generates a few thousand tokens per category; a real run uses EAGLE-3's usual 32000.
DEMO_DRAFT_VOCAB = 256
# A few faults, as a real deployment has: retried (503, dropped connections) or quarantined (no </think>).
DEMO_FAULTS = {"error_503": 0.03, "drop": 0.01, "no_think_end": 0.03}
# The real engine (`--engine sglang`): two CPU replicas of the tiny model behind the smg router, a few
# prompts per category (about 60 output tokens each, ~100 tokens/s per replica on two busy cores).
REAL_ENGINE_REPLICAS = 2
REAL_ENGINE_CONF = {"limit": 3, "max_new_tokens": 256}


def wait_for_category_runs(api: AirflowApi, runs: dict[str, str], stack: LocalStack, timeout_s: float) -> dict:
    """Poll until every run has finished, with a progress line every few seconds; the runs' states."""
    started = time.monotonic()
    last_line = 0.0
    while True:
        stack.check_alive()
        states = {dag: api.dag_run(dag, run)["state"] for dag, run in runs.items()}
        now = time.monotonic()
        if all(s in FINISHED for s in states.values()):
            return states
        if now - last_line >= 5:
            tasks = Counter(ti["state"] or "none" for dag, run in runs.items() for ti in api.task_instances(dag, run))
            done = sum(s in FINISHED for s in states.values())
            rate = done / (now - started) if done else 0.0
            eta = f", ETA {format_duration((len(runs) - done) / rate)}" if rate else ""
            print(
                f"[{format_duration(now - started):>6}] category runs: {done} of {len(runs)} finished{eta}; "
                f"tasks: {tasks.get('success', 0)} done, {tasks.get('running', 0)} running, "
                f"{tasks.get('queued', 0) + tasks.get('scheduled', 0)} waiting",
                flush=True,
            )
            last_line = now
        if now - started > timeout_s:
            raise TimeoutError(f"category runs not finished after {timeout_s:.0f} s: {states}")
        time.sleep(1)


def latest_release(stack: LocalStack, categories: set[str]) -> dict[str, Any] | None:
    """The release that covers every category, once no release run is still queued or running."""
    from eagle_datagen.storage.output_root import open_output_root

    assert stack.api is not None
    if any(r["state"] not in FINISHED for r in stack.api.dag_runs(RELEASE_DAG)):
        return None
    root = open_output_root(stack.output)
    # The demo's releases are all asset-triggered: their ids (asset_triggered__<time>...) sort by event time.
    releases = sorted(k for k in root.list("releases/") if k.endswith(".json"))
    if not releases:
        return None
    newest = json.loads(root.read_bytes(releases[-1]))  # an older release covers no more categories
    return newest if set(newest["categories"]) == categories else None


def mirror(stack: LocalStack, target: Path) -> int:
    """Copy every object under the output root to a local folder (same keys); the number of objects."""
    from eagle_datagen.storage.output_root import open_output_root

    root = open_output_root(stack.output)
    keys = root.list("")
    for key in keys:
        path = target / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(root.read_bytes(key))
    return len(keys)


def summary_lines(stack: LocalStack, runs: dict[str, str], states: dict[str, str], output: Path) -> list[str]:
    from eagle_datagen.storage.manifest import list_manifests
    from eagle_datagen.storage.output_root import open_output_root

    assert stack.api is not None
    manifests = list_manifests(open_output_root(str(output)))
    published = {c: m["run_id"] for m in manifests for c in m["counts"]["by_category"]}
    lines = [f"{'category DAG':<30}{'DAG run':>9}{'shards':>8}  published run"]
    for dag, run in sorted(runs.items()):
        shards = [ti for ti in stack.api.task_instances(dag, run) if ti["task_id"] == "generate_shard"]
        pipeline_run = published.get(dag.removeprefix("eagle_datagen__"), "-")
        lines.append(f"{dag:<30}{states[dag]:>9}{len(shards):>8}  {pipeline_run}")
    return lines


def use_object_store(stack: LocalStack) -> None:
    """Point this process's boto3 client at the stack's SeaweedFS (to read what the runs published)."""
    from eagle_datagen.objectstore.s3 import s3_client

    assert stack.s3 is not None
    os.environ.update(stack.s3.env)
    s3_client.cache_clear()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__)
    parser.add_argument("--home", type=Path, default=PROJECT / ".demo", help="where everything lives (emptied first)")
    parser.add_argument("--samples-per-prompt", type=int, default=2, help="generations per prompt (default 2)")
    parser.add_argument("--shard-size", type=int, default=8, help="prompts per shard, one mapped task each")
    parser.add_argument("--engine", choices=("sim", "sglang"), default="sim",
                        help="sim: serve-sim with faults (default); sglang: two real SGLang CPU servers (tiny model, "
                        "`make sglang`) behind the real smg router")
    parser.add_argument("--limit", type=int, default=None,
                        help=f"prompts per category (default: the recipe's; {REAL_ENGINE_CONF['limit']} on sglang)")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help=f"default: the recipe's; {REAL_ENGINE_CONF['max_new_tokens']} on sglang")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds to wait for the runs (default 1200)")
    parser.add_argument("--log-level", default="WARNING", help="log level of the stack's own messages")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    home = args.home.resolve()
    started = time.monotonic()
    print(f"== eagle-datagen demo through Airflow: recipe {StackOptions.recipe.relative_to(PROJECT)}, home {home} ==")
    real = args.engine == "sglang"
    if real and missing_engine():
        print(f"make demo: error: {missing_engine()}", file=sys.stderr)
        return 1
    options = StackOptions(
        home=home,
        output_prefix="demo",
        sim=SimConfig(faults=DEMO_FAULTS, fault_seed=7).with_profile("fast"),  # type: ignore[arg-type]
        engine=args.engine,
        replicas=REAL_ENGINE_REPLICAS if real else 1,
        draft_vocab_size=DEMO_DRAFT_VOCAB,
    )
    inference = (
        f"{REAL_ENGINE_REPLICAS} real SGLang CPU servers (a tiny model with made-up weights) behind the smg router"
        if real
        else "a stand-in SGLang server"
    )
    print(f"starting SeaweedFS, {inference} and Airflow (api-server, dag-processor, scheduler) ...")
    with LocalStack(options) as stack:
        assert stack.api is not None and stack.airflow is not None
        up_s = time.monotonic() - started
        print(f"up in {up_s:.0f} s: Airflow {stack.airflow.api_url}, SGLang {stack.sglang_urls[0]}, {stack.output}")
        conf = {"samples_per_prompt": args.samples_per_prompt, "shard_size": args.shard_size}
        for key, value in (("limit", args.limit), ("max_new_tokens", args.max_new_tokens)):
            value = value if value is not None else REAL_ENGINE_CONF[key] if real else None
            if value is not None:
                conf[key] = value
        dags = sorted(stack.expected_dag_ids() - {RELEASE_DAG})
        runs = {dag: stack.api.trigger(dag, conf) for dag in dags}
        print(f"triggered {len(runs)} category DAGs with {json.dumps(conf)}")
        states = wait_for_category_runs(stack.api, runs, stack, args.timeout)
        runs_s = time.monotonic() - started - up_s
        failed = sorted(dag for dag, state in states.items() if state != "success")
        if failed:
            logs = stack.airflow.home / "logs"
            print(f"demo failed: {failed} did not succeed; task logs under {logs}", file=sys.stderr)
            return 1
        categories = {dag.removeprefix("eagle_datagen__") for dag in dags}
        use_object_store(stack)
        release = wait_until(
            lambda: latest_release(stack, categories), 300, "the release DAG covering every category", []
        )
        objects = mirror(stack, home / "output")
        output = home / "output"
        print()
        print("\n".join(summary_lines(stack, runs, states, output)))
    assert isinstance(release, dict)
    print()
    print(category_table(output))
    print()
    print(example_sample(output))
    vocab = release["draft_vocab"]
    print(
        f"\nrelease {release['release_id']}: {release['counts']['samples']:,} samples of {len(release['categories'])} "
        f"categories, {release['counts']['trained_tokens']:,} trained tokens; draft vocabulary {vocab['k']:,} tokens "
        f"covering {vocab['coverage']:.1%}"
    )
    print(f"\npublished to s3://eagle/demo on SeaweedFS (its store: {home / 'seaweedfs'}); {objects} objects copied to")
    print(f"  {output}/")
    print("  data/, quarantine/            Parquet shards (contract v1), by category and run")
    print("  manifests/run=<run>.json      each run's manifest, written last; .report.html, .statistics.json,")
    print("                                .summary.json (and .draft_vocab.safetensors) beside it")
    print("  releases/release=<id>.json    the release over every category, with its draft vocabulary")
    reports = sorted(output.glob("manifests/*.report.html"))
    if reports:
        print(f"open a report: file://{reports[0]}")
    print(f"Airflow home (SQLite DB, task logs): {home / 'airflow'}; component logs: {home / 'logs'}")
    print(
        f"done in {format_duration(time.monotonic() - started)} (stack up {up_s:.0f} s, category runs {runs_s:.0f} s); "
        "everything started was stopped"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
