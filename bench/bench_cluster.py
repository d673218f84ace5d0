"""Cluster sizing benchmark (docs/internals/scaling.md): Airflow's cost per shard task, and a large run simulated.

(a) Per-task overhead. The local stack (`eagle_datagen_stack`) with one stand-in SGLang replica at the
    `instant` profile (no modelled latency), so a shard's own work is a few milliseconds and what is
    measured is Airflow: a category run of N shards of one prompt and one sample each, `sglang` pool of
    --pool-slots. Per executor (LocalExecutor on SQLite; CeleryExecutor on the machine's PostgreSQL and
    Redis with two workers of --worker-concurrency task processes each), from the task instances that the
    REST API reports: the median task run time (start to end of a try), the median wait from queued to
    running, and the run's shard phase (first shard start to last shard end) over N: the wall time each
    extra shard adds at that pool size. Repeated --repeats times (a fresh run each), medians over all.
(b) A large run, simulated at reduced scale. --replicas stand-in servers (`realistic` profile: 64 slots,
    25 ms per output token, 200-600 tokens; separate processes) and one client (`eagle-datagen run`'s
    code, in its own process, shards of --shard-size prompts), for --simulate-seconds of modelled work:
    `bench_generate.saturation_case`. It reports the occupancy of the replicas, output tokens/s against the
    throughput model's capacity (replicas x slots / decode seconds per token), and extrapolates to
    --target-prompts: wall time and GPU hours (8 GPUs per replica) at the measured rate.

Run (about 6 minutes on 2 cores with the defaults):
`EAGLE_DATAGEN_CACHE=.cache HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error .venv/bin/python bench/bench_cluster.py
[--shards 24] [--repeats 2] [--executors local,celery] [--replicas 16] [--simulate-seconds 60]`
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
GPUS_PER_REPLICA = 8


def seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def overhead_case(executor: str, shards: int, repeats: int, pool_slots: int, concurrency: int, workdir: Path) -> dict:
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen_stack.services import postgres_database, redis_database
    from eagle_datagen_stack.stack import LocalStack, StackOptions

    with ExitStack() as stack:
        celery: dict[str, Any] = {}
        if executor == "celery":
            celery = {
                "executor": "CeleryExecutor",
                "database_url": stack.enter_context(postgres_database("eagle_datagen_bench")),
                "broker_url": stack.enter_context(redis_database()),
                "celery_workers": ("worker-a", "worker-b"),
                "worker_concurrency": concurrency,
            }
        options = StackOptions(
            home=workdir / executor,
            sim=SimConfig().with_profile("instant"),
            pool_slots=pool_slots,
            parallelism=max(pool_slots, 4) + 2,
            draft_vocab_size=16,
            **celery,
        )
        local = stack.enter_context(LocalStack(options))
        api = local.api
        durations, waits, per_shard, walls = [], [], [], []
        for repeat in range(repeats):
            conf = {"limit": shards, "samples_per_prompt": 1, "shard_size": 1, "force_regenerate": True}
            started = time.monotonic()
            run_id = api.trigger("eagle_datagen__math", conf, run_id=f"bench-{executor}-{repeat}")
            state = api.wait_for_run("eagle_datagen__math", run_id, 1800, list(local.components.values()))
            walls.append(time.monotonic() - started)
            if state != "success":
                sys.exit(f"{executor} run {run_id} ended {state}; logs under {local.logs}")
            tis = [t for t in api.task_instances("eagle_datagen__math", run_id) if t["task_id"] == "generate_shard"]
            assert len(tis) == shards, len(tis)
            durations += [seconds_between(t["start_date"], t["end_date"]) for t in tis]
            waits += [seconds_between(t["queued_when"], t["start_date"]) for t in tis if t.get("queued_when")]
            phase = seconds_between(min(t["start_date"] for t in tis), max(t["end_date"] for t in tis))
            per_shard.append(phase / shards)
            print(
                f"  {executor} run {repeat + 1}: {shards} shards, run {walls[-1]:.0f}s, shard phase {phase:.1f}s "
                f"({phase / shards:.2f}s per shard), task median {statistics.median(durations[-shards:]):.2f}s",
                flush=True,
            )
    return {
        "executor": executor,
        "shards": shards,
        "runs": repeats,
        "task_s": statistics.median(d for d in durations if d is not None),
        "wait_s": statistics.median(waits) if waits else float("nan"),
        "per_shard_s": statistics.median(per_shard),
        "run_s": statistics.median(walls),
    }


def simulate(replicas: int, seconds: float, shard_size: int, target_prompts: int, workdir: Path) -> dict:
    import bench_generate as gen
    from eagle_datagen.standin.sglang.config import SimConfig

    row = gen.saturation_case("realistic", replicas, seconds, shard_size, 4000, workdir)
    cfg = SimConfig().with_profile("realistic")
    mean_tokens = (cfg.output_tokens_min + cfg.output_tokens_max) / 2
    capacity = replicas * gen.SLOTS / cfg.decode_s_per_token  # output tokens/s the throughput model allows
    target_s = target_prompts * mean_tokens / row["tok_s"]
    return row | {
        "mean_tokens": mean_tokens,
        "capacity_tok_s": capacity,
        "per_replica_tok_s": row["tok_s"] / replicas,
        "target_prompts": target_prompts,
        "target_hours": target_s / 3600,
        "target_gpu_hours": target_s / 3600 * replicas * GPUS_PER_REPLICA,
        "formula_hours": target_prompts * mean_tokens / capacity / 3600,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=16, help="(a) shards of one prompt per run (default 16)")
    parser.add_argument("--repeats", type=int, default=2, help="(a) runs per executor (default 2)")
    parser.add_argument("--executors", default="local,celery", help="(a) local, celery or both; '' skips (a)")
    parser.add_argument("--pool-slots", type=int, default=4, help="(a) the sglang pool (default 4)")
    parser.add_argument("--worker-concurrency", type=int, default=2, help="(a) task processes per Celery worker")
    parser.add_argument("--replicas", type=int, default=16, help="(b) stand-in replicas; 0 skips (b) (default 16)")
    parser.add_argument("--simulate-seconds", type=float, default=60.0, help="(b) modelled length (default 60)")
    parser.add_argument("--shard-size", type=int, default=500, help="(b) prompts per shard (default 500)")
    parser.add_argument("--target-prompts", type=int, default=1_000_000, help="(b) the run to extrapolate to")
    args = parser.parse_args()

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    print(f"commit {commit.strip() or '?'}; python {platform.python_version()}; {os.cpu_count()} CPUs", flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        workdir = Path(tmp)
        overhead = []
        for executor in filter(None, args.executors.split(",")):
            print(f"(a) per-task overhead, {executor}", flush=True)
            overhead.append(
                overhead_case(executor, args.shards, args.repeats, args.pool_slots, args.worker_concurrency, workdir)
            )
        sim = None
        if args.replicas:
            print(f"(b) simulated run: {args.replicas} replicas, {args.simulate_seconds:g}s", flush=True)
            sim = simulate(args.replicas, args.simulate_seconds, args.shard_size, args.target_prompts, workdir)
    print(f"\ntotal {time.monotonic() - started:.0f}s\n")
    if overhead:
        print(
            "| executor | shards x runs | median task run (s) | median queued -> running (s) "
            "| shard phase per shard (s) | median run wall (s) |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for r in overhead:
            print(
                f"| {r['executor']} | {r['shards']} x {r['runs']} | {r['task_s']:.2f} | {r['wait_s']:.2f} "
                f"| {r['per_shard_s']:.2f} | {r['run_s']:.0f} |"
            )
    if sim:
        print(
            "\n| replicas | requests (shards) | wall (s) | steady occupancy (worst replica) | whole-run occupancy "
            "| output tok/s | of model capacity | per replica tok/s | client CPU-s / 1k req |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        print(
            f"| {sim['replicas']} | {sim['requests']:,} ({sim['shards']}) | {sim['wall_s']:.0f} | {sim['steady']:.4f} "
            f"| {sim['whole']:.4f} | {sim['tok_s']:,.0f} | {sim['capacity']:.3f} | {sim['per_replica_tok_s']:,.0f} "
            f"| {sim['cpu_per_1k']:.2f} |"
        )
        print(
            f"\nextrapolated: {sim['target_prompts']:,} prompts x 1 sample x {sim['mean_tokens']:.0f} tokens at "
            f"{sim['tok_s']:,.0f} tok/s = {sim['target_hours']:.1f} h on {sim['replicas']} replicas, "
            f"{sim['target_gpu_hours']:,.0f} GPU hours ({GPUS_PER_REPLICA} per replica); the formula at full "
            f"capacity ({sim['capacity_tok_s']:,.0f} tok/s) gives {sim['formula_hours']:.1f} h"
        )


if __name__ == "__main__":
    main()
