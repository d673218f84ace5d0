"""Export benchmark: rows/s and MB/s of `eagle-datagen export` in every format, against the plain JSONL export.

Input: a published run under a temporary local output root, 7 categories x --per-category samples of the
stand-in server's output model (`storage_inputs.standin_rows`: prompts of 100-2,000 tokens, outputs up to
2,048), one shard per category (as a run with --shard-size of that many prompts writes them), with its
draft vocabulary. Variants, interleaved within each of --repeats rounds (medians reported):
- baseline: the JSONL export as it was before the formats (`to_pylist()` of each shard, then `json.dumps`
  of a dict per row), kept here as `jsonl_export_before`;
- `run_export` in each format (jsonl, speculators, specforge, torchspec, hf), to a fresh folder each time;
  and speculators with --shuffle-seed 0 and --max-seq-len 1024 (the staging file and the cut).
Each variant's rows are checked against the baseline's once (same sample ids and ids/mask per row) before
the times count. rows/s counts exported rows; MB/s counts the export's bytes on disk (its data files,
maps and metadata) per second; "input MB/s" counts the run's Parquet bytes read per second.

Run (about a minute on 2 cores with the defaults):
`.venv/bin/python bench/bench_export.py [--per-category 500] [--repeats 5]`.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from eagle_datagen.export.rows import SeqLimit
from eagle_datagen.export.stage import ExportOptions, run_export
from eagle_datagen.stats.draft_vocab import build_draft_vocab
from eagle_datagen.stats.statistics import TokenCounter
from eagle_datagen.storage.manifest import Manifest, ManifestFile, read_manifest, run_artifact_key, write_manifest
from eagle_datagen.storage.objects import StoredObject, put_once, sha256_hex
from eagle_datagen.storage.output_root import LocalOutputRoot
from eagle_datagen.storage.parquet import decode_shard, encode_shard, samples_table
from storage_inputs import MODEL, standin_rows

VOCAB = 163_840


def publish_bench_run(root: LocalOutputRoot, per_category: int) -> int:
    rows = standin_rows(per_category, seed=7)
    files, tokens = [], TokenCounter(VOCAB)
    for category in dict.fromkeys(r["category"] for r in rows):
        table = samples_table([r for r in rows if r["category"] == category])
        tokens.add(table)
        stored = put_once(root, f"data/category={category}/run=bench/part-00000.parquet", encode_shard(table))
        files.append(ManifestFile.of(stored, "data", rows=table.num_rows, category=category))
    draft = build_draft_vocab(tokens.counts, min(32000, tokens.distinct))
    payload = draft.to_safetensors_bytes()
    key = run_artifact_key("bench", "draft_vocab.safetensors")
    root.write_bytes(key, payload)
    files.append(ManifestFile.of(StoredObject(key, sha256_hex(payload), len(payload)), "draft_vocab"))
    counts = {"samples": len(rows), "data": len(rows), "quarantine": 0, "reasons": {}}
    write_manifest(root, Manifest("bench", MODEL, "kimi-k2.5", {"servers": [{}]}, {}, counts, files))
    return len(rows)


def jsonl_export_before(root: LocalOutputRoot, run_id: str, target: Path) -> int:
    """The export before the formats: every shard to Python lists, a dict per row, json.dumps."""
    manifest = read_manifest(root, run_id)
    assert manifest is not None
    count = 0
    with open(target, "w", encoding="utf-8") as handle:
        for entry in manifest["files"]:
            if entry["kind"] != "data":
                continue
            data = root.read_bytes(entry["key"])
            assert sha256_hex(data) == entry["sha256"]
            table = decode_shard(data).select(["sample_id", "category", "prompt_ids", "output_ids"])
            for row in table.to_pylist():
                prompt, output = row["prompt_ids"], row["output_ids"]
                line = {
                    "sample_id": row["sample_id"],
                    "category": row["category"],
                    "input_ids": prompt + output,
                    "loss_mask": [0] * len(prompt) + [1] * len(output),
                }
                handle.write(json.dumps(line, separators=(",", ":")) + "\n")
                count += 1
    return count


def folder_bytes(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def rows_of(path: Path, fmt: str) -> list[tuple[str, list[int], list[int]]]:
    """What a variant wrote, for the one-time check against the baseline."""
    if fmt == "jsonl":
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        return [(r["sample_id"], r["input_ids"], r["loss_mask"]) for r in lines]
    if fmt == "specforge":
        return rows_of(path / "train.jsonl", "jsonl")
    ids = (path / "sample_ids.txt").read_text().split()
    if fmt == "torchspec":
        table = pq.read_table(path / "train.parquet")
    else:
        table = pa.concat_tables(pa.ipc.open_stream(f).read_all() for f in sorted(path.glob("data-*.arrow")))
    return list(zip(ids, table.column("input_ids").to_pylist(), table.column("loss_mask").to_pylist(), strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-category", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-export-"))
    try:
        root = LocalOutputRoot(str(work / "root"))
        samples = publish_bench_run(root, args.per_category)
        input_bytes = sum(p.stat().st_size for p in (work / "root" / "data").rglob("*.parquet"))
        tokens = sum(
            len(r) for f in (work / "root" / "data").rglob("*.parquet")
            for r in pq.read_table(f, columns=["prompt_ids"]).column("prompt_ids").to_pylist()
        ) + sum(
            len(r) for f in (work / "root" / "data").rglob("*.parquet")
            for r in pq.read_table(f, columns=["output_ids"]).column("output_ids").to_pylist()
        )  # fmt: skip
        variants: dict[str, tuple[str, Callable[[Path], int]]] = {
            "baseline: jsonl before": ("jsonl", lambda out: jsonl_export_before(root, "bench", out)),
        }
        for fmt in ("jsonl", "speculators", "specforge", "torchspec", "hf"):
            variants[fmt] = (fmt, lambda out, fmt=fmt: run_export(root, ExportOptions(fmt, str(out), "bench")).rows)
        variants["speculators, shuffled, cut 1024"] = (
            "speculators",
            lambda out: (
                run_export(
                    root, ExportOptions("speculators", str(out), "bench", limit=SeqLimit(1024), shuffle_seed=0)
                ).rows
            ),
        )
        baseline_rows = None
        times: dict[str, list[float]] = {name: [] for name in variants}
        sizes: dict[str, int] = {}
        counts: dict[str, int] = {}
        for repeat in range(args.repeats):
            for name, (fmt, export) in variants.items():
                out = work / f"out-{repeat}-{len(times[name])}-{fmt}" / ("x.jsonl" if fmt == "jsonl" else "x")
                out.parent.mkdir()
                start = time.perf_counter()
                counts[name] = export(out)
                times[name].append(time.perf_counter() - start)
                sizes[name] = folder_bytes(out)
                if repeat == 0 and "cut" not in name:
                    written = sorted(rows_of(out, fmt))
                    baseline_rows = baseline_rows or written
                    assert written == baseline_rows, f"{name} wrote other rows than the baseline"
                shutil.rmtree(out.parent)
        base = statistics.median(times["baseline: jsonl before"])
        print(
            f"{samples:,} samples ({tokens:,} tokens, {input_bytes / 1e6:.1f} MB of Parquet), {args.repeats} repeats; "
            f"Python {platform.python_version()}, pyarrow {pa.__version__}, numpy {np.__version__}"
        )
        print("| variant | median wall (s) | rows/s | output MB | MB/s written | input MB/s | vs baseline |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name in variants:
            wall = statistics.median(times[name])
            print(
                f"| {name} | {wall:.2f} | {counts[name] / wall:,.0f} | {sizes[name] / 1e6:.1f} | "
                f"{sizes[name] / 1e6 / wall:.1f} | {input_bytes / 1e6 / wall:.1f} | {base / wall:.2f}x |"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
