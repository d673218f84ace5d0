"""Main's publishing before it was bounded (the whole shard in memory), kept as the reference the bounded
publisher must match byte for byte: `shard_rows` and `publish_shard`'s encoding as they were (commit e2b5dfb), and
the columns added since (contract v1.1's `mode`)."""

from __future__ import annotations

import json
from typing import Any

from eagle_datagen.conversation.driver import conversation_rows, has_ended, validation_row
from eagle_datagen.generation.checkpoint import load_checkpoints
from eagle_datagen.generation.plan import (
    RunPlan,
    is_conversation_shard,
    shard_conversations,
    shard_key,
    shard_requests,
)
from eagle_datagen.storage.output_root import OutputRoot
from eagle_datagen.storage.parquet import (
    QUARANTINE_SCHEMA,
    SAMPLE_SCHEMA,
    encode_shard,
    read_parquet_bytes,
    samples_table,
)
from eagle_datagen.validation.rules import reasoning_length, validate_sample


def _int_or_none(value: Any) -> int | None:
    return value if type(value) is int else None


def _conversation_shard_rows(root: OutputRoot, plan: RunPlan, index: int) -> list[dict[str, Any]] | None:
    by_conversation = conversation_rows(load_checkpoints(root, plan.run_id, index))
    rows = []
    for job in shard_conversations(root, plan, index):
        steps = by_conversation.get(job.conversation_id, [])
        if not has_ended(steps):
            return None
        for saved in steps:
            meta, finish = saved["meta_info"] or {}, saved["finish_reason"] or {}
            rows.append(
                validation_row(saved["prompt_ids"], saved)
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
                    "mode": job.mode,
                }
                | saved["conversation"]
            )
    return rows


def old_shard_rows(root: OutputRoot, plan: RunPlan, index: int) -> list[dict[str, Any]] | None:
    if is_conversation_shard(plan, index):
        return _conversation_shard_rows(root, plan, index)
    requests = shard_requests(root, plan, index)
    done = load_checkpoints(root, plan.run_id, index)
    if any(r.sample_id not in done for r in requests):
        return None
    rows = []
    for request in requests:
        saved = done[request.sample_id]
        meta, finish = saved["meta_info"] or {}, saved["finish_reason"] or {}
        rows.append(
            {
                "sample_id": request.sample_id,
                "record_id": request.record_id,
                "prompt_id": request.prompt_id,
                "category": request.category,
                "sample_index": request.sample_index,
                "prompt_ids": request.prompt_ids,
                "output_ids": saved["output_ids"],
                "finish_reason": "error" if saved["error"] else finish.get("type", "abort"),
                "completion_tokens": int(meta.get("completion_tokens", len(saved["output_ids"]))),
                "prompt_tokens": int(meta.get("prompt_tokens", len(request.prompt_ids))),
                "sampling": json.dumps(request.sampling, sort_keys=True),
                "model": plan.model,
                "run_id": plan.run_id,
                "weight_version": meta.get("weight_version"),
                "cached_tokens": _int_or_none(meta.get("cached_tokens")),
                "finish_detail": json.dumps(finish, sort_keys=True) if finish else None,
                "error": saved["error"],
                "mode": request.mode,
            }
        )
    return rows


def old_shard_bytes(root: OutputRoot, plan: RunPlan, index: int, profile, limits) -> tuple[bytes | None, bytes | None]:
    """(data file bytes, quarantine file bytes) as main's publish_shard encoded them (None: no such file), with the
    `heldout` column added since (heldout.py) taken from the plan's marks."""
    rows = old_shard_rows(root, plan, index)
    assert rows is not None
    planned = read_parquet_bytes(root.read_bytes(shard_key(plan.run_id, index)))
    marks = dict(zip(planned.column("prompt_id").to_pylist(), planned.column("heldout").to_pylist(), strict=True))
    data, quarantine = [], []
    for row in rows:
        row["heldout"] = marks.get(row["prompt_id"])
        verdict = validate_sample(row, profile, limits)
        row["reasoning_tokens"] = reasoning_length(row["output_ids"], profile)
        if verdict is None:
            data.append({name: row.get(name) for name in SAMPLE_SCHEMA.names})
        else:
            row["reject_reason"], row["reject_detail"] = verdict
            quarantine.append({name: row.get(name) for name in QUARANTINE_SCHEMA.names})
    return (
        encode_shard(samples_table(data)) if data else None,
        encode_shard(samples_table(quarantine, True)) if quarantine else None,
    )
