"""The export formats: what each trainer reads, written from batches of training rows (export/rows.py).

- `jsonl`: one JSON line per row, `sample_id`, `category`, `input_ids`, `loss_mask` (a file).
- `speculators`: the folder `speculators prepare-data` writes (HF Arrow dataset, format torch, columns
  `input_ids`, `loss_mask` as int64 lists and `seq_len`), plus `d2t-<K>.npy` (int64, length K) and
  `t2d-<K>.npy` (bool, length vocab_size), which `speculators train --data-path DIR --draft-vocab-size K`
  finds there, so training starts at hidden-state generation without the target's processor.
- `specforge`: `train.jsonl` for `data.prompts_path` (SpecForge reads `input_ids` and `loss_mask` of each
  line) and `vocab_mapping.pt` ({"d2t", "t2d"}) for `model.vocab_mapping_path`.
- `torchspec`: `train.parquet` with `data_id` (the sample id, unique), `input_ids`, `loss_mask`,
  `packed_loss_mask` (run lengths "prompt,output", as TorchSpec serializes them), `seq_len`, `loss_tokens`.
- `hf`: an HF Arrow dataset folder with every data-contract column plus `input_ids`, `loss_mask`, `seq_len`.

Soft targets (`--logprobs`: the shards' top-k logprobs) are carried by the formats whose readers can use them:
`jsonl` (per line `top_logprobs_k`, and for the kept output positions `top_logprob_ids`, `top_logprobs`,
`output_logprobs`) and `hf` (the contract's columns, as stored). speculators, SpecForge and TorchSpec compute the
target's full distribution themselves (from the verifier's hidden states or the target model), and read only
`input_ids` and `loss_mask`: they do not carry them.

Every folder also gets `sample_ids.txt` (row i's sample_id on line i, written by the export stage), and
the formats that have no map of their own carry the draft vocabulary as `draft_vocab.safetensors`.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from eagle_datagen.errors import DataGenError
from eagle_datagen.export import FORMATS
from eagle_datagen.export.arrow_folder import ArrowFolderWriter
from eagle_datagen.export.torch_file import tensors_to_torch_bytes
from eagle_datagen.stats.draft_vocab import DraftVocab
from eagle_datagen.storage.parquet import SAMPLE_SCHEMA

IDS = pa.list_(pa.int64())


def _joined(lists: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each row's integers as decimal text joined by commas, by Arrow's kernels."""
    array = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    return pc.binary_join(pc.cast(array, pa.list_(pa.string())), ",")


def _plain_text(column: pa.Array, pattern: str, name: str) -> pa.Array:
    if not pc.all(pc.match_substring_regex(column, pattern)).as_py():
        raise DataGenError(f"a {name} outside the data contract ({pattern}) is in the shards: not exported")
    return column


def _numbers(lists: pa.ChunkedArray | pa.Array) -> pa.Array:
    """`_joined` of float lists, -inf (a token the temperature left no probability) as null, as JSON has no -inf."""
    array = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    values = array.values
    text = pc.if_else(pc.is_inf(values), pa.scalar("null"), pc.cast(values, pa.string()))
    return pc.binary_join(pa.ListArray.from_arrays(array.offsets, text), ",")


def jsonl_text(rows: pa.Table, logprobs: bool = False) -> pa.Buffer:
    """The JSON lines of training rows (sample_id, category, input_ids, loss_mask; with `logprobs`, the soft
    targets of export/rows.py's SOFT_COLUMNS), built by Arrow's string kernels (no Python object per token).
    Sample ids are hex and categories [a-z0-9_-] (checked), so nothing needs escaping and the text is what
    json.dumps writes (floats in their shortest float32 form)."""
    sample_ids = _plain_text(rows.column("sample_id").combine_chunks(), "^[0-9a-f]+$", "sample_id")
    categories = _plain_text(rows.column("category").combine_chunks(), "^[a-z0-9_-]+$", "category")
    parts = [
        '{"sample_id":"',
        sample_ids,
        '","category":"',
        categories,
        '","input_ids":[',
        _joined(rows.column("input_ids")),
        '],"loss_mask":[',
        _joined(rows.column("loss_mask")),
    ]
    if logprobs:
        parts += [
            '],"top_logprobs_k":',
            pc.cast(rows.column("soft_k").combine_chunks(), pa.string()),
            ',"top_logprob_ids":[',
            _joined(rows.column("soft_top_ids")),
            '],"top_logprobs":[',
            _numbers(rows.column("soft_top")),
            '],"output_logprobs":[',
            _numbers(rows.column("soft_sampled")),
        ]
    parts += [
        "]}\n",
        "",  # the separator
    ]
    lines = pc.binary_join_element_wise(*parts).cast(pa.large_string())
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)[lines.offset : lines.offset + len(lines) + 1]
    return lines.buffers()[2][int(offsets[0]) : int(offsets[-1])]


class FormatWriter:
    name: ClassVar[str]
    folder: ClassVar[bool] = True
    needs_vocab: ClassVar[bool] = False  # the trainer cannot start without the draft vocabulary maps
    columns: ClassVar[tuple[str, ...]] = ("sample_id", "category", "prompt_ids", "output_ids")
    # why the format does not carry soft targets (None: it does, with --logprobs)
    no_logprobs: ClassVar[str | None] = (
        "its trainer computes the target's full distribution itself and reads only input_ids and loss_mask"
    )

    def __init__(self, target: Path, identity: str, logprobs: bool = False) -> None:
        self.target, self.identity, self.logprobs = target, identity, logprobs

    def write(self, rows: pa.Table) -> None:
        raise NotImplementedError

    def finish(self, vocab: DraftVocab | None) -> list[str]:
        """Close the data files, write the vocabulary files; the names written (relative to the folder)."""
        raise NotImplementedError

    @staticmethod
    def vocab_safetensors(folder: Path, vocab: DraftVocab | None) -> list[str]:
        if vocab is None:
            return []
        (folder / "draft_vocab.safetensors").write_bytes(vocab.to_safetensors_bytes())
        return ["draft_vocab.safetensors"]


