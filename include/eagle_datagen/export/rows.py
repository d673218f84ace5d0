"""Training rows from sample shards, in bulk: `input_ids = prompt_ids + output_ids`, `loss_mask` 0 over the
prompt and 1 over the output, cut to a maximum length as the trainers cut them.

Everything is numpy over the shard's flat id buffers (no Python list per token). Every EAGLE-3 trainer
(speculators prepare-data, SpecForge, TorchSpec) truncates a row to its maximum length on the right and
drops a row left without a supervised token; `overlong="drop"` instead drops every row longer than the
limit, so that no response is trained half-way. What was cut or dropped is counted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
import pyarrow as pa

Overlong = Literal["cut", "drop"]
TRAINING_COLUMNS = ("input_ids", "loss_mask", "seq_len", "prompt_len", "row_index")
LOGPROB_COLUMNS = ("output_logprobs", "top_logprob_ids", "top_logprobs")  # the shards' soft targets
# ... and as an export carries them: cut with the row (k, then the kept output positions')
SOFT_COLUMNS = ("soft_k", "soft_top_ids", "soft_top", "soft_sampled")


@dataclass(frozen=True)
class SeqLimit:
    max_len: int | None = None  # None: no cut
    overlong: Overlong = "cut"


@dataclass
class RowCounts:
    rows_read: int = 0
    rows_exported: int = 0
    rows_cut: int = 0  # kept, but shortened to max_len
    rows_dropped_unsupervised: int = 0  # the prompt alone fills max_len: no supervised token left
    rows_dropped_overlong: int = 0  # longer than max_len, with overlong="drop"
    tokens: int = 0  # exported tokens
    supervised_tokens: int = 0  # exported tokens with loss_mask 1
    tokens_cut: int = 0
    rows_filtered_by_mode: int = 0  # read, but of a mode the export's mix leaves out (not counted in rows_read)

    def to_json(self) -> dict[str, int]:
        return asdict(self)


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of arange(s, s + n) for each (s, n), without a Python loop."""
    lengths = lengths.astype(np.int64, copy=False)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    begins = np.cumsum(lengths) - lengths  # where each range starts in the output
    return np.repeat(starts.astype(np.int64) - begins, lengths) + np.arange(total, dtype=np.int64)


def _flat(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values) of a list column, offsets indexing values."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return array.offsets.to_numpy().astype(np.int64), array.values.to_numpy(zero_copy_only=False)


def training_rows(table: pa.Table, limit: SeqLimit, counts: RowCounts) -> pa.Table:
    """`table` (with prompt_ids and output_ids) with the rows a trainer keeps, plus TRAINING_COLUMNS:
    input_ids and loss_mask (list<int64>, cut to the limit), seq_len, prompt_len and row_index (int64: the
    row's position among all rows read so far, dropped ones included, which the shuffle needs)."""
    prompt_offsets, prompt_values = _flat(table.column("prompt_ids"))
    output_offsets, output_values = _flat(table.column("output_ids"))
    prompt_len, output_len = np.diff(prompt_offsets), np.diff(output_offsets)
    full_len = prompt_len + output_len
    first_index = counts.rows_read
    counts.rows_read += table.num_rows
    if limit.max_len is None:
        kept_prompt, kept_output = prompt_len, output_len
    else:
        kept_prompt = np.minimum(prompt_len, limit.max_len)
        kept_output = np.minimum(output_len, limit.max_len - kept_prompt)
    keep = kept_output > 0
    counts.rows_dropped_unsupervised += int(np.count_nonzero(~keep))
    if limit.max_len is not None and limit.overlong == "drop":
        overlong = keep & (full_len > limit.max_len)
        counts.rows_dropped_overlong += int(np.count_nonzero(overlong))
        keep &= ~overlong
    rows = np.flatnonzero(keep)
    kept_prompt, kept_output = kept_prompt[rows], kept_output[rows]
    seq_len = kept_prompt + kept_output
    cut = full_len[rows] - seq_len
    counts.rows_cut += int(np.count_nonzero(cut))
    counts.tokens_cut += int(cut.sum())
    counts.rows_exported += len(rows)
    counts.tokens += int(seq_len.sum())
    counts.supervised_tokens += int(kept_output.sum())

    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(seq_len, out=offsets[1:])
    prompt_at = ranges(offsets[:-1], kept_prompt)
    output_at = ranges(offsets[:-1] + kept_prompt, kept_output)
    ids = np.empty(int(offsets[-1]), dtype=np.int64)
    ids[prompt_at] = prompt_values[ranges(prompt_offsets[rows], kept_prompt)]
    ids[output_at] = output_values[ranges(output_offsets[rows], kept_output)]
    mask = np.zeros(len(ids), dtype=np.int64)
    mask[output_at] = 1

    out = table.take(pa.array(rows)) if len(rows) != table.num_rows else table
    for name, values in (
        ("input_ids", pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(ids))),
        ("loss_mask", pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(mask))),
        ("seq_len", pa.array(seq_len, pa.int64())),
        ("prompt_len", pa.array(kept_prompt, pa.int64())),
        ("row_index", pa.array(rows + first_index, pa.int64())),
    ):
        out = out.append_column(name, values)
    return out


def soft_targets(rows: pa.Table) -> pa.Table:
    """`rows` (training rows with the shards' LOGPROB_COLUMNS) plus SOFT_COLUMNS: each row's k and the soft targets
    of its kept output positions (the first `seq_len - prompt_len`, as the cut keeps them): top-k ids and logprobs
    (k per position, flattened) and the sampled token's logprob. A row without them is an error (its run did not
    ask for them)."""
    missing = sum(rows.column(name).null_count for name in LOGPROB_COLUMNS)
    if missing:
        from eagle_datagen.errors import DataGenError

        first = rows.filter(rows.column("top_logprob_ids").is_null()).column("sample_id")[0].as_py()
        raise DataGenError(
            f"sample {first} has no top-k logprobs (its run did not ask for them: top_logprobs 0): export without "
            "--logprobs, or export only runs made with --top-logprobs K"
        )
    output_len = np.diff(_flat(rows.column("output_ids"))[0])
    top_offsets, top_ids = _flat(rows.column("top_logprob_ids"))
    _, top = _flat(rows.column("top_logprobs"))
    sampled_offsets, sampled = _flat(rows.column("output_logprobs"))
    k = np.where(output_len > 0, np.diff(top_offsets) // np.maximum(output_len, 1), 0)
    kept = rows.column("seq_len").to_numpy() - rows.column("prompt_len").to_numpy()
    cut_offsets = np.zeros(rows.num_rows + 1, np.int64)
    np.cumsum(kept * k, out=cut_offsets[1:])
    take = ranges(top_offsets[:-1], kept * k)
    own_offsets = np.zeros(rows.num_rows + 1, np.int64)
    np.cumsum(kept, out=own_offsets[1:])
    own = ranges(sampled_offsets[:-1], kept)
    for name, values in (
        ("soft_k", pa.array(k, pa.int32())),
        ("soft_top_ids", pa.ListArray.from_arrays(pa.array(cut_offsets, pa.int32()), pa.array(top_ids[take]))),
        ("soft_top", pa.ListArray.from_arrays(pa.array(cut_offsets, pa.int32()), pa.array(top[take]))),
        ("soft_sampled", pa.ListArray.from_arrays(pa.array(own_offsets, pa.int32()), pa.array(sampled[own]))),
    ):
        rows = rows.append_column(name, values)
    return rows
