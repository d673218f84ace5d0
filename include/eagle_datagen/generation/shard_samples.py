"""A finished shard's samples as rows, read from its checkpoints a chunk at a time, each with its place.

Publishing must not hold a shard (4 samples x 28k tokens x 1,000 prompts is 112M tokens): `shard_row_batches`
reads the checkpoint chunks one by one, in key order, keeps the first copy of each sample (as
`load_checkpoints` does) and hands on small batches of rows, each row with its place in the shard's row order,
so that the writer (storage/staged_shard.py) can put them back in that order on local disk:
- single-turn shards: request order (prompt order, then sample index); the checkpoint indexes say first,
  without reading an answer, whether every sample is there;
- `turns: each` shards: conversation order, then turn, then the order the steps were first stored in.
The rows have publish.py's columns, before validation. A shard with a sample (or a conversation's end)
missing is a `ShardIncomplete`, raised before anything is read for single-turn shards, at the end otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from eagle_datagen.conversation.driver import soft_targets, validation_row
from eagle_datagen.errors import DataGenError
from eagle_datagen.generation.checkpoint import checkpoint_rows, drop_damaged_indexes, load_checkpoint_index
from eagle_datagen.generation.plan import RunPlan, is_conversation_shard, shard_conversations, shard_key
from eagle_datagen.inference.samples import SampleRequest
from eagle_datagen.modes import THINKING
from eagle_datagen.storage.output_root import OutputRoot
from eagle_datagen.storage.parquet import read_parquet_bytes

BATCH_ROWS = 64  # rows handed on at a time ...
BATCH_TOKENS = 1_000_000  # ... or fewer, once they hold this many ids (a Python int list is ~36 B per id)

Placed = tuple[int, dict[str, Any]]  # a row's place in the shard, and the row


class ShardIncomplete(DataGenError):
    """A shard cannot be published while some of its samples have no result yet."""


def _int_or_none(value: Any) -> int | None:
    return value if type(value) is int else None


def _incomplete(
    plan: RunPlan, index: int, missing: int, total: int, what: str = "samples have no result"
) -> ShardIncomplete:
    return ShardIncomplete(f"shard {index} of run {plan.run_id}: {missing:,} of its {total:,} {what} yet")


def _batched(rows: Iterator[Placed]) -> Iterator[list[Placed]]:
    batch: list[Placed] = []
    tokens = 0
    for placed in rows:
        batch.append(placed)
        row = placed[1]
        # soft targets: an answer's top-k logprobs weigh about k/2 ids per output token (base64, then arrays)
        tokens += len(row["output_ids"]) * (1 + (row.get("top_logprobs_num") or 0) // 2) + len(row["prompt_ids"])
        if len(batch) >= BATCH_ROWS or tokens >= BATCH_TOKENS:
            yield batch
            batch, tokens = [], 0
    if batch:
        yield batch


def _single_turn(root: OutputRoot, plan: RunPlan, index: int) -> Iterator[Placed]:
    info = plan.shards[index]
    settings = plan.categories[info.category]
    # the plan's prompts as Arrow (4 bytes per id), not as Python lists; one row's ids are made a list when used
    table = read_parquet_bytes(root.read_bytes(shard_key(plan.run_id, index)))
    names = [n for n in ("prompt_id", "record_id", "category", "sample_indices", "mode") if n in table.column_names]
    small = table.select(names).to_pylist()  # a plan written before modes has no mode: thinking
    heldout = _heldout_column(table)
    prompt_ids = table.column("prompt_ids")
    requests: dict[str, tuple[int, SampleRequest, int]] = {}  # sample_id -> (place, request, plan row)
    for row_index, row in enumerate(small):
        mode = row.get("mode") or THINKING
        for k in row["sample_indices"]:
            request = SampleRequest.create(
                prompt_id=row["prompt_id"],
                record_id=row["record_id"],
                category=row["category"],
                sample_index=k,
                prompt_ids=[],
                model=plan.model,
                sampling=settings.sampling_of(mode),
                shard=index,
                mode=mode,
            )
            requests[request.sample_id] = (len(requests), request, row_index)
    stored = load_checkpoint_index(root, plan.run_id, index)
    missing = sum(sample_id not in stored for sample_id in requests)
    if missing:
        raise _incomplete(plan, index, missing, len(requests))
    found = 0
    for saved in checkpoint_rows(root, plan.run_id, index):
        entry = requests.get(saved["sample_id"])
        if entry is None:
            continue
        place, request, row_index = entry
        ids = prompt_ids[row_index].as_py()
        meta, finish = saved["meta_info"] or {}, saved["finish_reason"] or {}
        found += 1
        yield (
            place,
            {
                "sample_id": request.sample_id,
                "record_id": request.record_id,
                "prompt_id": request.prompt_id,
                "category": request.category,
                "sample_index": request.sample_index,
                "prompt_ids": ids,
                "output_ids": saved["output_ids"],
                "finish_reason": "error" if saved["error"] else finish.get("type", "abort"),
                "completion_tokens": int(meta.get("completion_tokens", len(saved["output_ids"]))),
                "prompt_tokens": int(meta.get("prompt_tokens", len(ids))),
                "sampling": json.dumps(request.sampling, sort_keys=True),
                "model": plan.model,
                "run_id": plan.run_id,
                "weight_version": meta.get("weight_version"),
                "cached_tokens": _int_or_none(meta.get("cached_tokens")),
                "finish_detail": json.dumps(finish, sort_keys=True) if finish else None,
                "error": saved["error"],
                "mode": request.mode,
                "heldout": heldout[row_index],
            }
            | soft_targets(settings.top_logprobs, meta),
        )
    if found != len(requests):  # an index named a sample its chunk does not hold (a damaged chunk)
        dropped = drop_damaged_indexes(root, plan.run_id, index)
        raise ShardIncomplete(
            f"shard {index} of run {plan.run_id}: {len(requests) - found:,} of its {len(requests):,} samples are "
            f"listed by checkpoint indexes but missing from their chunks (damaged checkpoints); {dropped} such "
            "index(es) removed, so that a rerun generates those samples again"
        )


# a step's place, in 63 bits: conversation, then turn, then the order it was first stored in (ties of a turn, as
# a stable sort of the stored steps by turn leaves them)
_CONVERSATION_BITS, _TURN_BITS, _SEEN_BITS = 23, 16, 24


def _step_place(ordinal: int, turn: int, seen: int) -> int:
    if not (0 <= ordinal < 1 << _CONVERSATION_BITS and 0 <= turn < 1 << _TURN_BITS and seen < 1 << _SEEN_BITS):
        raise DataGenError(f"a shard too large to order: conversation {ordinal}, turn {turn}, step {seen}")
    return (ordinal << (_TURN_BITS + _SEEN_BITS)) | (turn << _SEEN_BITS) | seen


def _heldout_column(table: pa.Table) -> list[bool | None]:
    """The plan rows' held-out marks (heldout.py); None for a plan written before the column."""
    if "heldout" not in table.column_names:
        return [None] * table.num_rows
    return table.column("heldout").to_pylist()


