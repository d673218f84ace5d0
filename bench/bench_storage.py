"""Storage benchmark: how small the contract v1 Parquet shards are, how fast they are written and uploaded.

Input: N samples shaped like the pipeline's, from the stand-in SGLang output model (`OutputModel` with the
default `SimConfig`: 200-600 output ids, Zipf(1.1) over 163,584 ordinary ids through a fixed permutation,
</think> at ~70%, EOS last), so the token distribution is the one the pipeline stores. Prompts are 100-2000
ids drawn from the same Zipf law between a chat-template-like prefix and the trailing <think>. Every row
has all SAMPLE_SCHEMA columns (sample_id from `make_sample_id`, 7 categories, sampling JSON, ...). Rows
are cut into shards of --shard-size samples (the `run` command's default shard size is 1,000 prompts) and
each shard is built with `samples_table`, as the publish step does.

Measured in one run:
(a) bytes per token: of our shards (`encode_shard`), both the `output_ids` column alone (its column chunks'
    compressed size from the Parquet footer, over output tokens) and whole files (over prompt + output
    tokens); of JSONL of the same rows (`json.dumps` per row, whole rows; and `{"output_ids": [...]}` lines
    for the outputs alone); and the order-0 limit, the empirical unigram entropy of the tokens (bits / 8),
    of the output tokens (and of all tokens, for whole rows). Ratios ours/limit and JSONL/ours.
(b) write speed: `encode_shard` over all shards, against `json.dumps` of the same rows as the baseline,
    interleaved within each of --repeats rounds; medians. MB/s is uncompressed Arrow bytes (`nbytes` of the
    shard tables) per second. Also `samples_table` (rows -> Arrow) and `decode_shard`.
(c) options compared: the same shards written with `pyarrow.parquet.write_table` and other settings (zstd
    levels, dictionary on/off for the id columns, BYTE_STREAM_SPLIT, DELTA_BINARY_PACKED, page size, row
    group size, statistics, shard size), interleaved over --option-repeats rounds; every option is checked
    to read back to the same table once.
(d) upload: every shard, then the same rows as JSONL files, put to a real S3 server (SeaweedFS `weed mini`
    on 127.0.0.1, started by `eagle_datagen.objectstore.seaweedfs.SeaweedFS`) with boto3 `put_object(...,
    ChecksumAlgorithm="SHA256")`, interleaved over --upload-repeats rounds; medians of MB/s and samples/s.

Run (about 5 minutes with the defaults on 2 cores; --quick is a ~30-second smoke run):
`.venv/bin/python bench/bench_storage.py [--samples 20000] [--shard-size 1000] [--repeats 5]
[--option-repeats 3] [--upload-repeats 5] [--quick]`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from eagle_datagen.inference.samples import make_sample_id
from eagle_datagen.objectstore.seaweedfs import SeaweedFS
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.outputs import OutputModel
from eagle_datagen.storage.parquet import (
    COMPRESSION_LEVEL,
    TOKEN_COLUMNS,
    decode_shard,
    encode_shard,
    samples_table,
    write_options,
)

CATEGORIES = ["chat", "code", "math", "multilingual", "reasoning", "tool_use", "writing"]
MODEL = "moonshotai/Kimi-K2.5"
SAMPLING = {"max_new_tokens": 2048, "temperature": 1.0, "top_p": 0.95}
# a chat-template-like frame around the prompt body: <|im_system|>system<|im_middle|>... <think> at the end
PROMPT_PREFIX = [163587, 2002, 163601]
PROMPT_SUFFIX = [163586, 163588, 69702, 163601, 163606]
OUTPUT_LEAF = "output_ids.list.element"
LEAVES = [f"{c}.list.element" for c in TOKEN_COLUMNS]


def make_rows(n: int, seed: int) -> list[dict[str, Any]]:
    config = SimConfig()
    model = OutputModel(config)
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        body = model.ordinary_tokens(rng, int(rng.integers(100, 2001)) - len(PROMPT_PREFIX) - len(PROMPT_SUFFIX))
        prompt = PROMPT_PREFIX + body.tolist() + PROMPT_SUFFIX
        category = CATEGORIES[i % len(CATEGORIES)]
        prompt_id = hashlib.sha256(f"bench-prompt-{seed}-{i}".encode()).hexdigest()
        sample_id = make_sample_id(prompt_id, 0, MODEL, SAMPLING)
        out = model.generate(prompt, sampling_seed=int(sample_id[:15], 16), sample_index=0, max_new_tokens=2048)
        rows.append(
            {
                "sample_id": sample_id,
                "record_id": f"{category}-{i:06d}",
                "prompt_id": prompt_id,
                "category": category,
                "sample_index": 0,
                "prompt_ids": prompt,
                "output_ids": out.output_ids,
                "finish_reason": out.finish_reason["type"],
                "completion_tokens": len(out.output_ids),
                "prompt_tokens": len(prompt),
                "reasoning_tokens": out.output_ids.index(config.think_end_id),
                "sampling": json.dumps(SAMPLING, sort_keys=True),
                "model": MODEL,
                "run_id": "bench",
                "weight_version": "default",
            }
        )
    return rows


def entropy_bytes(ids: np.ndarray) -> float:
    """Empirical unigram entropy of the ids, in bytes per token (the order-0 limit)."""
    _, counts = np.unique(ids, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum() / 8)


def column_bytes(data: bytes, leaf: str) -> int:
    """Compressed bytes of one column's chunks, from the Parquet footer."""
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    total = 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            if group.column(c).path_in_schema == leaf:
                total += group.column(c).total_compressed_size
    return total


