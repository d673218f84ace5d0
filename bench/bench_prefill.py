"""Prefill benchmark: how much prompt the replicas compute, least-outstanding against prefix affinity.

Servers are stand-in SGLang processes (`eagle-datagen serve-sim`, 64 slots, the default prefix cache of
500,000 tokens each, LRU); the client is the real `run_generation` (K = --samples samples per prompt, one
window over all shards, checkpoints; publishing skipped) in its own subprocess, with `--balance` set to each
policy in turn, interleaved within every repeat on fresh servers. Prompts (JSONL, rendered by the stand-in
Kimi-K2.5 tokenizer): categories whose prompts share a system prompt of 200-1,500 ids, user messages that
bring single prompts to 500-4,000 ids, and conversations of 4 steps whose prompts extend each other (each a
record of its own, as a multi-turn dataset has them), 500-4,000 ids.

Figures per case (profile, replicas, policy):
- prefill computed / ideal: the servers' computed prompt tokens (prompt - cached_tokens, from /sim/stats,
  reset as generation starts, so the canary does not count) over the ideal: every distinct prefix computed
  once (the trie of the distinct prompts), plus each category's shared prefix once more on every further
  replica, plus the one id SGLang always computes for every further sample of a prompt;
- cached share: cached / prompt tokens sent;
- whole-run occupancy: busy slot-seconds / (64 x (last completion - first request)), the worse replica;
- requests/s over the generation phase, and client CPU-seconds per 1,000 requests (getrusage).

Run (about 18 minutes with the defaults on 2 cores):
`EAGLE_DATAGEN_CACHE=.cache HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error .venv/bin/python bench/bench_prefill.py
[--cases fast:2,fast:4,realistic:4] [--fast-seconds 30] [--realistic-seconds 300] [--samples 4] [--quick]`.

`--engine sglang`: the same two policies on two real SGLang CPU servers (the tiny model, `make sglang`), figures
from the servers' own `cached_tokens` as the client saw them; `--engine serve-sim-cpu`: the same run on two serve-sims
shaped like them (prefill_real_engine.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_generate import SLOTS, Server, mean_request_seconds, timed_generation_phase  # noqa: E402

POLICIES = ("least-outstanding", "prefix-affinity")
TARGET_RATIO = 1.15  # K = 4 on 4 replicas, prefix affinity
WHOLE_RUN_TARGET = 0.97  # realistic profile


# --- prompts ---------------------------------------------------------------------------------------------


def write_prompts(path: Path, prompts: int, seed: int = 0, scale: float = 1.0) -> Path:
    """Single prompts under 6 shared system prompts, and 4-step conversations: 60% single prompts, 40% steps.
    `scale` multiplies every length (the real CPU engine runs them at 0.5)."""
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(3000)]

    def text(ids: int) -> str:  # the stand-in tokenizer makes ~4.8 ids of a random word
        return " ".join(rng.choice(words) for _ in range(max(1, round(ids * scale / 4.8))))

    systems = [text(rng.randint(200, 1500)) for _ in range(6)]
    records = []
    while len(records) < prompts:
        if rng.random() < 6 / 7:  # a conversation brings 4 records
            system = rng.randrange(len(systems))
            messages = [
                {"role": "system", "content": systems[system]},
                {"role": "user", "content": text(rng.randint(300, 2500))},
            ]
            records.append({"category": f"single{system}", "messages": messages})
        else:
            messages = [{"role": "user", "content": text(rng.randint(400, 1000))}]
            for _ in range(4):
                records.append({"category": "conversation", "messages": list(messages)})
                messages += [
                    {"role": "assistant", "content": text(rng.randint(100, 400))},
                    {"role": "user", "content": text(rng.randint(100, 400))},
                ]
                if len(records) == prompts:
                    break
    rng.shuffle(records)  # a dataset's order: a conversation's steps are not next to each other
    with path.open("w") as out:
        for record in records:
            out.write(json.dumps(record) + "\n")
    return path


def ideal_prefill(prompts: list[tuple[str, list[int]]], samples: int, replicas: int) -> dict[str, int]:
    """Placement-independent lower bound of prompt tokens to compute (see the module docstring)."""
    distinct = sorted({tuple(ids) for _, ids in prompts})
    trie = 0
    for previous, current in zip([()] + distinct[:-1], distinct, strict=True):
        common = 0
        for a, b in zip(previous, current, strict=False):
            if a != b:
                break
            common += 1
        trie += len(current) - common
    shared = 0
    by_category: dict[str, list[tuple[int, ...]]] = {}
    for category, ids in prompts:
        by_category.setdefault(category, []).append(tuple(ids))
    for group in by_category.values():
        first, last = min(group), max(group)  # the longest prefix common to all is that of the extremes
        common = 0
        for a, b in zip(first, last, strict=False):
            if a != b:
                break
            common += 1
        shared += common
    ideal = trie + (replicas - 1) * shared + (samples - 1) * len(distinct)
    return {"ideal": ideal, "trie": trie, "shared": shared, "sent": samples * sum(len(ids) for _, ids in prompts)}


def tokenized(prompts: Path) -> list[tuple[str, list[int]]]:
    from eagle_datagen.profile import load_profile
    from eagle_datagen.records import validate_record
    from eagle_datagen.tokenization.loader import load_tokenizer
    from eagle_datagen.tokenization.tokenize import tokenize_prompts

    profile = load_profile("kimi-k2.5")
    records = [validate_record(json.loads(line), origin=f"bench:{i}") for i, line in enumerate(prompts.open())]
    result = tokenize_prompts(
        load_tokenizer("standin:kimi-k2.5", profile, trust_remote_code=True), records, max_prompt_tokens=32768
    )
    return [(p.record.category, p.prompt_ids) for p in result.prompts]


# --- the client subprocess -------------------------------------------------------------------------------


def client_main(spec: dict[str, Any]) -> None:
    import eagle_datagen.generation.stage as stage
    import eagle_datagen.generation.steps as steps
    from eagle_datagen.tokenization.stage import TokenizeOptions

    last_done: dict[str, float] = {}
    phase: dict[str, Any] = {}
    seen: dict[str, dict[str, int]] = {}  # per endpoint, every answered attempt of the generation phase
    counting = [False]

    def counting_starts() -> None:  # the generation phase: the canary is not counted
        counting[0] = True

    standin = spec.get("engine", "serve-sim") == "serve-sim"  # else no /sim/stats: count what the client saw

    class TimedClient(stage.GenerateClient):
        async def generate(self, request):  # noqa: ANN001, ANN202
            result = await super().generate(request)
            last_done[result.endpoint] = time.time()
            return result

    class CountingClient(TimedClient):
        async def _attempt(self, endpoint, body):  # noqa: ANN001, ANN202
            outcome = await super()._attempt(endpoint, body)
            if counting[0] and isinstance(outcome, tuple):  # an answer (a screened-out one was prefilled too)
                row = seen.setdefault(endpoint.url, {"answers": 0, "prompt_tokens": 0, "cached_tokens": 0})
                row["answers"] += 1
                row["prompt_tokens"] += len(body["input_ids"])
                row["cached_tokens"] += int(outcome[1].get("cached_tokens") or 0)
            return outcome

    def affinity_counts(client) -> dict[str, int]:  # noqa: ANN001
        affinity = client.pool.affinity
        return {
            "stolen": client.pool.stolen,
            "followed": affinity.followed if affinity else 0,
            "placed": affinity.placed if affinity else 0,
        }

    stage.GenerateClient = TimedClient if standin else CountingClient
    steps.generate_pending = timed_generation_phase(
        stage.generate_pending, phase, reset_sim_stats=standin, on_start=counting_starts, more=affinity_counts
    )
    steps.publish_shard = lambda *args, **kwargs: 0  # the run's steps look these names up at call time
    steps.finalize_step = lambda *args, **kwargs: {}
    summary = steps.run_generation(
        stage.RunOptions(
            prompts=TokenizeOptions(
                output=spec["output"], tokenizer="standin:kimi-k2.5", trust_remote_code=True, prompts=[spec["prompts"]]
            ),
            sglang_urls=spec["urls"],
            run_id=spec["run_id"],
            shard_size=spec["shard_size"],
            sampling=stage.SamplingOverrides(
                samples_per_prompt=spec["samples"],
                max_new_tokens=spec.get("max_new_tokens"),
                temperature=spec.get("temperature"),
            ),
            balance=spec["balance"],
        )
    )
    assert summary.pending == 0 and summary.generated == summary.samples, summary
    Path(spec["result"]).write_text(json.dumps(phase | {"last_done": last_done, "seen": seen}))


def run_client(case: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """`client_main` on `spec` in a subprocess (its log: case/client.log); the figures it wrote. Exits the
    benchmark with the log's tail when the client fails."""
    (case / "spec.json").write_text(json.dumps(spec))
    with (case / "client.log").open("w") as log:
        code = subprocess.run(
            [sys.executable, __file__, "--client", str(case / "spec.json")], stdout=log, stderr=log
        ).returncode
    if code != 0:
        sys.exit(f"client failed ({code}):\n" + (case / "client.log").read_text()[-3000:])
    return json.loads(Path(spec["result"]).read_text())


