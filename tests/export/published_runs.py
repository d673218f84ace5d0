"""Published runs and releases for the export tests: real shards, draft vocabularies and manifests, written
as finalize and the release DAG write them (the release by the package's `assemble_release`)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from eagle_datagen.stats.draft_vocab import DraftVocab, build_draft_vocab
from eagle_datagen.stats.statistics import TokenCounter
from eagle_datagen.storage.manifest import Manifest, ManifestFile, run_artifact_key, write_manifest
from eagle_datagen.storage.objects import StoredObject, put_once, sha256_hex
from eagle_datagen.storage.output_root import OutputRoot
from eagle_datagen.storage.parquet import encode_shard, samples_table

REPO = Path(__file__).resolve().parents[2]
MODEL = "moonshotai/Kimi-K2.5"
VOCAB = 163_840
SAMPLING = json.dumps({"max_new_tokens": 2048, "temperature": 1.0}, sort_keys=True)


def sample(i: int, category: str, run_id: str, prompt_len: int, output_len: int, seed: int = 0) -> dict:
    rng = random.Random(f"{seed}:{i}")
    prompt = [163584] + [rng.randrange(1000) for _ in range(max(0, prompt_len - 2))] + [163606]
    # Zipf-like ids, as text is: a few frequent ones, many rare ones
    body = [min(int(rng.paretovariate(0.7)) * 7, VOCAB - 1) for _ in range(max(0, output_len - 3))]
    output = body + [163607, rng.randrange(50), 163586]
    return {
        "sample_id": f"{i:064x}",
        "record_id": f"rec-{i}",
        "prompt_id": f"{i * 7:064x}",
        "category": category,
        "sample_index": 0,
        "prompt_ids": prompt[:prompt_len],
        "output_ids": output[:output_len],
        "finish_reason": "stop",
        "completion_tokens": len(output[:output_len]),
        "prompt_tokens": len(prompt[:prompt_len]),
        "reasoning_tokens": max(0, output_len - 3),
        "sampling": SAMPLING,
        "model": MODEL,
        "run_id": run_id,
        "weight_version": "w1",
    }


def shard_rows(first: int, n: int, category: str, run_id: str, seed: int = 0) -> list[dict]:
    rng = random.Random(f"lengths:{seed}:{first}")
    return [
        sample(i, category, run_id, rng.randrange(3, 40), rng.randrange(3, 60), seed) for i in range(first, first + n)
    ]


def publish(
    root: OutputRoot,
    run_id: str,
    shards: dict[str, list[list[dict]]],
    k: int | None = 40,
    created_at: str = "",
    modes: dict[str, str | None] | None = None,
) -> DraftVocab | None:
    """Data shards per category, the run's draft vocabulary over their output_ids, then the manifest. With
    `modes` (sample_id -> mode), the shards have a `mode` column."""
    files, tokens = [], TokenCounter(VOCAB)
    for category, tables in shards.items():
        for index, rows in enumerate(tables):
            if modes is not None:  # null: a row of a writer that left the mode out (read as thinking)
                rows = [dict(row, mode=modes.get(row["sample_id"])) for row in rows]
            table = samples_table(rows)
            tokens.add(table)
            payload = encode_shard(table)
            stored = put_once(root, f"data/category={category}/run={run_id}/part-{index:05d}.parquet", payload)
            files.append(ManifestFile.of(stored, "data", rows=len(rows), category=category))
    draft = build_draft_vocab(tokens.counts, k) if k else None
    if draft is not None:
        payload = draft.to_safetensors_bytes()
        key = run_artifact_key(run_id, "draft_vocab.safetensors")
        root.write_bytes(key, payload)
        files.append(ManifestFile.of(StoredObject(key, sha256_hex(payload), len(payload)), "draft_vocab"))
    n = sum(len(rows) for tables in shards.values() for rows in tables)
    counts = {"samples": n, "data": n, "quarantine": 0, "reasons": {}, "trained_tokens": tokens.total}
    manifest = Manifest(run_id, MODEL, "kimi-k2.5", {"servers": [{"weight_version": "w1"}]}, {}, counts, files)
    if created_at:
        manifest.created_at = created_at
    write_manifest(root, manifest)
    return draft


def assemble(root: OutputRoot, release_id: str, categories: list[str], k: int) -> dict:
    from eagle_datagen.generation.release import assemble_release

    return assemble_release(root, release_id, categories, "2026-12-01T00:00:00+00:00", k)
