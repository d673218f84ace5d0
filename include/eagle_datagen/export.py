"""Export a published run for trainers that take JSONL: `input_ids` and `loss_mask` per sample.

`input_ids = prompt_ids + output_ids` and `loss_mask` is 0 over the prompt and 1 over the output, so
`</think>` and the final EOS are trained on and the prompt's trailing `<think>` is not. Only files the
run's manifest lists are read (their checksums are checked), so an unpublished run cannot leak out.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from eagle_datagen.errors import DataGenError
from eagle_datagen.storage.manifest import read_manifest
from eagle_datagen.storage.objects import sha256_hex
from eagle_datagen.storage.output_root import OutputRoot
from eagle_datagen.storage.parquet import decode_shard


def export_lines(root: OutputRoot, run_id: str, categories: list[str] | None = None) -> Iterator[str]:
    manifest = read_manifest(root, run_id)
    if manifest is None:
        raise DataGenError(f"run {run_id} has no manifest under {root.uri}: it is not published (finish the run)")
    for entry in manifest["files"]:
        if entry["kind"] != "data" or (categories and entry.get("category") not in categories):
            continue
        data = root.read_bytes(entry["key"])
        if sha256_hex(data) != entry["sha256"]:
            raise DataGenError(f"{entry['key']} does not match its manifest checksum: the store was altered")
        table = decode_shard(data).select(["sample_id", "category", "prompt_ids", "output_ids"])
        for row in table.to_pylist():
            prompt, output = row["prompt_ids"], row["output_ids"]
            yield json.dumps(
                {
                    "sample_id": row["sample_id"],
                    "category": row["category"],
                    "input_ids": prompt + output,
                    "loss_mask": [0] * len(prompt) + [1] * len(output),
                },
                separators=(",", ":"),
            )


def export_jsonl(root: OutputRoot, run_id: str, target: str, categories: list[str] | None = None) -> int:
    """Write the run's valid samples to `target` (a file path, or - for stdout); returns the count."""
    count = 0
    handle: IO[str]
    if target == "-":
        handle = sys.stdout
    else:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        handle = open(target, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    try:
        for line in export_lines(root, run_id, categories):
            handle.write(line + "\n")
            count += 1
    finally:
        if handle is not sys.stdout:
            handle.close()
    return count
