"""The catalog: which samples already exist, from the manifests under an output root.

A sample's id already encodes its prompt, sample index, model and sampling config, so "is this sample
new?" is a set lookup (a `SampleIdSet`: 16 bytes an id, 64 MB for 4M stored samples). The weight version
is not part of the id: a run that should regenerate when the weights change asks for the samples of its
weight version only. Quarantined samples count as existing: the same request would get the same answer
again. Of a data or quarantine shard only the footer and the `sample_id` column are fetched (byte ranges),
not the token ids that make up nearly all of its bytes. They are copied into an image of the file in memory
that Arrow owns (its other bytes never written, so never resident), which Arrow reads as a file: reading
Parquet through a Python file object can abort the process at its exit (`storage.parquet.arrow_owned`).
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from eagle_datagen.storage.manifest import list_manifests
from eagle_datagen.storage.output_root import OutputRoot
from eagle_datagen.storage.sample_id_set import SampleIdSet, digests_from_hex

log = logging.getLogger(__name__)


class Catalog:
    """The sample ids of `model`'s published runs (of `weight_version`, when given). `refresh` reads only
    the manifests it has not read yet, so keeping it current while other runs publish costs a listing."""

    def __init__(self, model: str, weight_version: str | None = None) -> None:
        self.model = model
        self.weight_version = weight_version
        self.sample_ids = SampleIdSet()
        self.runs: set[str] = set()  # every published run read, whatever its model
        self.provenance: dict[str, dict] = {}  # run id -> its manifest's provenance (tokenizer hashes), matched runs
        # (tokenizer_sha256, chat_template_sha256) -> the matched runs that rendered their prompts so
        self.renderings: dict[tuple[str | None, str | None], list[str]] = {}

    def refresh(self, root: OutputRoot) -> Catalog:
        matched = 0
        found = []
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
                    found.append(digests_from_hex(read_stored_column(root, entry["key"], entry["size"], "sample_id")))
        if found:
            found.insert(0, self.sample_ids.digests)
            self.sample_ids = SampleIdSet.merged(found)
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


FOOTER_READ = 64 * 1024  # the tail fetched first: the footer of a shard (and a small shard whole)


def read_stored_column(root: OutputRoot, key: str, size: int, column: str) -> pa.ChunkedArray:
    """One column of a stored Parquet file, fetching only its footer and that column's chunks (byte ranges, the
    tail in one request), read by Arrow from an Arrow-owned image of the file (`pa.allocate_buffer`: the pages
    not written stay unbacked)."""
    image = pa.allocate_buffer(size)
    view = np.frombuffer(image, dtype=np.uint8)
    tail_start = max(0, size - FOOTER_READ)
    view[tail_start:] = np.frombuffer(root.read_range(key, tail_start, size - tail_start), dtype=np.uint8)
    footer = int.from_bytes(bytes(view[size - 8 : size - 4]), "little") + 8
    if footer > size - tail_start:
        start = max(0, size - footer)
        view[start:tail_start] = np.frombuffer(root.read_range(key, start, tail_start - start), dtype=np.uint8)
        tail_start = start
    metadata = pq.read_metadata(pa.BufferReader(image))
    index = [metadata.schema.column(i).path for i in range(metadata.num_columns)].index(column)
    for group in range(metadata.num_row_groups):
        chunk = metadata.row_group(group).column(index)
        start = chunk.data_page_offset
        if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
            start = chunk.dictionary_page_offset
        end = min(start + chunk.total_compressed_size, tail_start)  # what the tail holds is there already
        if end > start:
            view[start:end] = np.frombuffer(root.read_range(key, start, end - start), dtype=np.uint8)
    return pq.ParquetFile(pa.BufferReader(image), metadata=metadata).read(columns=[column]).column(column)
