"""Tokenization benchmark: `tokenize_prompts` against a plain batched `apply_chat_template` loop.

It builds N distinct prompts from the demo prompts (include/data/demo_prompts; each copy gets
" (variant i)" appended to its last message, tools kept), tokenizes them with the project's stand-in
Kimi K2.5 tokenizer and times:

- baseline: chunks of 256 records; the records without tools go through one batched
  `apply_chat_template(..., tokenize=True)` call per chunk, the records with tools one call each
  (a batched call takes only one tools list);
- ours-pN: `tokenize_prompts(..., processes=N)`, for N = 1 and each value of --processes.

Every variant must produce exactly the baseline's ids for every prompt (checked, by prompt id). The
variants are interleaved within each repeat so machine noise hits them alike; the table gives the
median wall time, prompts/s, and each variant's median throughput relative to the baseline's.

Run: `make bench`, i.e. `.venv/bin/python bench/bench_tokenize.py [--prompts N] [--repeats R]
[--processes 1,2]`, with EAGLE_DATAGEN_CACHE and HF_HUB_OFFLINE=1 set (the Makefile sets them).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import tokenizers
import transformers

from eagle_datagen.profile import load_profile
from eagle_datagen.records import PromptRecord, validate_record
from eagle_datagen.tokenization.loader import LoadedTokenizer, load_tokenizer
from eagle_datagen.tokenization.tokenize import tokenize_prompts

DEMO = Path(__file__).resolve().parents[1] / "include" / "data" / "demo_prompts"
CHUNK = 256
Ids = dict[str, list[int]]  # prompt_id -> token ids


def build_records(n: int) -> list[PromptRecord]:
    """N distinct prompts: cycle through the demo prompts, each copy's last message made unique."""
    demo = [json.loads(line) for file in sorted(DEMO.glob("*.jsonl")) for line in file.open() if line.strip()]
    records = []
    for i in range(n):
        raw = copy.deepcopy(demo[i % len(demo)])
        raw.pop("id", None)
        raw["messages"][-1]["content"] += f" (variant {i})"
        record = validate_record(raw, origin=f"bench:{i + 1}")
        assert isinstance(record, PromptRecord), record
        records.append(record)
    assert len({r.prompt_id for r in records}) == n
    return records


def baseline(loaded: LoadedTokenizer, records: Sequence[PromptRecord]) -> Ids:
    tok, ids = loaded.tokenizer, {}
    for start in range(0, len(records), CHUNK):
        chunk = records[start : start + CHUNK]
        plain = [r for r in chunk if not r.tools]
        if plain:
            batch = tok.apply_chat_template(
                [r.messages for r in plain], add_generation_prompt=True, tokenize=True, return_dict=False
            )
            ids.update((r.prompt_id, list(x)) for r, x in zip(plain, batch, strict=True))
        for r in chunk:
            if r.tools:
                ids[r.prompt_id] = list(
                    tok.apply_chat_template(
                        r.messages, tools=r.tools, add_generation_prompt=True, tokenize=True, return_dict=False
                    )
                )
    return ids


def ours(processes: int) -> Callable[[LoadedTokenizer, Sequence[PromptRecord]], Ids]:
    def run(loaded: LoadedTokenizer, records: Sequence[PromptRecord]) -> Ids:
        result = tokenize_prompts(loaded, records, max_prompt_tokens=32768, processes=processes)
        assert not result.rejects, result.rejects[:3]
        return {p.record.prompt_id: p.prompt_ids for p in result.prompts}

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=10_000, help="number of distinct prompts")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (variants interleaved)")
    parser.add_argument("--processes", default="1,2", help="comma-separated process counts for ours")
    args = parser.parse_args()

    loaded = load_tokenizer("standin:kimi-k2.5", load_profile("kimi-k2.5"), trust_remote_code=True)
    records = build_records(args.prompts)
    counts = sorted({1, *(int(p) for p in args.processes.split(","))})
    variants = {"baseline (plain loop)": baseline} | {f"ours, processes={p}": ours(p) for p in counts}

    warm = records[:CHUNK]  # compile the chat template once before timing anything
    expected_warm = baseline(loaded, warm)
    assert ours(1)(loaded, warm) == expected_warm

    times: dict[str, list[float]] = {name: [] for name in variants}
    expected: Ids | None = None
    for repeat in range(args.repeats):
        for name, fn in variants.items():
            started = time.perf_counter()
            ids = fn(loaded, records)
            times[name].append(time.perf_counter() - started)
            if expected is None:
                expected = ids
            assert ids == expected, f"{name} differs from the baseline"
        print(
            f"repeat {repeat + 1}/{args.repeats}: " + ", ".join(f"{name} {t[-1]:.2f}s" for name, t in times.items()),
            flush=True,
        )

    print(
        f"\npython {platform.python_version()}, transformers {transformers.__version__}, "
        f"tokenizers {tokenizers.__version__}, {os.cpu_count()} CPUs, N={args.prompts:,} prompts, "
        f"{args.repeats} repeats, {sum(len(v) for v in expected.values()):,} tokens, ids identical\n"
    )
    base_rate = args.prompts / statistics.median(times["baseline (plain loop)"])
    print("| variant | median wall (s) | prompts/s | vs baseline |")
    print("|---|---:|---:|---:|")
    for name, t in times.items():
        rate = args.prompts / statistics.median(t)
        print(f"| {name} | {statistics.median(t):.2f} | {rate:,.0f} | {rate / base_rate:.2f}x |")


if __name__ == "__main__":
    main()
