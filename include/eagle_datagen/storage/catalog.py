"""The catalog: which samples already exist, from the manifests under an output root.

A sample's id already encodes its prompt, sample index, model and sampling config, so "is this sample
new?" is a set lookup. The weight version is not part of the id: a run that should regenerate when the
weights change asks for the samples of its weight version only. Quarantined samples count as existing:
the same request would get the same answer again.
"""

from __future__ import annotations

import io
import logging

import pyarrow.parquet as pq

from eagle_datagen.storage.manifest import list_manifests
from eagle_datagen.storage.output_root import OutputRoot

log = logging.getLogger(__name__)


def existing_sample_ids(root: OutputRoot, model: str, weight_version: str | None = None) -> set[str]:
    """Sample ids in every manifest-listed data and quarantine file of `model` (and `weight_version`)."""
    found: set[str] = set()
    runs = 0
    for manifest in list_manifests(root):
        if manifest.get("model") != model:
            continue
        if weight_version is not None and manifest.get("weight_version") != weight_version:
            continue
        runs += 1
        for entry in manifest["files"]:
            if entry["kind"] in ("data", "quarantine"):
                table = pq.read_table(io.BytesIO(root.read_bytes(entry["key"])), columns=["sample_id"])
                found.update(table.column("sample_id").to_pylist())
    log.info("catalog: %d existing samples of %s in %d run(s)", len(found), model, runs)
    return found
