"""A release: every category's published data for one model and weight version, with one draft vocabulary.

Incremental runs publish only what is new, so a category's data is the union of its published runs,
not its latest run. A release takes, per category, every run under the output root of the newest
run's model and weight version (newest first), checks each data file against its manifest's sha256,
and counts each sample once: a sample id seen in a newer run (a forced regeneration) supersedes the
older rows, which the release lists as `superseded_rows` for trainers to skip. Held-out rows (heldout.py)
are counted (`heldout_rows`) and never trained on: the draft vocabulary is built over the trained tokens of
the whole release, held-out rows left out.

The run's last step, for every front end: the release DAG's assemble_release task and `eagle-datagen release`.
Written under the output root: `releases/release=<id>.draft_vocab.safetensors`, then
`releases/release=<id>.json` last, write-once. Assembling an existing release again returns it.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from eagle_datagen.errors import ConfigError, DataGenError
from eagle_datagen.heldout import heldout_rows, read_policy
from eagle_datagen.profile import load_profile
from eagle_datagen.stats.draft_vocab import build_draft_vocab
from eagle_datagen.stats.statistics import TokenCounter
from eagle_datagen.storage.manifest import list_manifests, manifest_key
from eagle_datagen.storage.objects import put_once, sha256_hex
from eagle_datagen.storage.output_root import OutputRoot
from eagle_datagen.storage.parquet import read_parquet_bytes
from eagle_datagen.storage.releases import release_key


def _data_files(manifest: dict[str, Any], category: str) -> list[dict[str, Any]]:
    return [f for f in manifest["files"] if f["kind"] == "data" and f.get("category") == category]


def _heldout_marks(data: bytes, rows: int) -> list[bool | None]:
    """A data file's `heldout` column (heldout.py); nulls for a file written before it."""
    if "heldout" not in pq.read_schema(pa.BufferReader(data)).names:
        return [None] * rows
    return read_parquet_bytes(data, columns=["heldout"]).column("heldout").to_pylist()


def published_categories(root: OutputRoot) -> list[str]:
    """Every category with data in a published run under the root."""
    return sorted({f["category"] for m in list_manifests(root) for f in m["files"] if f["kind"] == "data"})


def assemble_release(
    root: OutputRoot, release_id: str, categories: list[str], created_at: str, draft_vocab_size: int
) -> dict[str, Any]:
    key = release_key(release_id)
    if key in root.list(key):  # assembled by an earlier try of this release
        return json.loads(root.read_bytes(key))
    manifests = sorted(list_manifests(root), key=lambda m: (m["created_at"], m["run_id"]), reverse=True)
    newest = next((m for m in manifests if any(_data_files(m, c) for c in categories)), None)
    if newest is None:
        raise DataGenError(f"no published run under {root.uri} has data for {categories}: nothing to release")
    model, weight_version = newest["model"], newest.get("weight_version")
    tokens = TokenCounter(load_profile(newest["profile"]).vocab_size)
    policy = read_policy(root)
    seen: set[str] = set()
    included: dict[str, dict[str, Any]] = {}
    per_category: dict[str, Any] = {}
    for category in categories:
        runs = [
            m
            for m in manifests
            if m["model"] == model and m.get("weight_version") == weight_version and _data_files(m, category)
        ]
        if not runs:
            continue
        files, samples, superseded, trained, heldout = [], 0, 0, 0, 0
        for manifest in runs:
            included[manifest["run_id"]] = manifest
            for entry in _data_files(manifest, category):
                data = root.read_bytes(entry["key"])
                if len(data) != entry["size"] or sha256_hex(data) != entry["sha256"]:
                    raise DataGenError(
                        f"{root.location(entry['key'])} differs from run {manifest['run_id']}'s manifest"
                    )
                table = read_parquet_bytes(data, columns=["sample_id", "prompt_id", "output_ids"])
                ids = table.column("sample_id").to_pylist()
                keep = [sample_id not in seen for sample_id in ids]
                seen.update(ids)
                kept = sum(keep)
                held = heldout_rows(_heldout_marks(data, len(ids)), table.column("prompt_id").to_pylist(), policy)
                trains = [k and not h for k, h in zip(keep, held, strict=True)]  # held-out rows are never trained on
                heldout += sum(k and h for k, h in zip(keep, held, strict=True))
                trained += tokens.add(table.filter(pa.array(trains)))
                samples += kept
                superseded += len(ids) - kept
                files.append(
                    {
                        "key": entry["key"],
                        "run_id": manifest["run_id"],
                        "sha256": entry["sha256"],
                        "size": entry["size"],
                        "rows": len(ids),
                        "superseded_rows": len(ids) - kept,
                    }
                )
        per_category[category] = {
            "runs": [m["run_id"] for m in runs],
            "samples": samples,
            "superseded_rows": superseded,
            "heldout_rows": heldout,  # counted in samples, never exported (heldout.py)
            "trained_tokens": trained,
            "files": files,
        }
    if draft_vocab_size > tokens.distinct:
        raise ConfigError(
            f"a draft vocabulary of {draft_vocab_size} tokens was asked, but the release trains only "
            f"{tokens.distinct} distinct tokens: lower the draft_vocab_size param or generate more data"
        )
    draft = build_draft_vocab(tokens.counts, draft_vocab_size)
    vocab = draft.to_safetensors_bytes()
    vocab_key = release_key(release_id, "draft_vocab.safetensors")
    root.write_bytes(vocab_key, vocab)  # derived: trusted through the checksum the release lists
    release = {
        "release_id": release_id,
        "created_at": created_at,
        "output": root.uri,
        "model": model,
        "profile": newest["profile"],
        "weight_version": weight_version,
        "categories": per_category,
        "missing_categories": [c for c in categories if c not in per_category],
        "runs": [
            {
                "run_id": m["run_id"],
                "manifest": manifest_key(m["run_id"]),
                "created_at": m["created_at"],
                "sampling": m["sampling"],
            }
            for m in included.values()
        ],
        "counts": {
            "samples": sum(c["samples"] for c in per_category.values()),
            "superseded_rows": sum(c["superseded_rows"] for c in per_category.values()),
            "heldout_rows": sum(c["heldout_rows"] for c in per_category.values()),
            "trained_tokens": tokens.total,
        },
        "heldout": policy.to_json() if policy is not None else None,
        "draft_vocab": {
            "key": vocab_key,
            "sha256": sha256_hex(vocab),
            "size": len(vocab),
            "k": draft.k,
            "coverage": draft.coverage,
        },
    }
    put_once(root, key, json.dumps(release, indent=1).encode())
    return release
