"""Remote-code Kimi tokenizer against the fast stand-in, side by side, on the same prompts.

The remote-code stand-in (`standin:kimi-k2.5`: tokenization_kimi.TikTokenTokenizer over tiktoken, loaded with
trust_remote_code, the real Kimi-K2.5 folder's shape) and the fast one (`standin:kimi-k2.5-fast`: the same ranks
as a tokenizer.json) tokenize the same N prompts (bench_tokenize.build_records: the demo prompts, made distinct).
Timed, interleaved per repeat so machine noise hits them alike, medians reported:

- `tokenize_prompts(..., processes=1)` with each tokenizer: the pipeline's whole per-prompt work (render with
  the tokenizer's own apply_chat_template, special-token guard, encode in batches, checks);
- encoding alone, of the texts the remote code rendered: the fast tokenizer's batch call, the remote code's
  batch call (tiktoken's encode_batch with special tokens), and the remote code's generic slow path
  (transformers' added-token split, one `_tokenize` per piece, ids converted one by one), which is what a
  PreTrainedTokenizer without the batched path costs.

Ids: every prompt's ids from the remote code must equal the fast tokenizer's ids of the same rendered text, and
the generic slow path's (checked; tool prompts render differently, TypeScript against JSON, so the pipeline runs
are compared on the prompts without tools and on the encoding of the same text for all).

Run: `EAGLE_DATAGEN_CACHE=... HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_tokenizer_remote.py [--prompts N]
[--repeats R]`.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import tiktoken
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tokenize import build_records  # noqa: E402
from eagle_datagen.profile import load_profile  # noqa: E402
from eagle_datagen.tokenization.loader import load_tokenizer  # noqa: E402
from eagle_datagen.tokenization.tokenize import tokenize_prompts  # noqa: E402


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    profile = load_profile("kimi-k2.5")
    remote = load_tokenizer("standin:kimi-k2.5", profile, trust_remote_code=True, announce=False)
    fast = load_tokenizer("standin:kimi-k2.5-fast", profile, announce=False)
    assert type(remote.tokenizer).__name__ == "TikTokenTokenizer" and fast.tokenizer.is_fast
    records = build_records(args.prompts)
    rtok, ftok = remote.tokenizer, fast.tokenizer
    texts = [
        rtok.apply_chat_template(r.messages, tools=r.tools, add_generation_prompt=True, tokenize=False) for r in records
    ]

    variants: dict[str, Callable[[], object]] = {
        "pipeline, fast stand-in": lambda: tokenize_prompts(fast, records, 10**6, processes=1),
        "pipeline, remote code": lambda: tokenize_prompts(remote, records, 10**6, processes=1),
        "encode, fast stand-in": lambda: ftok(texts, add_special_tokens=False)["input_ids"],
        "encode, remote code (batched)": lambda: rtok(texts, add_special_tokens=False)["input_ids"],
        "encode, remote code (generic slow path)": lambda: [
            rtok.convert_tokens_to_ids(rtok.tokenize(t)) for t in texts
        ],
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    results: dict[str, object] = {}
    for repeat in range(args.repeats):
        for name, fn in variants.items():
            seconds, results[name] = timed(fn)
            times[name].append(seconds)
        print(f"repeat {repeat + 1}/{args.repeats}: " + ", ".join(f"{n} {t[-1]:.2f}s" for n, t in times.items()))

    # ids identical
    encoded = results["encode, remote code (batched)"]
    assert encoded == results["encode, fast stand-in"], "remote and fast ids differ on the same text"
    assert encoded == results["encode, remote code (generic slow path)"], "batched and generic paths differ"
    by_id_fast = {p.record.prompt_id: p.prompt_ids for p in results["pipeline, fast stand-in"].prompts}
    by_id_remote = {p.record.prompt_id: p.prompt_ids for p in results["pipeline, remote code"].prompts}
    assert set(by_id_fast) == set(by_id_remote) == {r.prompt_id for r in records}
    plain = [r.prompt_id for r in records if not r.tools]
    assert all(by_id_fast[k] == by_id_remote[k] for k in plain), "pipeline ids differ on prompts without tools"
    assert [by_id_remote[r.prompt_id] for r in records] == encoded, "pipeline ids differ from the batch encode"

    tokens = sum(len(ids) for ids in encoded)
    print(
        f"\npython {platform.python_version()}, transformers {transformers.__version__}, tiktoken "
        f"{tiktoken.__version__}, {os.cpu_count()} CPUs, N={args.prompts:,} prompts ({len(plain):,} without tools), "
        f"{tokens:,} tokens, {args.repeats} repeats, ids identical\n"
    )
    print("| variant | median (s) | us/prompt | speed vs fast |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        med = statistics.median(values)
        base = statistics.median(times[("pipeline" if name.startswith("pipeline") else "encode") + ", fast stand-in"])
        print(f"| {name} | {med:.3f} | {med / args.prompts * 1e6:.0f} | {base / med:.2f}x |")


if __name__ == "__main__":
    main()
