"""Multi-turn benchmark: does `turns: each` keep the servers as busy as single-turn generation?

Steps of one conversation run in order (step k's prompt holds the model's answers of steps < k), so a
conversation is one job that holds one request in flight at a time; many conversations run at once. This
compares server slot occupancy for
- `each`: --conversations conversations of 1-4 user turns (uniform, seeded), `eagle-datagen run --turns each`;
- `last`: as many single-turn prompts as `each` has steps, `eagle-datagen run --turns last`;
against one stand-in server (`eagle-datagen serve-sim`, 64 slots, --profile) in its own process, the client
(the real CLI, default window 1.25 x 64) in another. /sim/stats is polled every 0.1 s. Per case: steady-state
occupancy (busy slot-seconds between the polls nearest 25% and 75% of the run, over slots x seconds) and
whole-run occupancy (all busy slot-seconds over slots x (last completion - first request)), the last
completion being the last poll at which the server's generation count changed. Target: `each` within 2%
of `last` (steady state). Cases alternate (last, each, last, ...) over --repeats; medians are reported.

Run (about 2 minutes with the defaults on 2 cores):
`EAGLE_DATAGEN_CACHE=.cache HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error .venv/bin/python
bench/bench_multiturn.py [--conversations 1000] [--profile fast] [--decode-ms MS] [--repeats 3]`.
The fast profile (2 ms/token, 50-150 tokens) asks the client for ~320 steps/s against one 64-slot server:
a stress test of the client's per-step CPU (rendering the template), far above what a GPU server
asks for (at 25 ms/token, 64 slots and ~400 tokens, about 6 steps/s per replica).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "eagle_datagen.cli"]
SLOTS = 64
POLL_S = 0.1
TARGET = 0.02  # `each` steady-state occupancy at most this far below `last`'s
TOPICS = ["a bakery", "prime numbers", "the tides", "a train timetable", "sorting", "Lisbon", "tea", "bridges"]


def conversations(n: int, seed: int) -> tuple[list[dict[str, Any]], int]:
    """n conversations of 1-4 user turns (the source's own answers between them); and their step count."""
    rng = random.Random(seed)
    records, steps = [], 0
    for i in range(n):
        turns = rng.randint(1, 4)
        steps += turns
        messages: list[dict[str, Any]] = []
        for k in range(turns):
            messages.append({"role": "user", "content": f"Conversation {i}, question {k} about {rng.choice(TOPICS)}?"})
            if k < turns - 1:
                messages.append({"role": "assistant", "content": f"The source's answer {k}."})
        records.append({"category": "chat", "messages": messages})
    return records, steps


def single_turn(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {"category": "chat", "messages": [{"role": "user", "content": f"Prompt {i} about {rng.choice(TOPICS)}?"}]}
        for i in range(n)
    ]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def http_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def start_server(profile: str, decode_ms: float | None) -> tuple[subprocess.Popen, str]:
    speed = ["--decode-ms-per-token", str(decode_ms)] if decode_ms is not None else []
    proc = subprocess.Popen(
        [*CLI, "serve-sim", "--port", "0", "--profile", profile, "--max-running-requests", str(SLOTS), *speed],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = proc.stdout.readline().strip() if proc.stdout else ""
    if not line.startswith("serving SGLang stand-in on "):
        proc.kill()
        raise RuntimeError(f"serve-sim did not start: {line!r}")
    return proc, line.rsplit(" ", 1)[1]


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_case(turns: str, prompts: Path, profile: str, decode_ms: float | None, workdir: Path) -> dict[str, Any]:
    proc, url = start_server(profile, decode_ms)
    polls: list[tuple[float, dict[str, Any]]] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            polls.append((time.time(), http_json(url + "/sim/stats")))
            done.wait(POLL_S)

    output = Path(tempfile.mkdtemp(prefix=f"{turns}-", dir=workdir))
    args = [
        *CLI,
        "run",
        "--prompts",
        str(prompts),
        "--tokenizer",
        "standin:kimi-k2.5",
        "--trust-remote-code",
        "--sglang-url",
        url,
    ]
    args += ["--output", str(output), "--run-id", "bench", "--turns", turns, "--no-canary", "--shard-size", "200"]
    args += ["--max-new-tokens", "1000", "--draft-vocab-size", "16"]
    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        result = subprocess.run(args, capture_output=True, text=True, cwd=REPO, env=dict(os.environ), timeout=1800)
        done.set()
        poller.join()
        final = http_json(url + "/sim/stats")
    finally:
        stop(proc)
        shutil.rmtree(output, ignore_errors=True)
    if result.returncode != 0:
        raise RuntimeError(f"eagle-datagen run --turns {turns} failed: {result.stderr[-2000:]}")
    first = final["first_request_at"]
    last = next(t for t, s in reversed(polls) if s["generations"] < final["generations"]) + POLL_S / 2
    span = last - first

    def nearest(at: float) -> tuple[float, dict[str, Any]]:
        return min(polls, key=lambda p: abs(p[0] - at))

    (t1, s1), (t2, s2) = nearest(first + 0.25 * span), nearest(first + 0.75 * span)
    return {
        "generations": final["generations"],
        "span_s": round(span, 2),
        "steady": (s2["busy_slot_seconds"] - s1["busy_slot_seconds"]) / (SLOTS * (t2 - t1)),
        "whole": final["busy_slot_seconds"] / (SLOTS * span),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--profile", default="fast", choices=["fast", "realistic"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--decode-ms", type=float, help="decode ms per output token (default: the profile's)")
    parser.add_argument("--seed", type=int, default=20261201)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-multiturn-"))
    try:
        records, steps = conversations(args.conversations, args.seed)
        each_prompts = write_jsonl(workdir / "each.jsonl", records)
        last_prompts = write_jsonl(workdir / "last.jsonl", single_turn(steps, args.seed))
        results: dict[str, list[dict[str, Any]]] = {"last": [], "each": []}
        for repeat in range(args.repeats):
            for turns, prompts in (("last", last_prompts), ("each", each_prompts)):
                case = run_case(turns, prompts, args.profile, args.decode_ms, workdir)
                results[turns].append(case)
                print(f"repeat {repeat + 1} {turns}: {json.dumps(case)}", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    speed = f"{args.decode_ms:g} ms/token" if args.decode_ms is not None else "the profile's speed"
    print(
        f"\n{args.conversations} conversations of 1-4 turns = {steps} steps; profile {args.profile} at {speed}, "
        f"{SLOTS} slots"
    )
    print("| turns | generations | span s (median) | steady occupancy (median) | whole-run occupancy (median) |")
    print("| --- | --- | --- | --- | --- |")
    medians = {}
    for turns, cases in results.items():
        medians[turns] = {k: statistics.median(c[k] for c in cases) for k in ("span_s", "steady", "whole")}
        m = medians[turns]
        print(f"| {turns} | {cases[0]['generations']} | {m['span_s']:.1f} | {m['steady']:.4f} | {m['whole']:.4f} |")
    gap = medians["last"]["steady"] - medians["each"]["steady"]
    ok = gap <= TARGET * medians["last"]["steady"]
    print(
        f"\nsteady-state gap each vs last: {gap / medians['last']['steady']:+.2%} (target within 2%): "
        f"{'met' if ok else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
