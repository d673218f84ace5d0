"""Collect prompts: read every source, validate each record, deduplicate by prompt id, apply caps.

Order is deterministic (recipe categories, then sources, then records as read), so the first occurrence
of a prompt wins and a rerun selects the same prompts. A cap keeps the prompts with the smallest
sha256(seed, category, prompt_id): a pure function of the prompt, so adding records to a source
changes the selection only where the new records rank in.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from eagle_datagen.errors import ConfigError, RejectRateExceeded
from eagle_datagen.progress import Progress
from eagle_datagen.records import CATEGORY_PATTERN, DEFAULT_LIMITS, PromptRecord, RecordLimits, Reject, validate_record
from eagle_datagen.sources.locations import resolve_source
from eagle_datagen.sources.readers import read_rows
from eagle_datagen.sources.recipe import Recipe, SourceSpec

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
    capped: int = 0
    selected: int = 0


@dataclass
class CollectedPrompts:
    prompts: list[PromptRecord]
    rejects: list[Reject]
    counts: dict[str, CategoryCounts] = field(default_factory=dict)

    @property
    def records_read(self) -> int:
        return sum(c.read for c in self.counts.values())

    @property
    def reject_rate(self) -> float:
        return len(self.rejects) / self.records_read if self.records_read else 0.0

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


def plans_from_sources(specs: list[str]) -> list[SourcePlan]:
    return [SourcePlan(None, tuple(SourceSpec(path=s) for s in specs))]


def check_sources(plans: list[SourcePlan], base_dir: Path | None = None) -> int:
    """Resolve every source spec now (a missing file or bucket is a `SourceError` before any GPU time is
    spent); returns the number of files. Reading and validating them comes later, in `collect_prompts`."""
    return sum(len(resolve_source(spec.path, base_dir)) for plan in plans for spec in plan.sources)


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
) -> CollectedPrompts:
    counts: dict[str, CategoryCounts] = defaultdict(CategoryCounts)
    rejects: list[Reject] = []
    selected: dict[str, list[PromptRecord]] = defaultdict(list)
    caps: dict[str, int | None] = {}
    seen: set[str] = set()
    progress = Progress("read prompts", unit="records")

    for plan in plans:
        for spec in plan.sources:
            from_source: dict[str, list[PromptRecord]] = defaultdict(list)
            for source_file in resolve_source(spec.path, base_dir):
                for row in read_rows(source_file):
                    progress.advance()
                    if isinstance(row, Reject):
                        outcome: PromptRecord | Reject = row
                    else:
                        outcome = validate_record(row.value, row.origin, plan.category, limits)
                    if isinstance(outcome, Reject):
                        # A reject's own category may be anything (a path, a NUL, 1000 characters): counted
                        # and printed under "(none)" unless it is a valid name.
                        named = outcome.category if CATEGORY_PATTERN.fullmatch(outcome.category or "") else None
                        category = plan.category or named or UNKNOWN_CATEGORY
                        counts[category].read += 1
                        counts[category].rejected += 1
                        rejects.append(outcome)
                        continue
                    if categories and outcome.category not in categories:
                        continue
                    counts[outcome.category].read += 1
                    if outcome.prompt_id in seen:
                        counts[outcome.category].duplicates += 1
                        continue
                    seen.add(outcome.prompt_id)
                    from_source[outcome.category].append(outcome)
            for category, prompts in from_source.items():
                kept = cap_prompts(prompts, spec.max_prompts, seed, f"{category}:{spec.path}")
                counts[category].capped += len(prompts) - len(kept)
                selected[category].extend(kept)
        if plan.category is not None:
            caps[plan.category] = plan.max_prompts

    result: list[PromptRecord] = []
    for category, prompts in selected.items():
        cap = min((c for c in (caps.get(category), limit_per_category) if c is not None), default=None)
        kept = cap_prompts(prompts, cap, seed, category)
        counts[category].capped += len(prompts) - len(kept)
        counts[category].selected = len(kept)
        result.extend(kept)
    progress.finish()
    collected = CollectedPrompts(result, rejects, dict(counts))
    log.info(
        "collected %d prompts from %d records (%d rejected, %d duplicates, %d over caps)",
        len(result),
        collected.records_read,
        len(rejects),
        sum(c.duplicates for c in counts.values()),
        sum(c.capped for c in counts.values()),
    )
    return collected


def check_reject_rate(collected: CollectedPrompts, max_rate: float, rejects_at: str) -> None:
    if collected.reject_rate > max_rate:
        raise RejectRateExceeded(
            f"{len(collected.rejects)} of {collected.records_read} prompt records were rejected "
            f"({collected.reject_rate:.1%}, limit {max_rate:.1%}); see the reasons in {rejects_at}, "
            "then fix the sources or raise --max-reject-rate"
        )
