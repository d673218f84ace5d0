"""What an export reads: the data files of one published run (its manifest) or of one release.

Only files the manifest or release lists are read, each checked against its sha256 before use, so an
unpublished or altered shard cannot leak into training data. A release drops the rows it lists as
superseded (a sample id already seen in an earlier listed file, that is in a newer run), as it counted
them. Held-out rows (heldout.py) are never exported: those marked `heldout`, and, in rows written before the
column, those whose prompt the output root's policy holds out; they are counted per category. Shards are read
one at a time, a row group at a time, with only the columns the format needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from eagle_datagen.errors import ConfigError, DataGenError
from eagle_datagen.export.mix import MODE_COLUMN, with_modes
from eagle_datagen.heldout import HeldoutPolicy, heldout_rows, read_policy
from eagle_datagen.stats.draft_vocab import DraftVocab
from eagle_datagen.storage.local_copy import local_copy
from eagle_datagen.storage.manifest import manifest_key, read_manifest
from eagle_datagen.storage.objects import sha256_hex
from eagle_datagen.storage.output_root import OutputRoot
from eagle_datagen.storage.parquet import ADDED_COLUMNS, SAMPLE_SCHEMA, added_column
from eagle_datagen.storage.releases import read_release, release_key
from eagle_datagen.storage.reorder import slices

BATCH_BYTES = 16 * 2**20  # of ids per table handed to export/rows.py
HELDOUT_COLUMNS = ("heldout", "prompt_id")  # what tells a held-out row (heldout.py)


@dataclass(frozen=True)
class InputFile:
    key: str
    sha256: str
    category: str | None
    rows: int | None


@dataclass
class ExportSource:
    """The files of a run or a release that an export reads, and where they came from."""

    root: OutputRoot
    kind: Literal["run", "release"]
    id: str
    model: str
    profile: str
    weight_version: str | None
    files: list[InputFile]
    draft_vocab_file: InputFile | None  # the published draft vocabulary, if the run or release has one
    superseded_rows: int = 0  # rows of the exported files that a release does not count
    categories: list[str] = field(default_factory=list)  # those exported; a release reads the others' ids
    heldout: HeldoutPolicy | None = None  # the output root's held-out policy: its prompts are never exported
    heldout_rows: dict[str, int] = field(default_factory=dict)  # held-out rows left out, per category (once read)
    # a run published before its draft vocabulary left held-out rows out: that vocabulary may count them
    vocab_counts_heldout: bool = False

    @property
    def manifest_key(self) -> str:
        return release_key(self.id) if self.kind == "release" else manifest_key(self.id)

    def read_checked(self, entry: InputFile) -> bytes:
        data = self.root.read_bytes(entry.key)
        self._check(entry, sha256_hex(data))
        return data

    def _check(self, entry: InputFile, sha256: str) -> None:
        if sha256 != entry.sha256:
            raise DataGenError(
                f"{self.root.location(entry.key)} does not match the checksum its {self.kind} lists: "
                "the store was altered; restore the file or publish the data again"
            )

    def tables(self, columns: list[str]) -> Iterator[pa.Table]:
        """Tables of at most about BATCH_BYTES from each data file's row groups, in order, with `columns`
        (sample_id always read), superseded release rows dropped: memory holds one row group decoded, not a shard;
        a file is read from a local copy (downloaded from S3 a part at a time), checked against its sha256 first.
        A column added to the contract after a file was written is null there (`mode`: thinking, export/mix.py)."""
        wanted = list(dict.fromkeys(["sample_id", *columns]))
        seen: set[str] = set()
        for entry in self.files:
            exported = entry.category in self.categories
            names = list(dict.fromkeys([*wanted, *HELDOUT_COLUMNS])) if exported else ["sample_id"]
            schema = pa.schema([SAMPLE_SCHEMA.field(name) for name in names])
            with local_copy(self.root, entry.key) as (path, sha256):
                self._check(entry, sha256)
                parquet = pq.ParquetFile(str(path), memory_map=False)
                stored = set(parquet.schema_arrow.names)
                # a shard older than an added column (contract v1.0 has no mode, no soft targets) gets it filled in
                absent = [n for n in names if n not in stored]
                unknown = [n for n in absent if n not in ADDED_COLUMNS]
                if unknown:
                    raise DataGenError(
                        f"{self.root.location(entry.key)} lacks the contract's columns {unknown}: it is no data shard"
                    )
                for group in range(parquet.metadata.num_row_groups):
                    table = parquet.read_row_group(group, columns=[n for n in names if n not in absent])
                    for name in absent:
                        table = table.append_column(name, added_column(name, table.num_rows))
                    table = table.select(names).cast(schema)
                    if MODE_COLUMN in names:  # a null mode is thinking too (export/mix.py)
                        table = with_modes(table)
                    if self.kind == "release":  # the release kept the first row of each sample id, in its order
                        ids = table.column("sample_id").to_pylist()
                        keep = [sample_id not in seen for sample_id in ids]
                        seen.update(ids)
                        if not all(keep):
                            table = table.filter(pa.array(keep))
                    if exported and table.num_rows:
                        table = self._without_heldout(table, entry.category).select(wanted)
                    if exported and table.num_rows:
                        # training rows take ~36 bytes per token while built: a row group (~33M ids) in slices
                        yield from slices(table, table.num_rows, BATCH_BYTES)

    def _without_heldout(self, table: pa.Table, category: str | None) -> pa.Table:
        """The rows that are not held out (heldout.heldout_rows), the others counted."""
        if self.heldout is None and table.column("heldout").null_count == table.num_rows:
            return table
        held = heldout_rows(table.column("heldout").to_pylist(), table.column("prompt_id").to_pylist(), self.heldout)
        left_out = sum(held)
        if not left_out:
            return table
        self.heldout_rows[category or "?"] = self.heldout_rows.get(category or "?", 0) + left_out
        return table.filter(pa.array([not h for h in held]))

    @property
    def exported_files(self) -> list[InputFile]:
        return [f for f in self.files if f.category in self.categories]

    def published_draft_vocab(self) -> DraftVocab | None:
        if self.draft_vocab_file is None:
            return None
        return DraftVocab.from_safetensors_bytes(self.read_checked(self.draft_vocab_file))

    def input_checksums(self) -> list[dict[str, Any]]:
        """The manifest's (or release's) checksums of every file the export read."""
        listed = [*self.exported_files, *([self.draft_vocab_file] if self.draft_vocab_file else [])]
        return [{"key": f.key, "sha256": f.sha256, **({"rows": f.rows} if f.rows is not None else {})} for f in listed]


def _check_categories(wanted: list[str] | None, available: list[str], what: str) -> None:
    missing = sorted(set(wanted or []) - set(available))
    if missing:
        raise ConfigError(f"{what} has no data for categories {missing} (it has {sorted(available)}): fix --categories")


def open_run(root: OutputRoot, run_id: str, categories: list[str] | None = None) -> ExportSource:
    manifest = read_manifest(root, run_id)
    if manifest is None:
        raise DataGenError(f"run {run_id} has no manifest under {root.uri}: it is not published (finish the run)")
    data = [f for f in manifest["files"] if f["kind"] == "data"]
    _check_categories(categories, sorted({f.get("category") or "" for f in data}), f"run {run_id}")
    files = [
        InputFile(f["key"], f["sha256"], f.get("category"), f.get("rows"))
        for f in data
        if not categories or f.get("category") in categories
    ]
    vocab = next((f for f in manifest["files"] if f["kind"] == "draft_vocab"), None)
    return ExportSource(
        root=root,
        kind="run",
        id=run_id,
        model=manifest["model"],
        profile=manifest["profile"],
        weight_version=manifest.get("weight_version"),
        files=files,
        draft_vocab_file=InputFile(vocab["key"], vocab["sha256"], None, None) if vocab else None,
        categories=sorted({f.category for f in files if f.category is not None}),
        heldout=read_policy(root),
        vocab_counts_heldout=(manifest.get("heldout") or {}).get("in_draft_vocab", True) is not False,
    )


def open_release(root: OutputRoot, release_id: str, categories: list[str] | None = None) -> ExportSource:
    release = read_release(root, release_id)
    if release is None:
        raise DataGenError(
            f"release {release_id} is not under {root.uri} ({release_key(release_id)}): trigger the release DAG "
            "or check the release id"
        )
    _check_categories(categories, list(release["categories"]), f"release {release_id}")
    # every listed file is read (in the release's order) so that superseded rows drop exactly as counted
    files, superseded = [], 0
    for category, entry in release["categories"].items():
        for f in entry["files"]:
            files.append(InputFile(f["key"], f["sha256"], category, f.get("rows")))
        if not categories or category in categories:
            superseded += int(entry.get("superseded_rows", 0))
    vocab = release.get("draft_vocab")
    return ExportSource(
        root=root,
        kind="release",
        id=release_id,
        model=release["model"],
        profile=release["profile"],
        weight_version=release.get("weight_version"),
        files=files,
        draft_vocab_file=InputFile(vocab["key"], vocab["sha256"], None, None) if vocab else None,
        superseded_rows=superseded,
        categories=sorted(categories or release["categories"]),
        heldout=read_policy(root),
    )
