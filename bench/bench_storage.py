"""Storage benchmark: how small the contract v1 Parquet shards are, how fast they are written and uploaded.

Inputs (`storage_inputs`; same row shape, 7 categories x --per-category samples, one category per shard):
- natural: token ids of real text from installed documentation and code, tokenized with a real byte-level
  BPE (Mistral's Tekken, 150,000 ranks; `tekken_bpe`, `natural_text`). This is the input the targets are
  judged on. It needs `apt-get install python3.11-doc postgresql-doc-15 linux-doc-6.1 debian-handbook` and
  `.venv/bin/python -m pip install --no-deps mistral-common==1.13.1`; without them the benchmark stops
  with one line that says what is missing;
- stand-in: the stand-in SGLang server's output model (Zipf ranks mapped to ids BPE-like), what the tests
  and the demo store;
- worst case: the same Zipf ranks through a random permutation of the 163,584 ordinary ids.

Measured in one run:
(a) bytes per token, for every input: of our shards (`encode_shard`), the `output_ids` column alone (its
    column chunks' compressed size from the Parquet footer, over output tokens) and whole files (over
    prompt + output tokens); of JSONL of the same rows (`json.dumps` per row, whole rows; and
    `{"output_ids": [...]}` lines for the outputs alone); and the order-0 limit, the empirical unigram
    entropy (bits / 8) of the output tokens (of all tokens, for whole rows). For the natural input also per
    text group (prose, other languages, code), against that group's own entropy.
(b) write speed on the natural input: `encode_shard` against `json.dumps` of the same rows (the baseline),
    and `samples_table` and `decode_shard`, interleaved within each of --repeats rounds; medians. MB/s
    counts uncompressed Arrow bytes (`nbytes` of the shard tables).
(c) options compared on the natural and worst-case inputs (`storage_options`): the same shards written
    with `pyarrow.parquet.write_table` and other settings, interleaved over --option-repeats rounds; each
    is checked to read back to the same table once.
(d) upload of the natural input: every shard, then the same rows as JSONL files, put to a real S3 server
    (SeaweedFS `weed mini` on 127.0.0.1) with boto3 `put_object(..., ChecksumAlgorithm="SHA256")`,
    interleaved over --upload-repeats rounds; medians.

Run (about 6 minutes on 2 cores with the defaults, 2 of them building the inputs; --quick: 2 minutes):
`.venv/bin/python bench/bench_storage.py [--per-category 1000] [--repeats 5] [--option-repeats 3]
[--upload-repeats 5] [--tekken FILE] [--quick]`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import tokenizers

from eagle_datagen.objectstore.seaweedfs import SeaweedFS
from eagle_datagen.storage.parquet import decode_shard, encode_shard, samples_table
from natural_text import token_streams
from storage_inputs import CATEGORY_GROUPS, natural_rows, standin_rows
from storage_options import OUTPUT_LEAF, column_bytes, option_variants
from tekken_bpe import MissingInput, find_tekken, tekken_tokenizer

Rows = list[dict[str, Any]]


def entropy_bytes(ids: np.ndarray) -> float:
    """Empirical unigram entropy of the ids, in bytes per token (the order-0 limit)."""
    _, counts = np.unique(ids, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum() / 8)


def jsonl(rows: Sequence[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def jsonl_outputs(rows: Sequence[dict[str, Any]]) -> bytes:
    return "".join(json.dumps({"output_ids": r["output_ids"]}) + "\n" for r in rows).encode()


def ids_of(rows: Rows, column: str) -> np.ndarray:
    return np.concatenate([np.asarray(r[column], dtype=np.int64) for r in rows])


def median_rate(amount: float, times: Sequence[float]) -> float:
    return amount / statistics.median(times)


def ratio_row(name: str, out: float, limit_out: float, whole: float, limit_all: float) -> str:
    return f"| {name} | {out:.3f} | {out / limit_out:.2f}x | {whole:.3f} | {whole / limit_all:.2f}x |"


def report_sizes(title: str, chunks: list[Rows], shards: list[bytes]) -> dict[str, float]:
    """Table (a) for one input; returns its figures."""
    rows = [r for c in chunks for r in c]
    outputs, prompts = ids_of(rows, "output_ids"), ids_of(rows, "prompt_ids")
    n_out, n_all = len(outputs), len(outputs) + len(prompts)
    limit_out, limit_all = entropy_bytes(outputs), entropy_bytes(np.concatenate([prompts, outputs]))
    ours_out = sum(column_bytes(d, OUTPUT_LEAF) for d in shards) / n_out
    ours_all = sum(map(len, shards)) / n_all
    files, output_files = [jsonl(c) for c in chunks], [jsonl_outputs(c) for c in chunks]
    jsonl_out = sum(map(len, output_files)) / n_out
    jsonl_all = sum(map(len, files)) / n_all
    zstd = pa.Codec("zstd", 3)
    zst_out = sum(len(zstd.compress(f)) for f in output_files) / n_out
    zst_all = sum(len(zstd.compress(f)) for f in files) / n_all
    print(
        f"\n### {title}: {len(rows):,} samples in {len(chunks)} shards, {n_out:,} output tokens "
        f"({len(np.unique(outputs)):,} distinct), {len(prompts):,} prompt tokens\n"
    )
    print("| | output_ids: bytes/token | vs order-0 limit | whole rows: bytes/token | vs order-0 limit |")
    print("|---|---:|---:|---:|---:|")
    print(ratio_row("order-0 limit (unigram entropy / 8)", limit_out, limit_out, limit_all, limit_all))
    print(ratio_row("**ours** (`encode_shard`)", ours_out, limit_out, ours_all, limit_all))
    print(ratio_row("JSONL", jsonl_out, limit_out, jsonl_all, limit_all))
    print(ratio_row("JSONL + zstd 3 (reference)", zst_out, limit_out, zst_all, limit_all))
    print(f"\nJSONL / ours: {jsonl_out / ours_out:.2f}x (output_ids), {jsonl_all / ours_all:.2f}x (whole rows)")
    return {"limit_out": limit_out, "limit_all": limit_all, "n_out": n_out, "n_all": n_all}


def report_groups(chunks: list[Rows], shards: list[bytes]) -> None:
    """Per text group of the natural input: ours against the group's own order-0 limit (outputs)."""
    print("\n| text group (natural input) | output tokens | order-0 limit | ours: bytes/token | vs limit |")
    print("|---|---:|---:|---:|---:|")
    for group in dict.fromkeys(CATEGORY_GROUPS.values()):
        picked = [(c, d) for c, d in zip(chunks, shards, strict=True) if CATEGORY_GROUPS[c[0]["category"]] == group]
        outputs = ids_of([r for c, _ in picked for r in c], "output_ids")
        limit = entropy_bytes(outputs)
        ours = sum(column_bytes(d, OUTPUT_LEAF) for _, d in picked) / len(outputs)
        print(f"| {group} | {len(outputs):,} | {limit:.3f} | {ours:.3f} | {ours / limit:.2f}x |")


