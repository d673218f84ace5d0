"""Collect prompts: read every source, validate each record, deduplicate by prompt id, apply caps.

Order is deterministic (recipe categories, then sources, then records as read), so the first occurrence
of a prompt wins and a rerun selects the same prompts. A cap keeps the prompts with the smallest
sha256(seed, category, prompt_id): a pure function of the prompt, so adding records to a source
changes the selection only where the new records rank in.
"""

from __future__ import annotations

import hashlib
import logging
from array import array
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from eagle_datagen import settings
from eagle_datagen.errors import ConfigError, RejectRateExceeded
from eagle_datagen.progress import Progress
from eagle_datagen.records import (
    CATEGORY_PATTERN,
    DEFAULT_LIMITS,
    FILTER_STAGE,
    PromptRecord,
    RecordLimits,
    Reject,
    excerpt_of,
    validate_record,
)
from eagle_datagen.sources.decontamination import BenchmarkIndex
from eagle_datagen.sources.locations import SourceFile
from eagle_datagen.sources.near_duplicates import find_near_duplicates
from eagle_datagen.sources.readers import read_rows
from eagle_datagen.sources.recipe import NearDuplicates, Recipe, SourceSpec
from eagle_datagen.sources.resolve import resolve_source
from eagle_datagen.sources.spool import PromptSpool

log = logging.getLogger(__name__)
UNKNOWN_CATEGORY = "(none)"


@dataclass(frozen=True)
class SourcePlan:
    category: str | None  # None: each record carries its own category
    sources: tuple[SourceSpec, ...]
    max_prompts: int | None = None


@dataclass
class CategoryCounts:
    read: int = 0
    rejected: int = 0
    duplicates: int = 0
    filtered: int = 0  # benchmark overlaps and near-duplicates
    capped: int = 0
    selected: int = 0


@dataclass
class SourceCounts:
    """What became of one source's records (the source as the recipe or --prompts names it)."""

    read: int = 0
    rejects: Counter[str] = field(default_factory=Counter)  # reason -> n, filters included
    benchmark_overlaps: Counter[str] = field(default_factory=Counter)  # benchmark -> n

    def to_json(self) -> dict[str, Any]:
        return {
            "records_read": self.read,
            "rejects": dict(sorted(self.rejects.items())),
            "benchmark_overlaps": dict(sorted(self.benchmark_overlaps.items())),
        }


@dataclass(frozen=True)
class PromptFilters:
    """Filters after validation and exact dedup, before caps: benchmark decontamination, near-duplicates."""

    benchmarks: BenchmarkIndex | None = None
    near_duplicates: NearDuplicates | None = None


@dataclass
class CollectedPrompts:
    prompts: list[PromptRecord]
    rejects: list[Reject]
    counts: dict[str, CategoryCounts] = field(default_factory=dict)
    sources: dict[str, SourceCounts] = field(default_factory=dict)
    source_of: dict[str, str] = field(default_factory=dict)  # a kept prompt's origin -> its source

    @property
    def records_read(self) -> int:
        return sum(c.read for c in self.counts.values())

    @property
    def invalid(self) -> int:
        """Rejects of broken records (what max_reject_rate bounds); filtered records are good ones left out."""
        return sum(1 for r in self.rejects if r.stage != FILTER_STAGE)

    @property
    def reject_rate(self) -> float:
        return self.invalid / self.records_read if self.records_read else 0.0

    def by_category(self) -> dict[str, list[PromptRecord]]:
        groups: dict[str, list[PromptRecord]] = defaultdict(list)
        for prompt in self.prompts:
            groups[prompt.category].append(prompt)
        return dict(groups)


