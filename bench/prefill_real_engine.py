"""`bench_prefill.py --engine sglang`: least-outstanding against prefix affinity on two real SGLang CPU servers.

The same client (`run_generation` in a subprocess, K = --samples, publishing skipped) and the same kind of
prompts as the stand-in benchmark, at half their lengths (SCALE: about 200-2,000 ids, what the CPU
prefills in a few minutes), on two real SGLang 0.5.23 servers (the tiny model of `make sglang`, 127.0.0.1,
8 running requests each). Both policies run on the same two servers, their radix caches flushed before each
(`/flush_cache?timeout=`, which waits for idle). The figures come from the servers' own
`meta_info.cached_tokens`, as the client saw them on every answered attempt of the generation phase (the
canary excluded; the real /metrics has no cached-tokens counter): computed = prompt ids sent - cached, over
the same ideal as the stand-in benchmark (`ideal_prefill`, 2 replicas). Occupancy means nothing on a CPU and
is not reported. Each server's KV pool (--max-total-tokens) is twice the run's distinct prompt ids, so
eviction plays no part, as in the stand-in benchmark. Greedy sampling: the tiny model then answers
`</think>`, one id, EOS, so the run is prefill-bound.

`--engine serve-sim-cpu` runs the same prompts, client and figures against two serve-sims shaped like these
servers (8 slots, the same KV pool as prefix cache, 8,192 context, answers of 8-12 ids, modelled prefill of
300 ms per 1,000 uncached ids and decode of 30 ms per id: about the real servers' requests/s here), to tell
the stand-in's cache model and the client's placement apart from what the real engine adds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench_generate import CLI
from bench_prefill import POLICIES, build_parser, ideal_prefill, run_client, tokenized, write_prompts
from eagle_datagen_stack.sglang_engine import (
    ServerOptions,
    SGLangServer,
    missing_engine,
    start_side_by_side,
    tiny_model_dir,
)

REPLICAS = 2  # at most two real servers on the 2-core machine
SCALE = 0.5
POOL_STEP = 65536  # the servers' default KV pool, in tokens


def server_options(distinct_ids: int) -> ServerOptions:
    """A KV pool of twice the run's distinct prompt ids (the trie), so that every prefix, the outputs and the 8
    running requests fit in each replica's cache: no eviction, as in the stand-in benchmark. The tiny model's
    KV is 1 KiB per token (2 layers, K and V of 64 float32 values), so 600k tokens are ~600 MB per server."""
    return ServerOptions(max_total_tokens=max(1, -(-2 * distinct_ids // POOL_STEP)) * POOL_STEP)


def start_servers(real: bool, options: ServerOptions, log_dir: Path) -> list[SGLangServer] | list[StandIn]:
    if not real:
        return [StandIn(options) for _ in range(REPLICAS)]
    servers = [SGLangServer(tiny_model_dir(), log_dir, options, name=f"sglang-bench-{i}") for i in range(REPLICAS)]
    return start_side_by_side(servers)


class StandIn:
    """One serve-sim process shaped like a real CPU server (--engine serve-sim-cpu)."""

    def __init__(self, options: ServerOptions) -> None:
        flags = [
            "--max-running-requests",
            str(options.max_running_requests),
            "--context-length",
            str(options.context_length),
            "--prefix-cache-tokens",
            str(options.max_total_tokens),
            "--output-tokens",
            "8-12",
            "--prefill-ms-per-1k-tokens",
            "300",
            "--decode-ms-per-token",
            "30",
        ]
        self.proc = subprocess.Popen(
            [*CLI, "serve-sim", "--port", "0", *flags], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        line = self.proc.stdout.readline().strip()
        if not line.startswith("serving SGLang stand-in on "):
            self.proc.kill()
            raise RuntimeError(f"serve-sim did not start: {line!r}")
        self.url = line.rsplit(" ", 1)[1]
        self.started_in_s = 0.0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=15)


def flush(url: str) -> None:
    request = urllib.request.Request(url + "/flush_cache?timeout=120", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=180) as response:
        assert response.status == 200, response.read()


def run_policy(
    servers: list[SGLangServer] | list[StandIn], policy: str, prompts: Path, args: argparse.Namespace, work: Path
) -> dict:
    for server in servers:
        flush(server.url)
    case = Path(tempfile.mkdtemp(prefix=f"sglang-{policy}-", dir=work))
    spec = {
        "engine": "sglang",
        "prompts": str(prompts),
        "output": str(case / "out"),
        "urls": [s.url for s in servers],
        "run_id": f"bench-sglang-{policy}",
        "shard_size": args.shard_size,
        "samples": args.samples,
        "max_new_tokens": args.real_max_new_tokens,
        "temperature": 0.0,  # greedy: the tiny model answers </think>, one id, EOS, so the run is prefill-bound
        "balance": policy,
        "result": str(case / "result.json"),
    }
    result = run_client(case, spec)
    seen = result["seen"]
    sent = sum(s["prompt_tokens"] for s in seen.values())
    cached = sum(s["cached_tokens"] for s in seen.values())
    return {
        "policy": policy,
        "requests": result["requests"],
        "answers": sum(s["answers"] for s in seen.values()),
        "per_replica": [seen.get(s.url, {}).get("answers", 0) for s in servers],
        "failed": result["failed"],
        "retries": result["retries"],
        "sent": sent,
        "cached": cached,
        "computed": sent - cached,
        "req_s": result["requests"] / result["wall_s"],
        "wall_s": result["wall_s"],
        "stolen": result["stolen"],
    }


def run_real_engine(args: argparse.Namespace) -> None:
    real = args.engine == "sglang"
    reason = missing_engine() if real else None
    if reason:
        sys.exit(f"bench_prefill --engine sglang: {reason}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    kind = "real SGLang 0.5.23 CPU servers (tiny model)" if real else "serve-sims shaped like the CPU servers"
    print(f"commit {commit or '?'}; {os.cpu_count()} CPUs; K = {args.samples}; {REPLICAS} {kind}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-prefill-sglang-"))
    started, rows = time.monotonic(), []
    try:
        prompts = write_prompts(work / "prompts.jsonl", args.real_prompts, scale=SCALE)
        prompt_ids = tokenized(prompts)
        ideal = ideal_prefill(prompt_ids, args.samples, REPLICAS)
        lengths = sorted(len(ids) for _, ids in prompt_ids)
        requests = len(lengths) * args.samples
        print(
            f"{len(lengths)} prompts of {lengths[0]}-{lengths[-1]} ids (median {lengths[len(lengths) // 2]}), "
            f"{requests} requests, max_new_tokens {args.real_max_new_tokens}; distinct prompt ids (trie) "
            f"{ideal['trie']:,}; ideal prefill {ideal['ideal']:,} of {ideal['sent']:,} prompt tokens sent",
            flush=True,
        )
        options = server_options(ideal["trie"])
        servers = start_servers(real, options, work / "logs")
        try:
            print(
                f"servers up in {max(s.started_in_s or 0 for s in servers):.0f} s: {options.max_running_requests} "
                f"running requests, KV pool {options.max_total_tokens:,} tokens each",
                flush=True,
            )
            for policy in POLICIES:
                row = run_policy(servers, policy, prompts, args, work) | {"ideal": ideal["ideal"]}
                rows.append(row)
                print(
                    f"  {policy}: computed {row['computed']:,} = {row['computed'] / row['ideal']:.2f}x ideal, "
                    f"cached {row['cached'] / row['sent']:.1%} of {row['sent']:,}, {row['req_s']:.2f} req/s "
                    f"({row['wall_s']:.0f} s), answers per replica {row['per_replica']}, failed {row['failed']}, "
                    f"retries {row['retries']}, stolen {row['stolen']}",
                    flush=True,
                )
        finally:
            for server in servers:
                server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\ntotal {time.monotonic() - started:.0f}s\n")
    print("| replicas | policy | requests | prefill computed / ideal | cached share | requests/s |")
    print("|---:|---|---:|---:|---:|---:|")
    servers_kind = "real" if real else "serve-sim-cpu"
    for r in rows:
        print(
            f"| {REPLICAS} {servers_kind} | {r['policy']} | {r['requests']:,} | {r['computed'] / r['ideal']:.2f}x "
            f"| {r['cached'] / r['sent']:.1%} | {r['req_s']:.2f} |"
        )


if __name__ == "__main__":  # `bench_prefill.py --engine sglang|serve-sim-cpu` runs this script with its arguments
    args = build_parser().parse_args()
    if args.engine == "serve-sim":
        args.engine = "sglang"
    run_real_engine(args)
