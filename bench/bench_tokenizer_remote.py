"""Remote-code Kimi tokenizer against the fast stand-in, side by side, on the same prompts.

The remote-code stand-in (`standin:kimi-k2.5`: tokenization_kimi.TikTokenTokenizer over tiktoken, loaded with
trust_remote_code, with the real Kimi-K2.5 file's call structure: a call takes transformers' generic slow path,
whose `_tokenize` is `encode()`, which cuts long runs character by character before tiktoken) and the fast one
(`standin:kimi-k2.5-fast`: the same ranks as a tokenizer.json) tokenize the same N prompts
(bench_tokenize.build_records: the demo prompts, made distinct). Timed, interleaved per repeat so machine noise
hits them alike, medians reported:

- `tokenize_prompts(..., processes=1)`, the pipeline's whole per-prompt work (render with the tokenizer's own
  apply_chat_template, special-token guard, encode in batches, checks): with the fast stand-in, with the remote
  code through the pipeline's tiktoken fast path (tokenization/tiktoken_path.py: proven at load, one text in 64
  spot-checked against the own call), and with the remote code's own call (the default;
  the fast path is the opt-in `--tiktoken-fast-path`);
- encoding alone, of the texts the remote code rendered: the fast tokenizer's batch call, the fast path, and the
  remote code's own call `tokenizer(texts, add_special_tokens=False)` (the generic path of the real-shaped code).

Ids: the fast path's ids of every rendered prompt equal the own call's and the fast tokenizer's ids of the same
text (checked); the pipeline's ids with and without the fast path are equal on every prompt, and equal to the fast
stand-in's on the prompts without tools (tools are declared as TypeScript by the remote code, as JSON by the fast
one).

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
from eagle_datagen.tokenization.tiktoken_path import own_call  # noqa: E402
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
    remote = load_tokenizer("standin:kimi-k2.5", profile, trust_remote_code=True, announce=False,
                            tiktoken_fast_path=True)  # fmt: skip
    own = load_tokenizer("standin:kimi-k2.5", profile, trust_remote_code=True, announce=False)
    fast = load_tokenizer("standin:kimi-k2.5-fast", profile, announce=False)
    assert type(remote.tokenizer).__name__ == "TikTokenTokenizer" and fast.tokenizer.is_fast
    assert remote.tiktoken_encoding is not None and own.tiktoken_encoding is None
    records = build_records(args.prompts)
    rtok, ftok = remote.tokenizer, fast.tokenizer
    texts = [
        rtok.apply_chat_template(r.messages, tools=r.tools, add_generation_prompt=True, tokenize=False) for r in records
    ]

    variants: dict[str, Callable[[], object]] = {
        "pipeline, fast stand-in": lambda: tokenize_prompts(fast, records, 10**6, processes=1),
        "pipeline, remote code, tiktoken fast path": lambda: tokenize_prompts(remote, records, 10**6, processes=1),
        "pipeline, remote code, own call": lambda: tokenize_prompts(own, records, 10**6, processes=1),
        "encode, fast stand-in": lambda: own_call(ftok, texts),
        "encode, remote code, tiktoken fast path": lambda: remote.encoder()(texts),
        "encode, remote code, own call (generic path)": lambda: own_call(rtok, texts),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    results: dict[str, object] = {}
    for repeat in range(args.repeats):
        for name, fn in variants.items():
            seconds, results[name] = timed(fn)
            times[name].append(seconds)
        print(f"repeat {repeat + 1}/{args.repeats}: " + ", ".join(f"{n} {t[-1]:.2f}s" for n, t in times.items()))

    # ids identical
    encoded = results["encode, remote code, tiktoken fast path"]
    assert encoded == results["encode, remote code, own call (generic path)"], "fast path and own call differ"
    assert encoded == results["encode, fast stand-in"], "remote and fast ids differ on the same text"
    pipelines = {
        name: {p.record.prompt_id: p.prompt_ids for p in results[name].prompts}
        for name in variants
        if name.startswith("pipeline")
    }
    by_id_fast, by_id_remote, by_id_own = pipelines.values()
    assert set(by_id_fast) == set(by_id_remote) == set(by_id_own) == {r.prompt_id for r in records}
    assert by_id_remote == by_id_own, "the pipeline's ids differ with and without the fast path"
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
