"""An HF `datasets` folder, as `Dataset.save_to_disk` writes it, written batch by batch with pyarrow alone.

The folder holds `data-NNNNN-of-MMMMM.arrow` (Arrow IPC streams whose schema metadata carries the
`huggingface` features), `dataset_info.json` (the features) and `state.json` (the data files, a
fingerprint and the output format). `datasets.load_from_disk` reads it; speculators' trainer loads its
prepared data that way, with the format `torch` that `prepare-data` sets, so that rows come back as tensors.
A file is closed at about `max_file_bytes` (save_to_disk's shards are 500 MB) and a new one begun.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pyarrow as pa

MAX_FILE_BYTES = 500 * 1024 * 1024

_VALUE_TYPES = {
    pa.string(): "string",
    pa.int8(): "int8",
    pa.int32(): "int32",
    pa.int64(): "int64",
    pa.bool_(): "bool",
    pa.float32(): "float32",  # soft targets' logprobs
    pa.float64(): "float64",
}


def hf_feature(data_type: pa.DataType) -> dict:
    """The `datasets` feature (4.x and later spelling) of an Arrow type."""
    if pa.types.is_list(data_type):
        return {"feature": hf_feature(data_type.value_type), "_type": "List"}
    if data_type not in _VALUE_TYPES:
        raise TypeError(f"no datasets feature for Arrow type {data_type}")
    return {"dtype": _VALUE_TYPES[data_type], "_type": "Value"}


def hf_features(schema: pa.Schema) -> dict:
    return {f.name: hf_feature(f.type) for f in schema}


class ArrowFolderWriter:
    """Write record batches of one schema into an HF dataset folder; `close` writes the JSON files."""

    def __init__(
        self,
        folder: Path,
        schema: pa.Schema,
        format_type: str | None,
        identity: str = "",
        max_file_bytes: int = MAX_FILE_BYTES,
    ):
        self.folder = folder
        features = hf_features(schema)
        self.features = features
        self.schema = schema.with_metadata({"huggingface": json.dumps({"info": {"features": features}})})
        self.format_type = format_type
        self.max_file_bytes = max_file_bytes
        self._files: list[str] = []
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._sink: pa.OSFile | None = None
        self._digest = hashlib.sha256(json.dumps([identity, features], sort_keys=True).encode())
        self.rows = 0

    def _open(self) -> None:
        name = f"data-{len(self._files):05d}.arrow"  # renamed to -of-N at close
        self._files.append(name)
        self._sink = pa.OSFile(str(self.folder / name), "wb")
        self._writer = pa.ipc.new_stream(self._sink, self.schema)

    def _finish_file(self) -> None:
        if self._writer is not None and self._sink is not None:
            self._writer.close()
            self._sink.close()
            self._writer = self._sink = None

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if self._writer is None:
            self._open()
        assert self._writer is not None and self._sink is not None
        table = table.select(self.schema.names).cast(self.schema)
        for batch in table.to_batches():
            self._writer.write_batch(batch)
            self._digest.update(batch.num_rows.to_bytes(8, "little"))
        self.rows += table.num_rows
        if self._sink.tell() >= self.max_file_bytes:
            self._finish_file()

    def close(self) -> list[str]:
        """Finish the data files and write dataset_info.json and state.json; returns the folder's files."""
        self._finish_file()
        if not self._files:  # an empty dataset still has one (empty) data file
            self._open()
            self._finish_file()
        total = len(self._files)
        names = []
        for index, name in enumerate(self._files):
            final = f"data-{index:05d}-of-{total:05d}.arrow"
            os.replace(self.folder / name, self.folder / final)
            names.append(final)
        info = {"citation": "", "description": "", "features": self.features, "homepage": "", "license": ""}
        state = {
            "_data_files": [{"filename": name} for name in names],
            "_fingerprint": self._digest.hexdigest()[:16],
            "_format_columns": self.schema.names if self.format_type else None,  # as set_format leaves it
            "_format_kwargs": {},
            "_format_type": self.format_type,
            "_output_all_columns": False,
            "_split": None,
        }
        (self.folder / "dataset_info.json").write_text(json.dumps(info, indent=2) + "\n")
        (self.folder / "state.json").write_text(json.dumps(state, indent=2) + "\n")
        return [*names, "dataset_info.json", "state.json"]
