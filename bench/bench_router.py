"""A run behind the real smg router (docs/internals/benchmarks.md, "Behind a router"): two serve-sim workers of
--slots slots
each (about a second a request), one `eagle-datagen run` (in process) through `smg launch --policy P`. Per case it
reports the most requests the workers held at once (running + queued, from their /sim/stats every 50 ms), how the
router split the requests between them, and samples/s. Cases: the window sized for the whole fleet (found from
the router's GET /workers) and for one worker (--replicas-behind-url 1, what runs did before), each under
round_robin and cache_aware.

Run (about 2 minutes on 2 cores): `PYTHONPATH=include:tests .venv/bin/python bench/bench_router.py [--prompts 200]
[--samples 3] [--slots 64]`
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import threading
import time
from pathlib import Path

import requests

from eagle_datagen.generation.stage import SamplingOverrides
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.standin.sglang import SimConfig, SimServerThread
from eagle_datagen_stack.sglang_engine import SmgRouter
from generation_runs import run_options


def peak_in_flight(sims: list[SimServerThread], done: threading.Event, peak: list[int]) -> None:
    with requests.Session() as session:
        while not done.wait(0.05):
            stats = [session.get(s.url + "/sim/stats", timeout=10).json() for s in sims]
            peak[0] = max(peak[0], sum(s["running"] + s["queued"] for s in stats))


def case(policy: str, replicas: int | None, args: argparse.Namespace) -> dict:
    worker = dataclasses.replace(
        SimConfig(max_running_requests=args.slots), decode_s_per_token=0.01, output_tokens_min=60,
        output_tokens_max=140,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, SimServerThread(worker) as a, SimServerThread(worker) as b:
        with SmgRouter([a.url, b.url], Path(tmp) / "smg", policy=policy) as router:
            options = run_options(
                Path(tmp), [router.url], run_id="bench", prompts=args.prompts, replicas_behind_url=replicas,
                sampling=SamplingOverrides(max_new_tokens=1000, samples_per_prompt=args.samples),
            )  # fmt: skip
            done, peak = threading.Event(), [0]
            watcher = threading.Thread(target=peak_in_flight, args=([a, b], done, peak), daemon=True)
            watcher.start()
            started = time.monotonic()
            summary = run_generation(options)
            elapsed = time.monotonic() - started
            done.set()
            watcher.join()
            split = [s.stats()["generations"] for s in (a, b)]
    (server,) = summary.servers
    return {
        "policy": policy,
        "window for": f"{server['replicas']} replica(s), {server['slots']} slots",
        "peak in flight": peak[0],
        "split": split,
        "samples/s": round(summary.generated / elapsed, 1),
        "elapsed_s": round(elapsed, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--slots", type=int, default=64)
    args = parser.parse_args()
    for policy in ("round_robin", "cache_aware"):
        for replicas in (None, 1):
            print(case(policy, replicas, args), flush=True)


if __name__ == "__main__":
    main()
