"""The catalog: which samples already exist, from the manifests under an output root.

A sample's id already encodes its prompt, sample index, model and sampling config, so "is this sample
new?" is a set lookup. The weight version is not part of the id: a run that should regenerate when the
weights change asks for the samples of its weight version only. Quarantined samples count as existing:
the same request would get the same answer again. Of a data or quarantine shard only the footer and the
`sample_id` column are fetched (byte ranges), not the token ids that make up nearly all of its bytes.
"""

from __future__ import annotations

import logging

import pyarrow.parquet as pq

from eagle_datagen.storage.manifest import list_manifests
from eagle_datagen.storage.output_root import OutputRoot, StoredFile

log = logging.getLogger(__name__)


class Catalog:
    """The sample ids of `model`'s published runs (of `weight_version`, when given). `refresh` reads only
    the manifests it has not read yet, so keeping it current while other runs publish costs a listing."""

    def __init__(self, model: str, weight_version: str | None = None) -> None:
        self.model = model
        self.weight_version = weight_version
        self.sample_ids: set[str] = set()
        self.runs: set[str] = set()  # every published run read, whatever its model
        self.provenance: dict[str, dict] = {}  # run id -> its manifest's provenance (tokenizer hashes), matched runs
        # (tokenizer_sha256, chat_template_sha256) -> the matched runs that rendered their prompts so
        self.renderings: dict[tuple[str | None, str | None], list[str]] = {}

    def refresh(self, root: OutputRoot) -> Catalog:
        matched = 0
        for manifest in list_manifests(root, skip=self.runs):
            self.runs.add(manifest["run_id"])
            if manifest.get("model") != self.model:
                continue
            if self.weight_version is not None and manifest.get("weight_version") != self.weight_version:
                continue
            matched += 1
            provenance = manifest.get("provenance") or {}
            self.provenance[manifest["run_id"]] = provenance
            rendering = (provenance.get("tokenizer_sha256"), provenance.get("chat_template_sha256"))
            self.renderings.setdefault(rendering, []).append(manifest["run_id"])
            for entry in manifest["files"]:
                if entry["kind"] in ("data", "quarantine"):
                    shard = pq.ParquetFile(StoredFile(root, entry["key"], entry["size"]))
                    self.sample_ids.update(shard.read(columns=["sample_id"]).column("sample_id").to_pylist())
        if matched:
            log.info(
                "catalog: %d existing samples of %s (%d new run(s) read)", len(self.sample_ids), self.model, matched
            )
        return self

    def rendered_otherwise(self, tokenizer_sha256: str | None, chat_template_sha256: str | None) -> list[str]:
        """The matched runs whose prompts another tokenizer or chat template rendered."""
        return sorted(
            run
            for rendering, runs in self.renderings.items()
            if rendering != (tokenizer_sha256, chat_template_sha256)
            for run in runs
        )