class _CandidateKeys:
    """What collecting keeps per candidate record: its prompt id (for dedup and caps), source and category."""

    def __init__(self) -> None:
        self.prompt_ids: list[str] = []
        self._seen: set[str] = set()
        self.spec = array("I")
        self.category = array("I")
        self.categories: list[str] = []
        self._category_index: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.prompt_ids)

    def add(self, prompt_id: str, spec: int, category: str) -> bool:
        """False for a prompt id seen before (a duplicate: not added)."""
        if prompt_id in self._seen:
            return False
        self._seen.add(prompt_id)
        self.prompt_ids.append(prompt_id)
        self.spec.append(spec)
        if category not in self._category_index:
            self._category_index[category] = len(self.categories)
            self.categories.append(category)
        self.category.append(self._category_index[category])
        return True

    def category_of(self, ordinal: int) -> str:
        return self.categories[self.category[ordinal]]


@dataclass
class StreamedPrompts:
    """The collected prompts on local disk (`PromptSpool`) and which of them were selected; counts and rejects in
    memory. A context manager: leaving it removes the spool."""

    spool: PromptSpool
    selection: bytearray  # 1 for each selected ordinal
    category_order: list[str]  # categories in the order collect_prompts lists them
    rejects: list[Reject]
    counts: dict[str, CategoryCounts] = field(default_factory=dict)
    sources: dict[str, SourceCounts] = field(default_factory=dict)
    file_spec: dict[str, str] = field(default_factory=dict)  # a source file's uri -> its source spec

    def __enter__(self) -> StreamedPrompts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.spool.close()

    @property
    def selected(self) -> int:
        return sum(c.selected for c in self.counts.values())

    @property
    def records_read(self) -> int:
        return sum(c.read for c in self.counts.values())

    @property
    def invalid(self) -> int:
        return sum(1 for r in self.rejects if r.stage != FILTER_STAGE)

    @property
    def reject_rate(self) -> float:
        return self.invalid / self.records_read if self.records_read else 0.0

    def records(self) -> Iterator[PromptRecord]:
        """The selected records in the order they were read (categories interleaved)."""
        return self.spool.records(self.selection)

    def source_of(self, origin: str) -> str | None:
        """The source spec of a record by its origin ("<file uri>:<line or row>")."""
        return self.file_spec.get(origin.rpartition(":")[0])

    def in_memory(self) -> CollectedPrompts:
        """As `collect_prompts` returns it: the records in a list, by category (in `category_order`)."""
        rank = {c: i for i, c in enumerate(self.category_order)}
        prompts = sorted(self.records(), key=lambda p: rank[p.category])  # stable: read order within a category
        source_of = {p.origin: spec for p in prompts if (spec := self.source_of(p.origin)) is not None}
        return CollectedPrompts(prompts, self.rejects, self.counts, self.sources, source_of)


def plans_from_recipe(recipe: Recipe, categories: list[str] | None = None) -> list[SourcePlan]:
    chosen = list(recipe.categories)
    if categories:
        unknown = sorted(set(categories) - set(recipe.categories))
        if unknown:
            raise ConfigError(f"--categories names {unknown}, not in the recipe; it has {sorted(recipe.categories)}")
        chosen = [c for c in chosen if c in categories]
    return [
        SourcePlan(name, tuple(recipe.categories[name].sources), recipe.categories[name].max_prompts) for name in chosen
    ]


def plans_from_sources(specs: list[str], **source_settings: Any) -> list[SourcePlan]:
    """One plan for the command line's --prompts; `source_settings` (format, columns, history) apply to each."""
    settings = {k: v for k, v in source_settings.items() if v}
    try:
        return [SourcePlan(None, tuple(SourceSpec(path=s, **settings) for s in specs))]
    except ValidationError as exc:
        error = exc.errors()[0]
        raise ConfigError(f"--prompts {error['loc'][-1] if error['loc'] else ''}: {error['msg']}") from None


# The files of each source spec, by (index of its plan, index of the spec in the plan).
ResolvedSources = dict[tuple[int, int], list[SourceFile]]


def resolve_sources(plans: list[SourcePlan], base_dir: Path | None = None) -> ResolvedSources:
    """Resolve every source spec now (a missing file or bucket is a `SourceError` before any GPU time is
    spent). Reading and validating the files comes later, in `collect_prompts`, which takes this result so
    that a run lists its sources once."""
    return {(p, s): _resolve(spec, base_dir) for p, plan in enumerate(plans) for s, spec in enumerate(plan.sources)}


