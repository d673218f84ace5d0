"""Collect prompts: read every source, validate each record, deduplicate by prompt id, apply caps.

Order is deterministic (recipe categories, then sources, then records as read), so the first occurrence
of a prompt wins and a rerun selects the same prompts. A cap keeps the prompts with the smallest
sha256(seed, category, prompt_id): a pure function of the prompt, so adding records to a source
changes the selection only where the new records rank in.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

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
    """Read, validate, dedup, filter and cap the prompts of `plans`; `resolved` (from `resolve_sources`)
    saves listing the sources again."""
    counts: dict[str, CategoryCounts] = defaultdict(CategoryCounts)
    per_source: dict[str, SourceCounts] = defaultdict(SourceCounts)
    rejects: list[Reject] = []
    candidates: list[tuple[int, PromptRecord]] = []  # (index into specs, record), in collection order
    specs: list[SourceSpec] = []
    seen: set[str] = set()
    progress = Progress("read prompts", unit="records")

    for plan_index, plan in enumerate(plans):
        for spec_index, spec in enumerate(plan.sources):
            specs.append(spec)
            fmt = spec.source_format()
            tally = per_source[spec.path]
            files = resolved[plan_index, spec_index] if resolved is not None else _resolve(spec, base_dir)
            for source_file in files:
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
                    if outcome.prompt_id in seen:
                        counts[outcome.category].duplicates += 1
                        continue
                    seen.add(outcome.prompt_id)
                    candidates.append((len(specs) - 1, outcome))
    progress.finish()

    filtered: set[int] = set()
    for index, reject in _filter(candidates, filters or PromptFilters()):
        spec_index, record = candidates[index]
        reject = replace(reject, source_spec=specs[spec_index].path)
        counts[record.category].filtered += 1
        per_source[reject.source_spec].rejects[reject.reason] += 1
        if reject.benchmark:
            per_source[reject.source_spec].benchmark_overlaps[reject.benchmark] += 1
        rejects.append(reject)
        filtered.add(index)

    from_source: dict[tuple[int, str], list[PromptRecord]] = defaultdict(list)
    for index, (spec_index, record) in enumerate(candidates):
        if index not in filtered:
            from_source[spec_index, record.category].append(record)
    selected: dict[str, list[PromptRecord]] = defaultdict(list)
    source_of: dict[str, str] = {}
    for (spec_index, category), prompts in from_source.items():
        spec = specs[spec_index]
        kept = cap_prompts(prompts, spec.max_prompts, seed, f"{category}:{spec.path}")
        counts[category].capped += len(prompts) - len(kept)
        selected[category].extend(kept)
        source_of.update((p.origin, spec.path) for p in kept)
    caps = {plan.category: plan.max_prompts for plan in plans if plan.category is not None}

    result: list[PromptRecord] = []
    for category, prompts in selected.items():
        cap = min((c for c in (caps.get(category), limit_per_category) if c is not None), default=None)
        kept = cap_prompts(prompts, cap, seed, category)
        counts[category].capped += len(prompts) - len(kept)
        counts[category].selected = len(kept)
        result.extend(kept)
    collected = CollectedPrompts(result, rejects, dict(counts), dict(per_source), source_of)
    log.info(
        "collected %d prompts from %d records (%d rejected, %d duplicates, %d filtered, %d over caps)",
        len(result),
        collected.records_read,
        collected.invalid,
        sum(c.duplicates for c in counts.values()),
        sum(c.filtered for c in counts.values()),
        sum(c.capped for c in counts.values()),
    )
    return collected


def user_texts(record: PromptRecord) -> list[str]:
    return [m["content"] for m in record.messages if m["role"] == "user" and m.get("content")]


def prompt_text(record: PromptRecord) -> str:
    return "\n".join(m["content"] for m in record.messages if m.get("content"))


def _filter(candidates: list[tuple[int, PromptRecord]], filters: PromptFilters) -> list[tuple[int, Reject]]:
    """(index into candidates, reject) for every record a filter leaves out, first by benchmark overlap, then
    as a near-duplicate of a record kept before it."""
    dropped: list[tuple[int, Reject]] = []
    alive = list(range(len(candidates)))
    if filters.benchmarks is not None and filters.benchmarks.items:
        index = filters.benchmarks
        overlaps = index.find([user_texts(record) for _, record in candidates])
        for i, overlap in enumerate(overlaps):
            if overlap is not None:
                dropped.append(
                    (
                        i,
                        _filter_reject(
                            candidates[i][1], "benchmark_overlap", overlap.describe(index.n), overlap.item.benchmark
                        ),
                    )
                )
        gone = {i for i, _ in dropped}
        alive = [i for i in alive if i not in gone]
    if filters.near_duplicates is not None:
        settings = filters.near_duplicates
        texts = [prompt_text(candidates[i][1]) for i in alive]
        for found in find_near_duplicates(texts, settings.threshold, settings.shingle_words, settings.num_perm):
            record, original = candidates[alive[found.index]][1], candidates[alive[found.of]][1]
            named = f"record {original.record_id!r}" if original.record_id else "the record"
            detail = (
                f"near-duplicate of {named} at {original.origin} (prompt_id {original.prompt_id[:16]}): estimated "
                f"Jaccard similarity {found.similarity:.2f} over {settings.shingle_words}-word shingles, threshold "
                f"{settings.threshold}"
            )
            dropped.append((alive[found.index], _filter_reject(record, "near_duplicate", detail)))
    return dropped


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


def check_reject_rate(collected: CollectedPrompts, max_rate: float, rejects_at: str) -> None:
    if collected.reject_rate > max_rate:
        raise RejectRateExceeded(
            f"{collected.invalid} of {collected.records_read} prompt records were rejected "
            f"({collected.reject_rate:.1%}, limit {max_rate:.1%}); see the reasons in {rejects_at}, "
            "then fix the sources or raise --max-reject-rate"
        )
