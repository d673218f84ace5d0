"""Resume benchmark (issue 22): how long a resumed run takes to learn what is already done.

A run's checkpoints are synthesized as the generation writes them (`generation/checkpoint.py`: chunks of
`--chunk` samples, each chunk's rows as JSONL followed by its index of sample ids and outcomes), for runs of
`--tokens` output tokens in samples of `--sample-tokens` ids, shards of `--shard-samples` samples, on a local
folder and on a real S3 server (SeaweedFS `weed mini` on 127.0.0.1). Then, side by side within each of
--repeats rounds (medians):
- index: `load_checkpoint_indexes` of every shard, what a resume does (the indexes, not the answers, 16 at a time);
- full: `load_checkpoints` for every shard, reading every chunk whole and decoding every answer (what a resume
  did before the indexes, and what a run without them would do).
Both must find the same sample ids and outcomes.

Run: `EAGLE_DATAGEN_CACHE=.cache .venv/bin/python bench/bench_resume.py [--tokens 10M,100M] [--stores local,s3]
[--repeats 3]`; writes a Markdown table to stdout (copy it into docs/internals/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from eagle_datagen.generation.checkpoint import (
    INDEX_SUFFIX,
    checkpoint_prefix,
    finish_type,
    load_checkpoint_indexes,
    load_checkpoints,
)
from eagle_datagen.objectstore.s3 import s3_client
from eagle_datagen.objectstore.seaweedfs import SeaweedFS
from eagle_datagen.storage.output_root import OutputRoot, open_output_root

RUN = "bench"


def count(text: str) -> int:
    scale = {"k": 10**3, "m": 10**6, "b": 10**9}
    text = text.strip().lower()
    return int(float(text[:-1]) * scale[text[-1]]) if text[-1] in scale else int(text)


def synthesize(root: OutputRoot, tokens: int, sample_tokens: int, shard_samples: int, chunk: int) -> int:
    """Checkpoints of a run of `tokens` output tokens, as CheckpointWriter writes them; returns the samples."""
    samples = max(1, tokens // sample_tokens)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 163_584, size=sample_tokens).tolist()  # one answer's ids, reused: writing is not measured
    answer = json.dumps(ids, separators=(",", ":"))
    for start in range(0, samples, chunk):
        rows, index = [], []
        for n in range(start, min(samples, start + chunk)):
            sample_id = f"{n:032x}"
            row = {
                "sample_id": sample_id,
                "prompt_id": f"p{n // 4}",
                "sample_index": n % 4,
                "shard": n // shard_samples,
                "output_ids": [],
                "finish_reason": {"type": "stop", "matched": 163586},
                "meta_info": {"prompt_tokens": 1300, "completion_tokens": sample_tokens, "cached_tokens": 1200},
                "endpoint": "http://127.0.0.1:30000",
                "attempts": 1,
                "error": None,
            }
            index.append((sample_id, finish_type(row)))
            rows.append(json.dumps(row, separators=(",", ":")).replace('"output_ids":[]', f'"output_ids":{answer}'))
        shard = start // shard_samples  # chunks never straddle shards: shard_samples is a multiple of chunk
        key = f"{checkpoint_prefix(RUN, shard)}chunk-{start:020d}-bench"
        root.write_bytes(f"{key}.jsonl", ("\n".join(rows) + "\n").encode())
        ids_, outcomes = zip(*index, strict=True)
        root.write_bytes(
            f"{key}{INDEX_SUFFIX}",
            json.dumps({"sample_ids": list(ids_), "outcomes": list(outcomes)}, separators=(",", ":")).encode(),
        )
    return samples


def shards_of(samples: int, shard_samples: int) -> range:
    return range((samples + shard_samples - 1) // shard_samples)


def by_index(root: OutputRoot, shards: range) -> dict[str, str]:
    done: dict[str, str] = {}
    for found in load_checkpoint_indexes(root, RUN, list(shards)).values():
        done |= found
    return done


def in_full(root: OutputRoot, shards: range) -> dict[str, str]:
    done: dict[str, str] = {}
    for shard in shards:
        done |= {sample_id: finish_type(row) for sample_id, row in load_checkpoints(root, RUN, shard).items()}
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="10M,100M", help="output tokens of each run (default: 10M,100M)")
    parser.add_argument("--sample-tokens", type=int, default=16_000, help="ids per answer (default: 16000)")
    parser.add_argument("--shard-samples", type=int, default=1024, help="samples per shard (default: 1024)")
    parser.add_argument("--chunk", type=int, default=64, help="samples per checkpoint chunk (default: 64)")
    parser.add_argument("--stores", default="local,s3", help="local, s3 or both (default: local,s3)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if args.shard_samples % args.chunk:
        parser.error("--shard-samples must be a multiple of --chunk")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as tmp:
        server = SeaweedFS(Path(tmp) / "s3", buckets=["bench"]) if "s3" in args.stores else None
        if server is not None:
            server.start()
            os.environ.update(server.env)
            s3_client.cache_clear()
        try:
            for tokens in (count(t) for t in args.tokens.split(",")):
                for store in args.stores.split(","):
                    uri = f"{tmp}/{store}-{tokens}" if store == "local" else f"s3://bench/{tokens}"
                    root = open_output_root(uri)
                    started = time.monotonic()
                    samples = synthesize(root, tokens, args.sample_tokens, args.shard_samples, args.chunk)
                    written_s = time.monotonic() - started
                    print(f"{store} {tokens:,} tokens: {samples:,} written in {written_s:.0f} s", file=sys.stderr)
                    shards = shards_of(samples, args.shard_samples)
                    times: dict[str, list[float]] = {"index": [], "full": []}
                    for _ in range(args.repeats):
                        for name, read in (("index", by_index), ("full", in_full)):
                            started = time.monotonic()
                            found = read(root, shards)
                            times[name].append(time.monotonic() - started)
                            assert len(found) == samples, (name, len(found), samples)
                    index_s, full_s = statistics.median(times["index"]), statistics.median(times["full"])
                    rows.append((store, tokens, samples, len(shards), index_s, full_s))
                    print(f"  index {index_s:.2f} s, full {full_s:.2f} s", file=sys.stderr)
        finally:
            if server is not None:
                server.stop()
    print("| store | output tokens | samples | shards | resume from the indexes (s) | every chunk read (s) | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for store, tokens, samples, shards, index_s, full_s in rows:
        ratio = full_s / index_s
        print(f"| {store} | {tokens:,} | {samples:,} | {shards} | {index_s:.2f} | {full_s:.1f} | {ratio:.0f}x |")
    print(f"\nload average {os.getloadavg()[0]:.1f}; medians of {args.repeats}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
