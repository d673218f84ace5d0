"""Which samples a new plan takes: all of them, or for an incremental run only those no other run has.

An incremental run skips the samples of published runs (the catalog) and those claimed by runs still in
flight (claims.py), and claims the rest, while holding the plan lock (plan_lock.py), so that runs planning
at the same time under one output root (a backfill's runs, two command lines) split the new samples
instead of each generating them all. The samples of a run that has ended are taken over by the run that plans
them, in the same plan as its new ones (takeover.py). The slow reads happen before the lock: the catalog is read
first and only brought up to date (new manifests) under it. Every run, incremental or not, writes its claim, so
incremental runs that plan while it is in flight leave its samples alone; a dry run claims nothing (and takes
nothing over).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np

from eagle_datagen.errors import DataGenError, RunUnfinished
from eagle_datagen.generation.claims import Claim, Ended, HolderCheck, claimed_sample_ids, write_claim
from eagle_datagen.generation.plan import CategorySettings, PlannedCategory
from eagle_datagen.generation.plan_lock import PlanLock, PlanLockPolicy
from eagle_datagen.generation.takeover import take_over
from eagle_datagen.inference.samples import sample_id_digests, sample_id_tail
from eagle_datagen.records import PromptRecord
from eagle_datagen.storage.catalog import Catalog
from eagle_datagen.storage.output_root import OutputRoot
from eagle_datagen.storage.sample_id_set import DIGEST, SampleIdSet, hex_strings
from eagle_datagen.tokenization.provenance import check_same_tokenizer

log = logging.getLogger(__name__)


class NothingToDo(DataGenError):
    """An incremental run found no sample of its own to generate: every one is published, or claimed by a
    run in flight (`holders`: run id -> samples, last_active, expires, store times). Only the first is a
    success with nothing to publish; the second means another run must still publish them."""

    def __init__(self, message: str, published: int = 0, holders: dict[str, dict[str, Any]] | None = None):
        super().__init__(message)
        self.published = published
        self.holders = dict(holders or {})

    def to_json(self) -> dict[str, Any]:
        return {"published": self.published, "claimed_by": self.holders}


class ClaimedElsewhere(RunUnfinished):
    """A run's every unpublished sample is claimed by other runs: it generated and published nothing, and must
    not end as a success (the message is NothingToDo's, naming the holders and when to rerun)."""


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def _holder(run: str, h: dict[str, Any]) -> str:
    life = f"last showed life {_when(h['last_active'])}"
    if h.get("running"):  # its orchestrator says it runs: its claim holds whatever its age
        return f"run {run} holds {h['samples']} samples ({life}; still running: {h['running']})"
    state = "live" if h.get("live", True) else "silent"
    return f"run {run} holds {h['samples']} samples ({life}, {state}; its claim expires {_when(h['expires'])})"


def describe_holders(holders: dict[str, dict[str, Any]]) -> str:
    return "; ".join(_holder(run, h) for run, h in sorted(holders.items()))


def rerun_when(holders: dict[str, dict[str, Any]]) -> str:
    """When a rerun may find the samples free: once every holder's claim has expired (unless it shows life
    again), or, while an orchestrator says a holder runs, once it has published or ended."""
    if any(h.get("expires") is None for h in holders.values()):
        return "rerun once the holding run has published or ended (its samples are then taken over)"
    return (
        f"rerun after {_when(max(h['expires'] for h in holders.values()))}, or once the holding run has ended (a "
        "failed or withdrawn run releases its claims)"
    )


def wanted_sample_ids(planned: list[PlannedCategory]) -> np.ndarray:
    """The digests of the samples `planned` generates, in plan-building order: category by category (in the
    order given), prompt by prompt, each in sample index order (the claim's order)."""
    parts = [p.wanted_ids() for p in planned]
    return np.concatenate(parts) if parts else np.empty(0, DIGEST)


def keep_new(planned: list[PlannedCategory], *existing: SampleIdSet) -> list[PlannedCategory]:
    """`planned` without the samples any of `existing` holds (a prompt left with none has no row in the plan)."""
    kept = []
    for p in planned:
        known = np.zeros(p.sample_ids.shape, dtype=bool)
        for ids in existing:
            known |= ids.contains(p.sample_ids)
        kept.append(p.keep(~known))
    return kept


def read_catalog(root: OutputRoot, model: str, weight_version: str | None, per_weight_version: bool) -> Catalog:
    """The catalog an incremental run compares with (its weight version's samples only, with `per_weight_version`)."""
    return Catalog(model, weight_version if per_weight_version else None).refresh(root)


def skip_published(
    catalog: Catalog,
    model: str,
    rendering: dict[str, Any],
    settings_for: Callable[[list[str]], dict[str, CategorySettings]],
) -> Callable[[PromptRecord], bool] | None:
    """Newness before tokenizing: a predicate true for a record every sample of which the catalog holds (its ids
    follow from the record's prompt id, the model and its category's sampling), so that a refresh tokenizes only
    what is new. None when a published run rendered its prompts with another tokenizer or chat template than
    `rendering` (the loader's provenance): what it published says nothing about prompts as this run renders them,
    so every record is tokenized and compared by sample id afterwards, as before (and the run says so)."""
    other = catalog.rendered_otherwise(rendering.get("tokenizer_sha256"), rendering.get("chat_template_sha256"))
    if other:
        log.warning(
            "incremental: %d published run(s) (%s) rendered prompts with another tokenizer or chat template: the "
            "known prompts are not skipped before tokenizing; every record is tokenized and compared by sample id",
            len(other),
            ", ".join(other[:5]) + (", ..." if len(other) > 5 else ""),
        )
        return None
    if not catalog.sample_ids:
        return None
    by_category: dict[tuple[str, str], tuple[int, str]] = {}  # (category, mode) -> samples per prompt, tail
    known = catalog.sample_ids

    def skip(record: PromptRecord) -> bool:
        key = (record.category, record.mode)  # the record's mode is set before it is asked about
        category = by_category.get(key)
        if category is None:
            settings = settings_for([record.category])[record.category]
            category = by_category[key] = (
                settings.samples_per_prompt,
                sample_id_tail(model, settings.sampling_of(record.mode), record.mode),
            )
        ids = sample_id_digests([record.prompt_id], *category)
        return all(known.has(ids[at : at + 16]) for at in range(0, len(ids), 16))

    return skip


def claim_samples(
    root: OutputRoot,
    run_id: str,
    planned: list[PlannedCategory],
    settings: dict[str, CategorySettings],
    model: str,
    weight_version: str | None,
    *,
    incremental: bool,
    per_weight_version: bool,
    claim_ttl_s: float,
    lock_policy: PlanLockPolicy,
    claim: bool = True,
    tokenizer: dict[str, Any] | None = None,
    catalog: Catalog | None = None,
    front_end: str = "cli",
    check: HolderCheck | None = None,
) -> list[PlannedCategory]:
    """The samples this run plans, claimed under its run id (unless `claim` is False: a dry run, whose plan
    is never generated). Raises NothingToDo when none is new. The samples of a holder that has ended (`check`,
    an orchestrator's records, says so; or it showed no life for the TTL) are taken over when this run plans
    some of them, whatever else it plans (takeover.py)."""

    def write(chosen: list[PlannedCategory]) -> None:
        if claim:
            ids = hex_strings(wanted_sample_ids(chosen))
            write_claim(root, Claim(run_id, model, weight_version, sorted(settings), ids))

    if not incremental:
        write(planned)
        return planned
    wanted = weight_version if per_weight_version else None
    catalog = catalog if catalog is not None else Catalog(model, wanted).refresh(root)
    with PlanLock(root, run_id, lock_policy) as lock:
        catalog.refresh(root)  # runs published while this one waited
        if tokenizer is not None:  # its samples are recognised by prompt, not ids: one tokenizer per root
            for published, provenance in sorted(catalog.provenance.items()):
                check_same_tokenizer(published, provenance, tokenizer, "published run", front_end)
        holders: dict[str, dict[str, Any]] = {}
        ended: dict[str, Ended] = {}
        in_flight = claimed_sample_ids(
            root, lock.acquired_at, claim_ttl_s, model, wanted, catalog.runs, run_id, holders, check, ended
        )
        kept = keep_new(planned, catalog.sample_ids, in_flight)  # not their union: a copy of the catalog
        new = sum(p.samples for p in kept)
        every = SampleIdSet(wanted_sample_ids(planned)).digests  # each distinct sample once
        published_mask = catalog.sample_ids.contains(every)
        published = int(published_mask.sum())
        held = int((in_flight.contains(every) & ~published_mask).sum())
        # ended holders of samples this run plans: taken over (noted, their claims withdrawn) before this run
        # claims them, so that a holder cleared and resumed afterwards generates none of them
        taken = {
            holder: e for holder, e in ended.items() if (e.sample_ids.contains(every) & ~published_mask).any()
        }
        log.info(
            "incremental: of %d samples, %d are published, %d planned by runs in flight, %d new (%d taken over "
            "from %d run(s) that ended)",
            len(every),
            published,
            held,
            new,
            sum(int((e.sample_ids.contains(every) & ~published_mask).sum()) for e in taken.values()),
            len(taken),
        )
        if not new:
            if not held:
                message = f"run {run_id}: all {len(every)} samples are already published under this output root"
                raise NothingToDo(message, published)
            raise NothingToDo(
                f"run {run_id}: nothing to generate, but {held} of its {len(every)} samples are not published "
                f"({published} are): {describe_holders(holders)}: {rerun_when(holders)}",
                published,
                holders,
            )
        lock.verify()
        if claim:
            for holder, e in sorted(taken.items()):
                take_over(root, holder, run_id, e.why)
        write(kept)
    return kept