def jsonl(rows: Sequence[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def jsonl_outputs(rows: Sequence[dict[str, Any]]) -> bytes:
    return "".join(json.dumps({"output_ids": r["output_ids"]}) + "\n" for r in rows).encode()


# Options compared in (c): name -> (kwargs for write_table, given our own write_options; samples per shard).
Options = Callable[[pa.Table], dict[str, Any]]


def ours_with(**changes: Any) -> Options:
    return lambda table: write_options(table) | changes


def without_token_dictionary(**changes: Any) -> Options:
    def options(table: pa.Table) -> dict[str, Any]:
        base = write_options(table)
        return base | {"use_dictionary": [c for c in base["use_dictionary"] if c not in LEAVES]} | changes

    return options


def option_variants(shard_size: int) -> dict[str, tuple[Options, int]]:
    n = shard_size
    variants: dict[str, tuple[Options, int]] = {
        "pyarrow defaults (zstd level 1, dictionary; today's generated/ writer)": (
            lambda t: {"compression": "zstd"},
            n,
        ),
        "no compression, dictionary": (
            lambda t: {k: v for k, v in write_options(t).items() if k != "compression_level"} | {"compression": "none"},
            n,
        ),
    }
    for level in (1, 3, 6, 9, 12, 19):
        mark = " (ours)" if level == COMPRESSION_LEVEL else ""
        variants[f"dictionary, zstd {level}{mark}"] = (ours_with(compression_level=level), n)
    for level in (3, 9, 19):
        variants[f"PLAIN ids, zstd {level}"] = (without_token_dictionary(compression_level=level), n)
    for level in (3, 9):
        variants[f"BYTE_STREAM_SPLIT ids, zstd {level}"] = (
            without_token_dictionary(compression_level=level, use_byte_stream_split=LEAVES),
            n,
        )
    variants["DELTA_BINARY_PACKED ids, zstd 9"] = (
        without_token_dictionary(compression_level=9, column_encoding=dict.fromkeys(LEAVES, "DELTA_BINARY_PACKED")),
        n,
    )
    variants["dictionary, zstd 9, statistics on ids"] = (ours_with(write_statistics=True), n)
    variants["dictionary, zstd 9, 64 KiB pages"] = (ours_with(data_page_size=64 * 2**10), n)
    variants["dictionary, zstd 9, 8 MiB pages"] = (ours_with(data_page_size=8 * 2**20), n)
    variants[f"dictionary, zstd 9, row groups of {max(1, n // 4):,} samples"] = (
        ours_with(row_group_size=max(1, n // 4)),
        n,
    )
    for bigger in (5 * n, 20 * n):
        variants[f"dictionary, zstd 9, shards of {bigger:,} samples"] = (ours_with(), bigger)
    return variants


def regroup(tables: Sequence[pa.Table], per_shard: int, shard_size: int) -> list[pa.Table]:
    k = max(1, per_shard // shard_size)
    return [pa.concat_tables(tables[i : i + k]).combine_chunks() for i in range(0, len(tables), k)]


def median_rate(amount: float, times: Sequence[float]) -> float:
    return amount / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--shard-size", type=int, default=1000, help="samples per shard (run's default: 1000)")
    parser.add_argument("--repeats", type=int, default=5, help="rounds for encode/JSONL/decode (interleaved)")
    parser.add_argument("--option-repeats", type=int, default=3, help="rounds for the options compared")
    parser.add_argument("--upload-repeats", type=int, default=5, help="rounds of uploads (interleaved)")
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--quick", action="store_true", help="4,000 samples, 2 rounds each: a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.samples, args.repeats, args.option_repeats, args.upload_repeats = 4000, 2, 1, 2

    started = time.perf_counter()
    rows = make_rows(args.samples, args.seed)
    chunks = [rows[i : i + args.shard_size] for i in range(0, len(rows), args.shard_size)]
    print(f"generated {len(rows):,} samples in {time.perf_counter() - started:.1f}s", flush=True)

    outputs = np.concatenate([np.asarray(r["output_ids"], dtype=np.int64) for r in rows])
    prompts = np.concatenate([np.asarray(r["prompt_ids"], dtype=np.int64) for r in rows])
    n_out, n_all = len(outputs), len(outputs) + len(prompts)
    limit_out = entropy_bytes(outputs)
    limit_all = entropy_bytes(np.concatenate([prompts, outputs]))

    # (b) ours vs JSONL, interleaved
    build_times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        tables = [samples_table(c) for c in chunks]
        build_times.append(time.perf_counter() - t0)
    arrow_bytes = sum(t.nbytes for t in tables)
    shards = [encode_shard(t) for t in tables]
    for table, data in zip(tables, shards, strict=True):
        assert decode_shard(data).equals(table) and pq.read_table(pa.BufferReader(data)).num_rows == table.num_rows
    times: dict[str, list[float]] = {"json.dumps (JSONL)": [], "encode_shard": [], "decode_shard": []}
    for repeat in range(args.repeats):
        t0 = time.perf_counter()
        jsonl_files = [jsonl(c) for c in chunks]
        times["json.dumps (JSONL)"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for t in tables:
            encode_shard(t)
        times["encode_shard"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for data in shards:
            decode_shard(data)
        times["decode_shard"].append(time.perf_counter() - t0)
        print(
            f"repeat {repeat + 1}/{args.repeats}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items()),
            flush=True,
        )
    ours_all = sum(map(len, shards))
    ours_out = sum(column_bytes(d, OUTPUT_LEAF) for d in shards)
    jsonl_all = sum(map(len, jsonl_files))
    jsonl_out = sum(len(jsonl_outputs(c)) for c in chunks)
    zstd = pa.Codec("zstd", 3)
    jsonl_zst_all = sum(len(zstd.compress(f)) for f in jsonl_files)
    jsonl_zst_out = sum(len(zstd.compress(jsonl_outputs(c))) for c in chunks)

    # (c) options
    variants = option_variants(args.shard_size)
    groups = {size: regroup(tables, size, args.shard_size) for _, size in variants.values()}
    option_times: dict[str, list[float]] = {name: [] for name in variants}
    option_sizes: dict[str, tuple[int, int]] = {}
    for repeat in range(args.option_repeats):
        for name, (options, size) in variants.items():
            total = out = 0
            elapsed = 0.0
            for table in groups[size]:
                sink = pa.BufferOutputStream()
                kwargs = options(table)
                t0 = time.perf_counter()
                pq.write_table(table, sink, **kwargs)
                elapsed += time.perf_counter() - t0
                data = sink.getvalue().to_pybytes()
                if repeat == 0:
                    assert pq.read_table(pa.BufferReader(data)).cast(table.schema).equals(table), name
                    total += len(data)
                    out += column_bytes(data, OUTPUT_LEAF)
            option_times[name].append(elapsed)
            if repeat == 0:
                option_sizes[name] = (total, out)
        print(f"options round {repeat + 1}/{args.option_repeats} done", flush=True)

    # (d) uploads, interleaved ours / JSONL
    upload_times: dict[str, list[float]] = {"Parquet shards (ours)": [], "JSONL files": []}
    payloads = {"Parquet shards (ours)": shards, "JSONL files": jsonl_files}
    with tempfile.TemporaryDirectory(prefix="bench-storage-") as tmp, SeaweedFS(Path(tmp), buckets=["bench"]) as s3:
        client = s3.client()
        for repeat in range(args.upload_repeats):
            for name, files in payloads.items():
                t0 = time.perf_counter()
                for i, body in enumerate(files):
                    client.put_object(
                        Bucket="bench", Key=f"r{repeat}/{name[:4]}/part-{i:05d}", Body=body, ChecksumAlgorithm="SHA256"
                    )
                upload_times[name].append(time.perf_counter() - t0)
            print(
                f"upload round {repeat + 1}/{args.upload_repeats}: "
                + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in upload_times.items()),
                flush=True,
            )

    n = len(rows)
    print(
        f"\npython {platform.python_version()}, pyarrow {pa.__version__}, numpy {np.__version__}, "
        f"{os.cpu_count()} CPUs; {n:,} samples in {len(chunks)} shards of {args.shard_size:,}; "
        f"{n_out:,} output tokens ({len(np.unique(outputs)):,} distinct), {len(prompts):,} prompt tokens; "
        f"Arrow {arrow_bytes / 1e6:,.1f} MB; repeats {args.repeats}/{args.option_repeats}/{args.upload_repeats}\n"
    )

    print("| | output_ids: bytes/token | vs order-0 limit | whole rows: bytes/token | vs order-0 limit |")
    print("|---|---:|---:|---:|---:|")
    print(f"| order-0 limit (unigram entropy / 8) | {limit_out:.3f} | 1.00x | {limit_all:.3f} | 1.00x |")
    print(
        f"| ours (`encode_shard`) | {ours_out / n_out:.3f} | {ours_out / n_out / limit_out:.2f}x "
        f"| {ours_all / n_all:.3f} | {ours_all / n_all / limit_all:.2f}x |"
    )
    print(
        f"| JSONL | {jsonl_out / n_out:.3f} | {jsonl_out / n_out / limit_out:.2f}x "
        f"| {jsonl_all / n_all:.3f} | {jsonl_all / n_all / limit_all:.2f}x |"
    )
    print(
        f"| JSONL + zstd 3 (reference) | {jsonl_zst_out / n_out:.3f} | {jsonl_zst_out / n_out / limit_out:.2f}x "
        f"| {jsonl_zst_all / n_all:.3f} | {jsonl_zst_all / n_all / limit_all:.2f}x |"
    )
    print(f"\nJSONL / ours: {jsonl_out / ours_out:.2f}x (output_ids), {jsonl_all / ours_all:.2f}x (whole rows)\n")

    base = median_rate(n, times["json.dumps (JSONL)"])
    print("| step | median (s) | samples/s | Arrow MB/s | vs json.dumps |")
    print("|---|---:|---:|---:|---:|")
    print(
        f"| samples_table (rows -> Arrow) | {statistics.median(build_times):.2f} "
        f"| {median_rate(n, build_times):,.0f} | {median_rate(arrow_bytes / 1e6, build_times):,.0f} | |"
    )
    for name, t in times.items():
        print(
            f"| {name} | {statistics.median(t):.2f} | {median_rate(n, t):,.0f} "
            f"| {median_rate(arrow_bytes / 1e6, t):,.0f} | {median_rate(n, t) / base:.2f}x |"
        )

    ours_name = next(k for k in variants if k.endswith("(ours)"))
    ours_rate = median_rate(arrow_bytes, option_times[ours_name])
    print(
        "\n| option | output_ids: bytes/token | vs limit | whole rows: bytes/token | write Arrow MB/s "
        "| write speed vs ours |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, (total, out) in option_sizes.items():
        rate = median_rate(arrow_bytes, option_times[name])
        print(
            f"| {name} | {out / n_out:.3f} | {out / n_out / limit_out:.2f}x | {total / n_all:.3f} "
            f"| {rate / 1e6:,.0f} | {rate / ours_rate:.2f}x |"
        )

    print("\n| upload (put_object, SHA256 checksum) | MB | median (s) | MB/s | samples/s |")
    print("|---|---:|---:|---:|---:|")
    for name, t in upload_times.items():
        size = sum(map(len, payloads[name])) / 1e6
        print(
            f"| {name} | {size:,.1f} | {statistics.median(t):.2f} | {size / statistics.median(t):,.1f} "
            f"| {median_rate(n, t):,.0f} |"
        )


if __name__ == "__main__":
    main()
