"""Soft targets' storage cost: bytes per output token of the top-k logprobs, at several k, wherever they are kept.

Input: --samples answers of the stand-in SGLang server's output model (its realistic profile: 200-600 tokens,
Zipf ranks mapped to ids as a BPE vocabulary maps them) with the top-k logprobs the stand-in returns for them
(standin/sglang/logprobs.py: the most likely token takes Beta(4, 1.2) of the probability, the rest falls off
geometrically, the ids are distinct tokens drawn by frequency rank). Real logprobs are as incompressible as
these (float32 mantissas of a continuous distribution); real top-k ids are likelier to repeat from one position
to the next than these, so the ids' figure is an upper bound.

Measured per k (bytes per output token; the k=0 row is the shard without soft targets):
- on the wire: SGLang's nested JSON (`output_token_logprobs` + `output_top_logprobs`, as json.dumps writes them);
- in checkpoints: the client's compact form (inference/logprobs.py: base64 of float32/int32 arrays, in JSON);
- in the shard: the contract's Parquet (`encode_shard`: ids PLAIN int32, logprobs float32 BYTE_STREAM_SPLIT,
  zstd 9), the whole file's growth over k=0 and the three columns' compressed size from the footer; beside it
  the same file with the logprobs PLAIN (the choice's alternative) and as float16 BYTE_STREAM_SPLIT (what a
  reader of Parquet's newer FLOAT16 type could have);
- in a jsonl export with --logprobs (export/formats.py), over the same export without.

Sizes are deterministic (the stand-in's answers are a function of the seed): one run, no medians. Run (about 2
minutes on 2 cores): `.venv/bin/python bench/bench_logprob_storage.py [--samples 500] [--k 5,10,20,50]`.
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from eagle_datagen.export.formats import jsonl_text
from eagle_datagen.export.rows import RowCounts, SeqLimit, soft_targets, training_rows
from eagle_datagen.inference.logprobs import LOGPROBS_KEY, compact
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.logprobs import LogprobRequest, logprob_fields, output_logprobs
from eagle_datagen.standin.sglang.outputs import OutputModel
from eagle_datagen.storage.parquet import LOGPROB_COLUMNS, encode_shard, samples_table, write_options

PROMPT = [163587, 3838, 374, 220, 17, 10, 17, 30, 163586, 163588, 69702, 163601, 163606]
SOFT = ("output_logprobs", "top_logprob_ids", "top_logprobs")


def answers(samples: int) -> tuple[OutputModel, list[list[int]]]:
    model = OutputModel(SimConfig())
    outputs = [model.generate(PROMPT + [i], sampling_seed=i, max_new_tokens=4096).output_ids for i in range(samples)]
    return model, outputs


def rows_with(model: OutputModel, outputs: list[list[int]], k: int) -> list[dict]:
    rows = []
    for i, output in enumerate(outputs):
        row = {
            "sample_id": f"{i:032x}",
            "record_id": None,
            "prompt_id": f"{i:064x}",
            "category": "chat",
            "sample_index": 0,
            "prompt_ids": PROMPT + [i],
            "output_ids": output,
            "finish_reason": "stop",
            "completion_tokens": len(output),
            "prompt_tokens": len(PROMPT) + 1,
            "sampling": "{}",
            "model": "moonshotai/Kimi-K2.5",
            "run_id": "bench",
        }
        if k:
            sampled, top, ids = output_logprobs(model, output, k, i)
            row |= {"output_logprobs": sampled, "top_logprob_ids": ids.reshape(-1).astype(np.int32),
                    "top_logprobs": top.reshape(-1)}  # fmt: skip
        rows.append(row)
    return rows


def parquet_bytes(table: pa.Table, encoding: str | None = None, half: bool = False) -> int:
    options = write_options(table)
    if half:  # the logprobs as float16 (a reader of Parquet's FLOAT16 type)
        for name in LOGPROB_COLUMNS:
            table = table.set_column(
                table.column_names.index(name), name, table.column(name).cast(pa.list_(pa.float16()))
            )
    if encoding is not None:
        options["column_encoding"] |= {f"{n}.list.element": encoding for n in LOGPROB_COLUMNS}
    sink = io.BytesIO()
    pq.write_table(table, sink, **options)
    return len(sink.getvalue())


def measure(model: OutputModel, outputs: list[list[int]], k: int, base: dict[str, int]) -> dict[str, float]:
    tokens = sum(map(len, outputs))
    table = samples_table(rows_with(model, outputs, k))
    data = encode_shard(table)
    group = pq.ParquetFile(pa.BufferReader(data)).metadata
    columns = sum(
        group.row_group(g).column(c).total_compressed_size
        for g in range(group.num_row_groups)
        for c in range(group.num_columns)
        if group.row_group(g).column(c).path_in_schema.split(".")[0] in SOFT
    )
    wire = checkpoint = 0
    if k:
        for i, output in enumerate(outputs):
            fields = logprob_fields(model, output, LogprobRequest(k), i)
            wire += len(json.dumps({key: fields[key] for key in ("output_token_logprobs", "output_top_logprobs")}))
            checkpoint += len(json.dumps(compact(fields)[LOGPROBS_KEY]))
    rows = training_rows(table, SeqLimit(), RowCounts())
    jsonl = len(jsonl_text(soft_targets(rows), True)) if k else len(jsonl_text(rows))
    result = {
        "k": k,
        "wire": wire / tokens,
        "checkpoint": checkpoint / tokens,
        "shard": (len(data) - base.get("shard", len(data))) / tokens,
        "columns": columns / tokens,
        "shard_plain": (parquet_bytes(table, "PLAIN") - base.get("shard", 0)) / tokens if k else 0.0,
        "shard_float16": (parquet_bytes(table, half=True) - base.get("shard", 0)) / tokens if k else 0.0,
        "jsonl": (jsonl - base.get("jsonl", jsonl)) / tokens,
        "shard_total": len(data) / tokens,
    }
    if not k:
        base |= {"shard": len(data), "jsonl": jsonl}
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--k", default="5,10,20,50")
    args = parser.parse_args(argv)
    model, outputs = answers(args.samples)
    tokens = sum(map(len, outputs))
    versions = f"Python {platform.python_version()}, pyarrow {pa.__version__}"
    print(f"{args.samples} answers, {tokens:,} output tokens; {versions}")
    base: dict[str, int] = {}
    results = [measure(model, outputs, k, base) for k in [0, *(int(k) for k in args.k.split(","))]]
    print(f"shard without soft targets: {results[0]['shard_total']:.2f} bytes per output token (prompt included)")
    print("| k | raw float32+int32 | wire (SGLang JSON) | checkpoint | shard | shard: 3 columns | shard, PLAIN floats "
          "| shard, float16 | jsonl export |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results[1:]:
        k = r["k"]
        print(
            f"| {k} | {8 * k + 4} | {r['wire']:,.0f} | {r['checkpoint']:,.0f} | {r['shard']:,.1f} "
            f"| {r['columns']:,.1f} | {r['shard_plain']:,.1f} | {r['shard_float16']:,.1f} | {r['jsonl']:,.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