def run_case(profile: str, replicas: int, policy: str, prompts: Path, args: argparse.Namespace, work: Path) -> dict:
    servers = []
    try:
        for _ in range(replicas):
            servers.append(Server.start(profile))
        case = Path(tempfile.mkdtemp(prefix=f"{profile}-{replicas}-{policy}-", dir=work))
        spec = {
            "prompts": str(prompts),
            "output": str(case / "out"),
            "urls": [s.url for s in servers],
            "run_id": f"bench-{profile}-{replicas}-{policy}",
            "shard_size": args.shard_size,
            "samples": args.samples,
            "balance": policy,
            "result": str(case / "result.json"),
        }
        result = run_client(case, spec)
        stats = [s.stats() for s in servers]
    finally:
        for server in servers:
            server.stop()
    whole = []
    for server, s in zip(servers, stats, strict=True):
        span = result["last_done"][server.url] - s["first_request_at"]
        whole.append(s["busy_slot_seconds"] / (SLOTS * span))
    return {
        "profile": profile,
        "replicas": replicas,
        "policy": policy,
        "requests": result["requests"],
        "failed": result["failed"],
        "computed": sum(s["computed_prompt_tokens"] for s in stats),
        "cached": sum(s["cached_tokens"] for s in stats),
        "sent": sum(s["prompt_tokens"] for s in stats),
        "whole": min(whole),
        "req_s": result["requests"] / result["wall_s"],
        "cpu_per_1k": 1000 * result["cpu_s"] / result["requests"],
        "stolen": result["stolen"],
        "wall_s": result["wall_s"],
    }


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's options, shared with prefill_real_engine.py (which imports this module, never the reverse)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="fast:2,fast:4,realistic:4", help="profile:replicas, comma-separated")
    parser.add_argument("--fast-seconds", type=float, default=30.0, help="length of a fast case (default 30)")
    parser.add_argument("--realistic-seconds", type=float, default=300.0, help="of a realistic case (default 300)")
    parser.add_argument("--samples", type=int, default=4, help="samples per prompt, K (default 4)")
    parser.add_argument("--shard-size", type=int, default=150, help="prompts per shard (default 150)")
    parser.add_argument("--quick", action="store_true", help="smoke run: fast:2,fast:4 for 8 s")
    parser.add_argument(
        "--engine",
        choices=("serve-sim", "sglang", "serve-sim-cpu"),
        default="serve-sim",
        help="sglang: two real CPU servers, tiny model; serve-sim-cpu: the same run on two serve-sims shaped like "
        "them (prefill_real_engine.py); --cases is ignored with either",
    )
    parser.add_argument("--real-prompts", type=int, default=500, help="prompts of an sglang run (default 500)")
    parser.add_argument("--real-max-new-tokens", type=int, default=16, help="of an sglang run (default 16)")
    parser.add_argument("--client", metavar="SPEC", help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    if args.client:
        return client_main(json.loads(Path(args.client).read_text()))
    if args.quick:
        args.cases, args.fast_seconds = "fast:2,fast:4", 8.0
    if args.engine in ("sglang", "serve-sim-cpu"):  # its own script, so that it imports this one, not the reverse
        real = Path(__file__).with_name("prefill_real_engine.py")
        os.execv(sys.executable, [sys.executable, str(real), *sys.argv[1:]])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"commit {commit or '?'}; {os.cpu_count()} CPUs; K = {args.samples}; {SLOTS} slots per replica", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-prefill-"))
    rows, started = [], time.monotonic()
    try:
        for case in args.cases.split(","):
            profile, replicas = case.split(":")[0], int(case.split(":")[1])
            seconds = args.realistic_seconds if profile == "realistic" else args.fast_seconds
            requests = math.ceil(seconds * replicas * SLOTS / mean_request_seconds(profile))
            path = work / f"prompts-{case.replace(':', '-')}.jsonl"
            prompts = write_prompts(path, math.ceil(requests / args.samples))
            prompt_ids = tokenized(prompts)
            ideal = ideal_prefill(prompt_ids, args.samples, replicas)
            lengths = sorted(len(ids) for _, ids in prompt_ids)
            print(
                f"{case}: {len(lengths)} prompts of {lengths[0]}-{lengths[-1]} ids (median "
                f"{lengths[len(lengths) // 2]}), {requests} requests; ideal prefill {ideal['ideal']:,} of "
                f"{ideal['sent']:,} prompt tokens sent",
                flush=True,
            )
            for policy in POLICIES:
                row = run_case(profile, replicas, policy, prompts, args, work) | {"ideal": ideal["ideal"]}
                rows.append(row)
                print(
                    f"  {policy}: computed {row['computed']:,} = {row['computed'] / row['ideal']:.2f}x ideal, "
                    f"cached {row['cached'] / row['sent']:.1%}, occupancy {row['whole']:.4f}, "
                    f"{row['req_s']:.1f} req/s, client CPU {row['cpu_per_1k']:.2f} s/1k, stolen {row['stolen']}, "
                    f"failed {row['failed']}",
                    flush=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\ntotal {time.monotonic() - started:.0f}s\n")
    print(
        "| profile | replicas | policy | requests | prefill computed / ideal | cached share | whole-run occupancy "
        "| requests/s | client CPU-s / 1k req |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = r["computed"] / r["ideal"]
        mark = ""
        if r["policy"] == "prefix-affinity" and r["replicas"] == 4 and args.samples == 4:
            mark = " (target <= 1.15: " + ("met" if ratio <= TARGET_RATIO else "**not met**") + ")"
        print(
            f"| {r['profile']} | {r['replicas']} | {r['policy']} | {r['requests']:,} | {ratio:.2f}x{mark} "
            f"| {r['cached'] / r['sent']:.1%} | {r['whole']:.4f} | {r['req_s']:,.1f} | {r['cpu_per_1k']:.2f} |"
        )


if __name__ == "__main__":
    main()
