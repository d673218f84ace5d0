"""Building a run's plan in memory flat in the number of prompts: source and tokenize into a local spool
(`stream_and_tokenize`), choose the samples on arrays (each category's sample ids as 16-byte digests and which of
them to generate: `PlannedCategory`, `claim_samples`), order each category's chosen prompts (`family_order`, the
plan order) and write the shards one at a time, each read from the spool by row. Memory holds a few numbers per
prompt (17 bytes a sample, 4 its length: no Python object per prompt), and one shard's rows.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from eagle_datagen.errors import DataGenError
from eagle_datagen.generation.incremental import NothingToDo
from eagle_datagen.generation.plan import (
    PLAN_SCHEMA,
    CategorySettings,
    PlannedCategory,
    RunPlan,
    ShardInfo,
    parquet_bytes,
    plan_key,
    shard_key,
)
from eagle_datagen.generation.plan_order import family_order
from eagle_datagen.heldout import HeldoutPolicy, is_heldout
from eagle_datagen.inference.samples import sample_id_digests, sample_id_tail
from eagle_datagen.modes import sample_modes
from eagle_datagen.records import PromptRecord
from eagle_datagen.settings import named
from eagle_datagen.storage.output_root import OutputRoot
from eagle_datagen.storage.sample_id_set import DIGEST
from eagle_datagen.tokenization.stage import TokenizeSetup, stream_and_tokenize
from eagle_datagen.tokenization.tokenized_spool import TokenizedSpool

log = logging.getLogger(__name__)

SettingsFor = Callable[[list[str]], dict[str, CategorySettings]]
Choose = Callable[[list[PlannedCategory], dict[str, CategorySettings]], list[PlannedCategory]]


def source_and_plan(
    setup: TokenizeSetup,
    root: OutputRoot,
    run_id: str,
    *,
    model: str,
    provenance: dict[str, Any],
    shard_size: int,
    settings_for: SettingsFor,
    choose: Choose,
    skip: Callable[[PromptRecord], bool] | None = None,
    heldout: HeldoutPolicy | None = None,
) -> RunPlan:
    """Source, tokenize, choose (`choose`: the claims) and write the plan of `run_id`; `settings_for` gives the
    sampling of each category, `skip` leaves records out before they are tokenized; `heldout` marks the prompts
    the output root holds out of every export."""

    def conversations(categories: list[str]) -> set[str]:
        return {c for c, s in settings_for(categories).items() if s.turns == "each"}

    known: dict[str, CategorySettings] = {}

    def mode_of(record: PromptRecord) -> str:
        if record.category not in known:
            known[record.category] = settings_for([record.category])[record.category]
        return known[record.category].mode_of(record.prompt_id)

    skipped = 0

    def counted_skip(record: PromptRecord) -> bool:
        nonlocal skipped
        assert skip is not None
        known = skip(record)
        skipped += known
        return known

    rejects_key = f"rejects/run={run_id}/rejects.jsonl"
    skipping = counted_skip if skip else None
    with stream_and_tokenize(setup, root, rejects_key, conversations, skipping, mode_of) as tokenized:
        spool = tokenized.spool
        if skip is not None:
            log.info("run %s: %d known prompt(s) skipped before tokenizing, %d tokenized", run_id, skipped, spool.total)
        if not spool.total:
            if skipped:
                raise NothingToDo(f"run {run_id}: every sample is already published under this output root")
            categories = named("categories", setup.options.front_end)
            raise DataGenError(f"no prompts left to generate after validation: check the sources and {categories}")
        settings = settings_for(spool.categories)
        planned = [planned_category(spool, category, settings[category], model) for category in spool.categories]
        chosen = choose(planned, settings)
        del planned
        policy = heldout.to_json() if heldout is not None else None
        empty = RunPlan(run_id, model, setup.profile.name, settings, [], provenance, policy)
        plan = write_spooled_plan(root, empty, spool, chosen, shard_size)
    log.info("run %s: planned %d samples in %d shards", run_id, plan.total_samples, len(plan.shards))
    return plan


def planned_category(spool: TokenizedSpool, category: str, settings: CategorySettings, model: str) -> PlannedCategory:
    """Every sample of the category's spooled prompts, wanted; the ids computed a batch of prompts at a time, each
    prompt's with the tail of its mode."""
    per_prompt = settings.samples_per_prompt
    tails = {mode: sample_id_tail(model, settings.sampling_of(mode), mode) for mode in sample_modes(settings.mode)}
    sample_ids = np.empty((spool.rows(category), per_prompt), dtype=DIGEST)
    row = 0
    for batch in spool.batches(category):
        prompt_ids = batch.column("prompt_id").to_pylist()
        modes = np.asarray(batch.column("mode").to_pylist(), dtype=object)
        strange = set(modes.tolist()) - set(tails)
        if strange:  # the spool and the settings disagree: never plan a sample with another identity
            raise DataGenError(f"category {category}: prompts rendered in mode(s) {sorted(strange)} it does not plan")
        for mode, tail in tails.items():
            rows = np.flatnonzero(modes == mode)
            if not len(rows):
                continue
            digests = sample_id_digests([prompt_ids[r] for r in rows], per_prompt, tail)
            sample_ids[row + rows] = np.frombuffer(digests, DIGEST).reshape(len(rows), per_prompt)
        row += len(prompt_ids)
    return PlannedCategory(category, sample_ids, np.ones(sample_ids.shape, dtype=bool))