def measure_speed(chunks: list[Rows], repeats: int) -> None:
    """Table (b): rows -> Arrow, JSONL, encode and decode, interleaved."""
    n = sum(map(len, chunks))
    build: list[float] = []
    times: dict[str, list[float]] = {"`json.dumps` (JSONL, baseline)": [], "`encode_shard`": [], "`decode_shard`": []}
    for repeat in range(repeats):
        t0 = time.perf_counter()
        tables = [samples_table(c) for c in chunks]
        build.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for c in chunks:
            jsonl(c)
        times["`json.dumps` (JSONL, baseline)"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        shards = [encode_shard(t) for t in tables]
        times["`encode_shard`"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for data in shards:
            decode_shard(data)
        times["`decode_shard`"].append(time.perf_counter() - t0)
        print(f"speed round {repeat + 1}/{repeats}", file=sys.stderr, flush=True)
    arrow = sum(t.nbytes for t in tables) / 1e6
    base = median_rate(n, times["`json.dumps` (JSONL, baseline)"])
    print(f"\n| step (natural input, {arrow:,.1f} MB as Arrow) | median (s) | samples/s | Arrow MB/s | vs json.dumps |")
    print("|---|---:|---:|---:|---:|")
    print(
        f"| `samples_table` (rows -> Arrow) | {statistics.median(build):.2f} | {median_rate(n, build):,.0f} "
        f"| {median_rate(arrow, build):,.0f} | |"
    )
    for name, t in times.items():
        print(
            f"| {name} | {statistics.median(t):.2f} | {median_rate(n, t):,.0f} | {median_rate(arrow, t):,.0f} "
            f"| {median_rate(n, t) / base:.2f}x |"
        )


def measure_options(title: str, tables: list[pa.Table], figures: dict[str, float], repeats: int) -> None:
    """Table (c) for one input."""
    variants = option_variants(tables[0].num_rows)
    arrow = sum(t.nbytes for t in tables)
    times: dict[str, list[float]] = {name: [] for name in variants}
    sizes: dict[str, tuple[int, int]] = {}
    for repeat in range(repeats):
        for name, (options, slow) in variants.items():
            if slow and repeat > 0:
                continue
            elapsed, total, out = 0.0, 0, 0
            for table in tables:
                sink = pa.BufferOutputStream()
                kwargs = options(table)
                t0 = time.perf_counter()
                pq.write_table(table, sink, **kwargs)
                elapsed += time.perf_counter() - t0
                if repeat == 0:
                    data = sink.getvalue().to_pybytes()
                    assert pq.read_table(pa.BufferReader(data)).cast(table.schema).equals(table), name
                    total, out = total + len(data), out + column_bytes(data, OUTPUT_LEAF)
            times[name].append(elapsed)
            if repeat == 0:
                sizes[name] = (total, out)
        print(f"options ({title}) round {repeat + 1}/{repeats}", file=sys.stderr, flush=True)
    ours = median_rate(arrow, times[next(k for k in variants if "(ours)" in k)])
    print(f"\n| option ({title}) | output_ids: bytes/token | vs limit | whole rows: bytes/token | vs limit ", end="")
    print("| write Arrow MB/s | write speed vs ours |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, (total, out) in sizes.items():
        rate = median_rate(arrow, times[name])
        out_bpt, all_bpt = out / figures["n_out"], total / figures["n_all"]
        print(
            f"{ratio_row(name, out_bpt, figures['limit_out'], all_bpt, figures['limit_all'])} {rate / 1e6:,.0f} "
            f"| {rate / ours:.2f}x |"
        )


def measure_uploads(chunks: list[Rows], shards: list[bytes], repeats: int) -> None:
    """Table (d): ours and JSONL of the same rows to a real S3 server, interleaved."""
    n = sum(map(len, chunks))
    payloads = {"Parquet shards (ours)": shards, "JSONL files of the same rows": [jsonl(c) for c in chunks]}
    times: dict[str, list[float]] = {name: [] for name in payloads}
    with tempfile.TemporaryDirectory(prefix="bench-storage-") as tmp, SeaweedFS(Path(tmp), buckets=["bench"]) as s3:
        client = s3.client()
        for repeat in range(repeats):
            for name, files in payloads.items():
                t0 = time.perf_counter()
                for i, body in enumerate(files):
                    key = f"r{repeat}/{name[:4]}/part-{i:05d}"
                    client.put_object(Bucket="bench", Key=key, Body=body, ChecksumAlgorithm="SHA256")
                times[name].append(time.perf_counter() - t0)
            print(f"upload round {repeat + 1}/{repeats}", file=sys.stderr, flush=True)
    print("\n| upload, natural input (put_object, SHA256 checksum) | MB | median (s) | MB/s | samples/s |")
    print("|---|---:|---:|---:|---:|")
    for name, t in times.items():
        size = sum(map(len, payloads[name])) / 1e6
        print(
            f"| {name} | {size:,.1f} | {statistics.median(t):.2f} | {size / statistics.median(t):,.1f} "
            f"| {median_rate(n, t):,.0f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-category", type=int, default=1000, help="samples per category = per shard")
    parser.add_argument("--repeats", type=int, default=5, help="rounds for encode/JSONL/decode (interleaved)")
    parser.add_argument("--option-repeats", type=int, default=3, help="rounds for the options compared")
    parser.add_argument("--upload-repeats", type=int, default=5, help="rounds of uploads (interleaved)")
    parser.add_argument("--tekken", help="Tekken vocabulary file (default: the installed mistral-common's)")
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--quick", action="store_true", help="250 samples per category, 1-2 rounds: a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.per_category, args.repeats, args.option_repeats, args.upload_repeats = 250, 2, 1, 2

    started = time.perf_counter()
    try:
        tokenizer = tekken_tokenizer(find_tekken(args.tekken))
        streams = token_streams(tokenizer, args.seed)
        inputs = {"natural": natural_rows(streams, args.per_category, args.seed)}
    except MissingInput as exc:
        sys.exit(f"bench_storage: {exc}")
    corpus = ", ".join(f"{group} {len(ids):,}" for group, ids in streams.items())
    inputs["stand-in"] = standin_rows(args.per_category, args.seed)
    inputs["worst case"] = standin_rows(args.per_category, args.seed, permuted=True)
    print(f"inputs built in {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)

    print(
        f"python {platform.python_version()}, pyarrow {pa.__version__}, numpy {np.__version__}, tokenizers "
        f"{tokenizers.__version__}, {os.cpu_count()} CPUs; {args.per_category:,} samples per category and shard; "
        f"repeats {args.repeats}/{args.option_repeats}/{args.upload_repeats}; natural-text corpus tokens: {corpus}"
    )
    chunks = {
        name: [rows[i : i + args.per_category] for i in range(0, len(rows), args.per_category)]
        for name, rows in inputs.items()
    }
    tables = {name: [samples_table(c) for c in cs] for name, cs in chunks.items()}
    shards = {name: [encode_shard(t) for t in ts] for name, ts in tables.items()}
    for name in inputs:
        for table, data in zip(tables[name], shards[name], strict=True):
            assert decode_shard(data).equals(table)
    figures = {name: report_sizes(name, chunks[name], shards[name]) for name in inputs}
    report_groups(chunks["natural"], shards["natural"])
    measure_speed(chunks["natural"], args.repeats)
    for name in ("natural", "worst case"):
        measure_options(name, tables[name], figures[name], args.option_repeats)
    measure_uploads(chunks["natural"], shards["natural"], args.upload_repeats)
    print(f"\ntotal {time.perf_counter() - started:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