class JsonlWriter(FormatWriter):
    name = "jsonl"
    folder = False
    no_logprobs = None

    def __init__(
        self, target: Path, identity: str, logprobs: bool = False, handle: IO[bytes] | None = None
    ) -> None:
        super().__init__(target, identity, logprobs)
        self._own = handle is None
        self.handle = handle or open(target, "wb")  # noqa: SIM115 - closed in finish

    def write(self, rows: pa.Table) -> None:
        self.handle.write(jsonl_text(rows, self.logprobs))

    def finish(self, vocab: DraftVocab | None) -> list[str]:
        if self._own:
            self.handle.close()
        else:
            self.handle.flush()
        return []  # the file itself is the target


class SpeculatorsWriter(FormatWriter):
    name = "speculators"
    needs_vocab = True
    SCHEMA = pa.schema([("input_ids", IDS), ("loss_mask", IDS), ("seq_len", pa.int64())])

    def __init__(self, target: Path, identity: str, logprobs: bool = False) -> None:
        super().__init__(target, identity, logprobs)
        self.arrow = ArrowFolderWriter(target, self.SCHEMA, format_type="torch", identity=identity)

    def write(self, rows: pa.Table) -> None:
        self.arrow.write(rows)

    def finish(self, vocab: DraftVocab | None) -> list[str]:
        files = self.arrow.close()
        if vocab is not None:
            np.save(self.target / f"d2t-{vocab.k}.npy", vocab.d2t.astype(np.int64))
            np.save(self.target / f"t2d-{vocab.k}.npy", vocab.t2d.astype(np.bool_))
            files += [f"d2t-{vocab.k}.npy", f"t2d-{vocab.k}.npy"]
        return files


class SpecForgeWriter(FormatWriter):
    name = "specforge"
    needs_vocab = True
    DATA = "train.jsonl"

    def __init__(self, target: Path, identity: str, logprobs: bool = False) -> None:
        super().__init__(target, identity, logprobs)
        self.handle = open(target / self.DATA, "wb")  # noqa: SIM115 - closed in finish

    def write(self, rows: pa.Table) -> None:
        self.handle.write(jsonl_text(rows))

    def finish(self, vocab: DraftVocab | None) -> list[str]:
        self.handle.close()
        files = [self.DATA]
        if vocab is not None:
            mapping = {"d2t": vocab.d2t.astype(np.int64), "t2d": vocab.t2d.astype(np.bool_)}
            (self.target / "vocab_mapping.pt").write_bytes(tensors_to_torch_bytes(mapping))
            files.append("vocab_mapping.pt")
        return files


class TorchSpecWriter(FormatWriter):
    name = "torchspec"
    DATA = "train.parquet"
    SCHEMA = pa.schema(
        [
            ("data_id", pa.string()),
            ("input_ids", IDS),
            ("loss_mask", IDS),
            ("packed_loss_mask", pa.string()),
            ("seq_len", pa.int64()),
            ("loss_tokens", pa.int64()),
        ]
    )

    def __init__(self, target: Path, identity: str, logprobs: bool = False) -> None:
        super().__init__(target, identity, logprobs)
        self.parquet = pq.ParquetWriter(target / self.DATA, self.SCHEMA, compression="zstd")

    def write(self, rows: pa.Table) -> None:
        prompt = rows.column("prompt_len")
        loss_tokens = pc.subtract(rows.column("seq_len"), prompt)
        packed = pc.binary_join_element_wise(pc.cast(prompt, pa.string()), pc.cast(loss_tokens, pa.string()), ",")
        table = pa.table(
            [
                rows.column("sample_id"),
                rows.column("input_ids"),
                rows.column("loss_mask"),
                packed,
                rows.column("seq_len"),
                loss_tokens,
            ],
            schema=self.SCHEMA,
        )
        self.parquet.write_table(table)

    def finish(self, vocab: DraftVocab | None) -> list[str]:
        self.parquet.close()
        return [self.DATA, *self.vocab_safetensors(self.target, vocab)]


class HfWriter(FormatWriter):
    name = "hf"
    columns = tuple(SAMPLE_SCHEMA.names)  # the soft targets' columns too (null unless the run stored them)
    no_logprobs = None
    SCHEMA = pa.schema(
        [pa.field(f.name, f.type) for f in SAMPLE_SCHEMA]
        + [pa.field("input_ids", IDS), pa.field("loss_mask", IDS), pa.field("seq_len", pa.int64())]
    )

    def __init__(self, target: Path, identity: str, logprobs: bool = False) -> None:
        super().__init__(target, identity, logprobs)
        self.arrow = ArrowFolderWriter(target, self.SCHEMA, format_type=None, identity=identity)

    def write(self, rows: pa.Table) -> None:
        self.arrow.write(rows)

    def finish(self, vocab: DraftVocab | None) -> list[str]:
        return [*self.arrow.close(), *self.vocab_safetensors(self.target, vocab)]


WRITERS: dict[str, type[FormatWriter]] = {
    w.name: w for w in (JsonlWriter, SpeculatorsWriter, SpecForgeWriter, TorchSpecWriter, HfWriter)
}
assert tuple(WRITERS) == FORMATS, "export/__init__.py's FORMATS names every writer"