def check_sources(plans: list[SourcePlan], base_dir: Path | None = None) -> int:
    """`resolve_sources`, counted: the number of files."""
    return sum(len(files) for files in resolve_sources(plans, base_dir).values())


def _resolve(spec: SourceSpec, base_dir: Path | None) -> list[SourceFile]:
    return resolve_source(spec.path, base_dir, spec.split, spec.config)


def cap_prompts(prompts: list[PromptRecord], cap: int | None, seed: int, salt: str) -> list[PromptRecord]:
    """Deterministic sample of `cap` prompts, kept in their original order."""
    if cap is None or len(prompts) <= cap:
        return prompts

    def rank(p: PromptRecord) -> bytes:
        return hashlib.sha256(f"{seed}:{salt}:{p.prompt_id}".encode()).digest()

    keep = {p.prompt_id for p in sorted(prompts, key=rank)[:cap]}
    return [p for p in prompts if p.prompt_id in keep]


def collect_prompts(
    plans: list[SourcePlan],
    *,
    seed: int = 0,
    base_dir: Path | None = None,
    limits: RecordLimits = DEFAULT_LIMITS,
    categories: list[str] | None = None,
    limit_per_category: int | None = None,
    filters: PromptFilters | None = None,
    resolved: ResolvedSources | None = None,
) -> CollectedPrompts:
    """Read, validate, dedup, filter and cap the prompts of `plans`, all in memory (`stream_prompts` is the
    same selection kept on local disk, for runs of any size); `resolved` (from `resolve_sources`) saves listing
    the sources again."""
    with stream_prompts(
        plans,
        seed=seed,
        base_dir=base_dir,
        limits=limits,
        categories=categories,
        limit_per_category=limit_per_category,
        filters=filters,
        resolved=resolved,
    ) as streamed:
        return streamed.in_memory()