def write_spooled_plan(
    root: OutputRoot, plan: RunPlan, spool: TokenizedSpool, chosen: list[PlannedCategory], shard_size: int
) -> RunPlan:
    """Each category's `chosen` prompts in plan order, in shards of `shard_size` written one at a time; plan.json
    last (a plan.json on storage means the whole plan is there). Returns `plan` with its shards."""
    shards: list[ShardInfo] = []
    for planned in sorted(chosen, key=lambda p: p.category):
        category, rows = planned.category, planned.rows()
        if not len(rows):
            continue
        order = family_order(lambda rows=rows, category=category: _ids_of(spool, category, rows), len(rows))
        keep_conversation = plan.categories[category].turns == "each"
        for start in range(0, len(order), shard_size):
            members = rows[order[start : start + shard_size]]
            wanted = planned.wanted[members]
            counts = np.count_nonzero(wanted, axis=1)
            indices = pa.ListArray.from_arrays(
                pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)),
                pa.array(np.nonzero(wanted)[1].astype(np.int32)),
            )
            table = spool.take(category, members)
            info = ShardInfo(len(shards), category, len(members), int(counts.sum()))
            fraction = plan.heldout["fraction"] if plan.heldout else None
            keys = table.column("heldout_key").to_pylist()
            heldout = pa.array([None] * len(keys) if fraction is None else [is_heldout(k, fraction) for k in keys])
            shard = pa.table(
                {
                    "record_id": table.column("record_id"),
                    "prompt_id": table.column("prompt_id"),
                    "category": pa.array([category] * len(members), pa.string()),
                    "prompt_ids": table.column("prompt_ids"),
                    "sample_indices": indices,
                    "conversation": table.column("conversation")
                    if keep_conversation
                    else pa.nulls(len(members), pa.string()),
                    "mode": table.column("mode"),
                    "heldout": heldout.cast(pa.bool_()),
                },
                schema=PLAN_SCHEMA,
            )
            root.write_bytes(shard_key(plan.run_id, info.index), parquet_bytes(shard))
            shards.append(info)
    plan = dataclasses.replace(plan, shards=shards)
    root.write_bytes(plan_key(plan.run_id), json.dumps(plan.to_json(), indent=1).encode())
    return plan


def _ids_of(spool: TokenizedSpool, category: str, rows: np.ndarray) -> Iterator[pa.ListArray]:
    """The ids of the spool's `rows` (ascending) of `category`, batch by batch."""
    start = 0
    for batch in spool.batches(category):
        end = start + batch.num_rows
        lo, hi = np.searchsorted(rows, [start, end])
        if hi > lo:
            yield batch.column("prompt_ids").take(pa.array(rows[lo:hi] - start))
        start = end
