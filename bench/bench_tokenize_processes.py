"""What exactness costs and what processes give back: tokenize throughput of the Kimi-shaped remote-code tokenizer
with its own call (the default: the ids SGLang's call gives, by construction) at 1, 2 and all usable processes,
side by side with the opt-in tiktoken fast path (the default before issue 29) at the same counts.

The remote-code stand-in (`standin:kimi-k2.5`, the real file's call structure) tokenizes the same N prompts
(bench_tokenize.build_records: the demo prompts, made distinct) through the pipeline's whole per-prompt work
(`tokenize_prompts`: render with the tokenizer's own template, the special-token guard, encode, checks), with
forked workers as a run uses them. Cases are interleaved per repeat so that machine noise hits them alike; medians.
The ids of every case are checked equal to the own call at one process.

Run: `EAGLE_DATAGEN_CACHE=.cache HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_tokenize_processes.py
[--prompts N] [--repeats R]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tokenize import build_records  # noqa: E402
from eagle_datagen.cpus import usable_cpus  # noqa: E402
from eagle_datagen.profile import load_profile  # noqa: E402
from eagle_datagen.tokenization.loader import load_tokenizer  # noqa: E402
from eagle_datagen.tokenization.tokenize import tokenize_prompts  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    profile = load_profile("kimi-k2.5")
    own = load_tokenizer("standin:kimi-k2.5", profile, trust_remote_code=True, announce=False)
    fast = load_tokenizer("standin:kimi-k2.5", profile, trust_remote_code=True, announce=False,
                          tiktoken_fast_path=True)  # fmt: skip
    assert own.encode_path == "own_call" and fast.encode_path == "tiktoken_fast_path"
    records = build_records(args.prompts)
    everything = usable_cpus()
    counts = sorted({1, 2, everything})
    cases = [(path, loaded, n) for n in counts for path, loaded in (("own call", own), ("fast path", fast))]
    seconds: dict[tuple[str, int], list[float]] = {(path, n): [] for path, _, n in cases}
    expected = None
    tokens = 0
    for _ in range(args.repeats):
        for path, loaded, n in cases:
            start = time.perf_counter()
            result = tokenize_prompts(loaded, records, 10**6, processes=n, trust_remote_code=True)
            seconds[(path, n)].append(time.perf_counter() - start)
            ids = [p.prompt_ids for p in result.prompts]
            if expected is None:
                expected, tokens = ids, sum(len(i) for i in ids)
            assert ids == expected, f"{path} at {n} process(es) gave other ids"
    load = os.getloadavg()
    print(f"{args.prompts:,} prompts ({tokens:,} tokens), {args.repeats} repeats, usable CPUs {everything}, "
          f"load average after {load[0]:.1f}")  # fmt: skip
    base = statistics.median(seconds[("fast path", 1)])
    print("| encode path | processes | median s | prompts/s | tokens/s | vs fast path, 1 process |")
    print("|---|---:|---:|---:|---:|---:|")
    for path, _, n in cases:
        median = statistics.median(seconds[(path, n)])
        label = f"{n}" + (" (all)" if n == everything else "")
        print(f"| {path} | {label} | {median:.2f} | {args.prompts / median:,.0f} | {tokens / median:,.0f} | "
              f"{base / median:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