def stream_prompts(
    plans: list[SourcePlan],
    *,
    seed: int = 0,
    base_dir: Path | None = None,
    limits: RecordLimits = DEFAULT_LIMITS,
    categories: list[str] | None = None,
    limit_per_category: int | None = None,
    filters: PromptFilters | None = None,
    resolved: ResolvedSources | None = None,
) -> StreamedPrompts:
    """`collect_prompts` in memory flat in the number of prompts: records are read one at a time, validated,
    and written to a spool file on local disk; what stays in memory is each candidate's key (prompt id,
    category, source) for dedup and caps. The selected records are read back, in order, by
    `StreamedPrompts.records()`. (With near-duplicate filtering on, each candidate's text is kept too: MinHash
    compares every pair of the category.)"""
    filters = filters or PromptFilters()
    counts: dict[str, CategoryCounts] = defaultdict(CategoryCounts)
    per_source: dict[str, SourceCounts] = defaultdict(SourceCounts)
    rejects: list[Reject] = []
    spool = PromptSpool()
    keys = _CandidateKeys()
    specs: list[SourceSpec] = []
    file_spec: dict[str, str] = {}
    progress = Progress("read prompts", unit="records")
    benchmark_batch: list[int] = []  # ordinals waiting for the benchmark index (looked up in batches)
    filter_rejects: list[tuple[int, Reject]] = []
    texts: list[str] | None = [] if filters.near_duplicates is not None else None
    use_benchmarks = filters.benchmarks is not None and bool(filters.benchmarks.items)

    try:
        for plan_index, plan in enumerate(plans):
            for spec_index, spec in enumerate(plan.sources):
                specs.append(spec)
                fmt = spec.source_format()
                tally = per_source[spec.path]
                files = resolved[plan_index, spec_index] if resolved is not None else _resolve(spec, base_dir)
                for source_file in files:
                    file_spec[source_file.uri] = spec.path
                    for row in read_rows(source_file, fmt):
                        progress.advance()
                        tally.read += 1
                        outcome = row if isinstance(row, Reject) else fmt.convert(row.value, row.origin)
                        if not isinstance(outcome, Reject):
                            outcome = validate_record(outcome, row.origin, plan.category, limits)
                        if isinstance(outcome, Reject):
                            # A reject's own category may be anything (a path, a NUL, 1000 characters): counted
                            # and printed under "(none)" unless it is a valid name.
                            named = outcome.category if CATEGORY_PATTERN.fullmatch(outcome.category or "") else None
                            category = plan.category or named or UNKNOWN_CATEGORY
                            counts[category].read += 1
                            counts[category].rejected += 1
                            tally.rejects[outcome.reason] += 1
                            rejects.append(replace(outcome, source_spec=spec.path))
                            continue
                        if categories and outcome.category not in categories:
                            tally.read -= 1
                            continue
                        counts[outcome.category].read += 1
                        if not keys.add(outcome.prompt_id, len(specs) - 1, outcome.category):
                            counts[outcome.category].duplicates += 1
                            continue
                        ordinal = spool.add(outcome)
                        if texts is not None:
                            texts.append(prompt_text(outcome))
                        if use_benchmarks:
                            benchmark_batch.append(ordinal)
                            if len(benchmark_batch) >= BENCHMARK_BATCH:
                                filter_rejects += _benchmark_rejects(spool, benchmark_batch, filters)
                                benchmark_batch = []
        if benchmark_batch:
            filter_rejects += _benchmark_rejects(spool, benchmark_batch, filters)
        progress.finish()

        filtered = bytearray(len(keys))
        for ordinal, _ in filter_rejects:
            filtered[ordinal] = 1
        if texts is not None and filters.near_duplicates is not None:
            filter_rejects += _near_duplicate_rejects(spool, texts, filtered, filters.near_duplicates)
            for ordinal, _ in filter_rejects:
                filtered[ordinal] = 1
        texts = None
        for ordinal, reject in filter_rejects:
            spec = specs[keys.spec[ordinal]]
            reject = replace(reject, source_spec=spec.path)
            counts[keys.category_of(ordinal)].filtered += 1
            per_source[spec.path].rejects[reject.reason] += 1
            if reject.benchmark:
                per_source[spec.path].benchmark_overlaps[reject.benchmark] += 1
            rejects.append(reject)

        selected, order = _select(keys, filtered, specs, plans, counts, seed, limit_per_category)
    except BaseException:
        spool.close()
        raise
    streamed = StreamedPrompts(spool, selected, order, rejects, dict(counts), dict(per_source), file_spec)
    log.info(
        "collected %d prompts from %d records (%d rejected, %d duplicates, %d filtered, %d over caps)",
        streamed.selected,
        streamed.records_read,
        sum(1 for r in rejects if r.stage != FILTER_STAGE),
        sum(c.duplicates for c in counts.values()),
        sum(c.filtered for c in counts.values()),
        sum(c.capped for c in counts.values()),
    )
    return streamed


BENCHMARK_BATCH = 512


def _select(
    keys: _CandidateKeys,
    filtered: bytearray,
    specs: list[SourceSpec],
    plans: list[SourcePlan],
    counts: dict[str, CategoryCounts],
    seed: int,
    limit_per_category: int | None,
) -> tuple[bytearray, list[str]]:
    """Which candidates are kept (1 by ordinal): not filtered, within their source's cap, then their category's.
    Works on ordinals and keys only."""
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)  # (spec, category) -> ordinals, in order
    for ordinal in range(len(keys)):
        if not filtered[ordinal]:
            groups[keys.spec[ordinal], keys.category[ordinal]].append(ordinal)
    by_category: dict[int, list[int]] = defaultdict(list)
    for (spec_index, category_index), ordinals in groups.items():
        spec, category = specs[spec_index], keys.categories[category_index]
        kept = _cap_ordinals(ordinals, keys, spec.max_prompts, seed, f"{category}:{spec.path}")
        counts[category].capped += len(ordinals) - len(kept)
        by_category[category_index].extend(kept)
    groups.clear()
    caps = {plan.category: plan.max_prompts for plan in plans if plan.category is not None}
    selected = bytearray(len(keys))
    for category_index, ordinals in by_category.items():
        category = keys.categories[category_index]
        cap = min((c for c in (caps.get(category), limit_per_category) if c is not None), default=None)
        kept = _cap_ordinals(sorted(ordinals), keys, cap, seed, category)
        counts[category].capped += len(ordinals) - len(kept)
        counts[category].selected = len(kept)
        for ordinal in kept:
            selected[ordinal] = 1
    return selected, [keys.categories[c] for c in by_category]