def _conversations(root: OutputRoot, plan: RunPlan, index: int) -> Iterator[Placed]:
    jobs = {job.conversation_id: (ordinal, job) for ordinal, job in enumerate(shard_conversations(root, plan, index))}
    planned = read_parquet_bytes(root.read_bytes(shard_key(plan.run_id, index)))
    heldout = dict(zip(planned.column("prompt_id").to_pylist(), _heldout_column(planned), strict=True))
    last: dict[str, tuple[int, int, bool]] = {}  # conversation -> (turn, seen, ended) of its last step
    for seen, saved in enumerate(checkpoint_rows(root, plan.run_id, index)):
        step = saved.get("conversation")
        if step is None or step["conversation_id"] not in jobs:
            continue
        ordinal, job = jobs[step["conversation_id"]]
        turn = step["turn_index"]
        mark = (turn, seen, step["trajectory_end"] is not None)
        if job.conversation_id not in last or mark[:2] > last[job.conversation_id][:2]:
            last[job.conversation_id] = mark
        meta, finish = saved["meta_info"] or {}, saved["finish_reason"] or {}
        place = _step_place(ordinal, turn, seen)
        yield (
            place,
            validation_row(saved["prompt_ids"], saved, job.mode, job.top_logprobs)
            | {
                "sample_id": saved["sample_id"],
                "record_id": job.record_id,
                "prompt_id": job.prompt_id,
                "category": job.category,
                "sample_index": job.sample_index,
                "sampling": json.dumps(saved["sampling"], sort_keys=True),
                "model": plan.model,
                "run_id": plan.run_id,
                "weight_version": meta.get("weight_version"),
                "cached_tokens": _int_or_none(meta.get("cached_tokens")),
                "finish_detail": json.dumps(finish, sort_keys=True) if finish else None,
                "heldout": heldout.get(job.prompt_id),
            }
            | step,
        )
    unended = sum(not last.get(cid, (0, 0, False))[2] for cid in jobs)
    if unended:
        raise _incomplete(plan, index, unended, len(jobs), "conversations have not ended")


def shard_row_batches(root: OutputRoot, plan: RunPlan, index: int) -> Iterator[list[Placed]]:
    """The shard's rows in batches (checkpoint order), each with its place; ShardIncomplete when one is missing."""
    rows = _conversations(root, plan, index) if is_conversation_shard(plan, index) else _single_turn(root, plan, index)
    return _batched(rows)


def shard_rows(root: OutputRoot, plan: RunPlan, index: int) -> list[dict[str, Any]] | None:
    """The whole shard's rows in order, or None while any is pending: for small shards and tests (publishing
    uses `shard_row_batches`)."""
    try:
        placed = [row for batch in shard_row_batches(root, plan, index) for row in batch]
    except ShardIncomplete:
        return None
    return [row for _, row in sorted(placed, key=lambda p: p[0])]
