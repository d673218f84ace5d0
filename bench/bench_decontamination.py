"""Benchmark decontamination at scale: 200,000 prompts against 20,000 benchmark items.

Ours: `BenchmarkIndex` (sorted array of hashed 13-grams, prompts hashed and looked up in numpy batches).
Baseline: the usual script, a Python set of 13-word tuples and a loop over each prompt's windows. Both see
the same normalised words; every repeat checks that both flag exactly the same prompts, and that these are
the prompts built to embed a benchmark span, before its times count. Variants alternate within each repeat;
the median of the repeats is reported.

Synthetic text: words drawn from a Zipf distribution over a 50,000-word vocabulary (so common words repeat
as in prose), benchmark items of 40-200 words, prompts of 20-300 words; 1% of the prompts embed a 20-word
span of a random benchmark item.

    .venv/bin/python bench/bench_decontamination.py      # --prompts 200000 --items 20000 --repeats 3
                                                          # --near-duplicates 50000: time the MinHash filter too
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np

from eagle_datagen.sources.benchmarks import DEFAULT_NGRAM, BenchmarkItem
from eagle_datagen.sources.decontamination import BenchmarkIndex
from eagle_datagen.sources.text import words

SEED = 20261201
VOCABULARY = 50_000


def _texts(rng: np.random.Generator, count: int, low: int, high: int, vocab: np.ndarray) -> list[list[str]]:
    lengths = rng.integers(low, high + 1, count)
    ranks = np.minimum(rng.zipf(1.2, int(lengths.sum())), VOCABULARY) - 1
    flat = vocab[ranks].tolist()
    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    return [flat[bounds[i] : bounds[i + 1]] for i in range(count)]


def build_inputs(prompts: int, items: int, seed: int = SEED) -> tuple[list[BenchmarkItem], list[str], set[int]]:
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(VOCABULARY)])
    item_words = _texts(rng, items, 40, 200, vocab)
    bench = [BenchmarkItem("synthetic", f"item{i}", (" ".join(w),)) for i, w in enumerate(item_words)]
    prompt_words = _texts(rng, prompts, 20, 300, vocab)
    planted = set(rng.choice(prompts, prompts // 100, replace=False).tolist())
    for i in planted:
        source = item_words[int(rng.integers(items))]
        start = int(rng.integers(0, len(source) - 20 + 1))
        at = int(rng.integers(0, len(prompt_words[i]) + 1))
        prompt_words[i] = prompt_words[i][:at] + source[start : start + 20] + prompt_words[i][at:]
    return bench, [" ".join(w) for w in prompt_words], planted


def ours(bench: list[BenchmarkItem], prompts: list[str], n: int) -> tuple[set[int], float, float, float]:
    start = time.perf_counter()
    index = BenchmarkIndex(bench, n)
    built, cpu = time.perf_counter(), time.process_time()
    found = index.find([[p] for p in prompts])
    flagged = {i for i, hit in enumerate(found) if hit is not None}
    return flagged, built - start, time.perf_counter() - built, time.process_time() - cpu


def baseline(bench: list[BenchmarkItem], prompts: list[str], n: int) -> tuple[set[int], float, float, float]:
    start = time.perf_counter()
    grams = _tuple_set(bench, n)
    built, cpu = time.perf_counter(), time.process_time()
    flagged = set()
    for index, prompt in enumerate(prompts):
        w = words(prompt)
        if any(tuple(w[i : i + n]) in grams for i in range(len(w) - n + 1)):
            flagged.add(index)
    return flagged, built - start, time.perf_counter() - built, time.process_time() - cpu


def index_memory(bench: list[BenchmarkItem], n: int) -> dict[str, float]:
    """MiB each index holds once built (tracemalloc: Python objects and numpy arrays alike)."""
    import tracemalloc

    sizes = {}
    for name, build in (("baseline (set of tuples)", _tuple_set), ("ours (hashed n-gram index)", BenchmarkIndex)):
        tracemalloc.start()
        index = build(bench, n)
        sizes[name] = tracemalloc.get_traced_memory()[0] / 2**20
        tracemalloc.stop()
        del index
    return sizes


def _tuple_set(bench: list[BenchmarkItem], n: int) -> set[tuple[str, ...]]:
    grams: set[tuple[str, ...]] = set()
    for item in bench:
        w = words(item.texts[0])
        grams.update(tuple(w[i : i + n]) for i in range(len(w) - n + 1))
    return grams


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=200_000)
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--near-duplicates", type=int, default=0, metavar="N", help="also time the MinHash filter")
    args = parser.parse_args()
    t0 = time.perf_counter()
    bench, prompts, planted = build_inputs(args.prompts, args.items)
    total_words = sum(len(p.split()) for p in prompts)
    print(
        f"inputs: {len(prompts):,} prompts ({total_words:,} words), {len(bench):,} items, {len(planted):,} "
        f"planted overlaps; built in {time.perf_counter() - t0:.1f}s",
        flush=True,
    )
    times: dict[str, list[tuple[float, float, float]]] = {
        "baseline (set of tuples)": [],
        "ours (hashed n-gram index)": [],
    }
    for repeat in range(args.repeats):
        results = {}
        for name, run in zip(times, (baseline, ours), strict=True):
            flagged, build_s, find_s, cpu_s = run(bench, prompts, DEFAULT_NGRAM)
            results[name] = flagged
            times[name].append((build_s, find_s, cpu_s))
            print(
                f"repeat {repeat + 1} {name}: index {build_s:.2f}s, check {find_s:.2f}s wall, {cpu_s:.2f}s cpu, "
                f"flagged {len(flagged):,}",
                flush=True,
            )
        reference = results["baseline (set of tuples)"]
        assert results["ours (hashed n-gram index)"] == reference, "ours and the baseline flag different prompts"
        assert planted <= reference, "a planted overlap was missed"
    base_cpu = statistics.median(c for _, _, c in times["baseline (set of tuples)"])
    print(f"\nPython {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, cpus {_cpus()}")
    memory = index_memory(bench, DEFAULT_NGRAM)
    print(
        "| variant | index build (s) | index memory (MiB) | check, wall (s) | check, CPU (s) | prompts/s (wall) "
        "| prompts/s (CPU) | vs baseline (CPU) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, runs in times.items():
        build = statistics.median(b for b, _, _ in runs)
        find = statistics.median(f for _, f, _ in runs)
        cpu = statistics.median(c for _, _, c in runs)
        print(
            f"| {name} | {build:.2f} | {memory[name]:,.0f} | {find:.2f} | {cpu:.2f} | {len(prompts) / find:,.0f} | "
            f"{len(prompts) / cpu:,.0f} | {base_cpu / cpu:.2f}x |"
        )
    if args.near_duplicates:
        near_duplicates(prompts, args.near_duplicates)


def near_duplicates(prompts: list[str], count: int) -> None:
    """The near-duplicate filter (MinHash, default settings) over `count` of the prompts plus a copy of every
    tenth with one word changed: it must find exactly those copies."""
    from eagle_datagen.sources.near_duplicates import find_near_duplicates

    texts = prompts[:count]
    copies = []
    for i in range(0, count, 10):
        w = texts[i].split()
        copies.append(" ".join(w[: len(w) // 2] + ["changed"] + w[len(w) // 2 + 1 :]))
    wall, cpu = time.perf_counter(), time.process_time()
    found = find_near_duplicates(texts + copies)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    copied = {count + j for j in range(len(copies)) if len(texts[10 * j].split()) >= 30}
    flagged = {d.index for d in found}
    print(
        f"\nnear-duplicates: {len(texts) + len(copies):,} prompts in {wall:.2f}s wall, {cpu:.2f}s CPU "
        f"({(len(texts) + len(copies)) / cpu:,.0f} prompts/s of CPU); {len(found):,} found, "
        f"{len(copied & flagged):,} of the {len(copied):,} one-word copies of prompts of 30+ words, "
        f"{len(flagged - set(range(count, count + len(copies)))):,} among the originals"
    )


def _cpus() -> int:
    import os

    return os.cpu_count() or 1


if __name__ == "__main__":
    main()