def _cap_ordinals(ordinals: list[int], keys: _CandidateKeys, cap: int | None, seed: int, salt: str) -> list[int]:
    """`cap_prompts` on ordinals: the `cap` with the smallest sha256(seed, salt, prompt id), in their order."""
    if cap is None or len(ordinals) <= cap:
        return ordinals

    def rank(ordinal: int) -> bytes:
        return hashlib.sha256(f"{seed}:{salt}:{keys.prompt_ids[ordinal]}".encode()).digest()

    keep = set(sorted(ordinals, key=rank)[:cap])
    return [o for o in ordinals if o in keep]


def _benchmark_rejects(spool: PromptSpool, ordinals: list[int], filters: PromptFilters) -> list[tuple[int, Reject]]:
    index = filters.benchmarks
    assert index is not None
    records = [spool.read(o) for o in ordinals]
    found = []
    overlaps = index.find([user_texts(r) for r in records], [(r.source, r.record_id) for r in records])
    for ordinal, record, overlap in zip(ordinals, records, overlaps, strict=True):
        if overlap is not None:
            found.append(
                (
                    ordinal,
                    _filter_reject(record, "benchmark_overlap", overlap.describe(index.n), overlap.item.benchmark),
                )
            )
    return found


def _near_duplicate_rejects(
    spool: PromptSpool, texts: list[str], filtered: bytearray, settings: NearDuplicates
) -> list[tuple[int, Reject]]:
    alive = [i for i in range(len(texts)) if not filtered[i]]
    found_rejects = []
    for found in find_near_duplicates(
        [texts[i] for i in alive], settings.threshold, settings.shingle_words, settings.num_perm
    ):
        record, original = spool.read(alive[found.index]), spool.read(alive[found.of])
        named = f"record {original.record_id!r}" if original.record_id else "the record"
        detail = (
            f"near-duplicate of {named} at {original.origin} (prompt_id {original.prompt_id[:16]}): estimated "
            f"Jaccard similarity {found.similarity:.2f} over {settings.shingle_words}-word shingles, threshold "
            f"{settings.threshold}"
        )
        found_rejects.append((alive[found.index], _filter_reject(record, "near_duplicate", detail)))
    return found_rejects


def user_texts(record: PromptRecord) -> list[str]:
    return [m["content"] for m in record.messages if m["role"] == "user" and m.get("content")]


def prompt_text(record: PromptRecord) -> str:
    return "\n".join(m["content"] for m in record.messages if m.get("content"))


def _filter_reject(record: PromptRecord, reason: str, detail: str, benchmark: str | None = None) -> Reject:
    return Reject(
        reason,
        detail,
        record.origin,
        stage=FILTER_STAGE,
        record_id=record.record_id,
        category=record.category,
        excerpt=excerpt_of({"messages": record.messages}),
        benchmark=benchmark,
    )


def check_reject_rate(
    collected: CollectedPrompts | StreamedPrompts, max_rate: float, rejects_at: str, front_end: str = "cli"
) -> None:
    if collected.reject_rate > max_rate:
        raise RejectRateExceeded(
            f"{collected.invalid} of {collected.records_read} prompt records were rejected "
            f"({collected.reject_rate:.1%}, limit {max_rate:.1%}); see the reasons in {rejects_at}, "
            f"then fix the sources or raise {settings.named('max_reject_rate', front_end)}"
        )
