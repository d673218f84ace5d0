"""The tokenize stage end to end: collect prompts, tokenize them, write parts, rejects and a summary.

Used by `eagle-datagen tokenize` and, later, by the run and the Airflow tasks.
"""

from __future__ import annotations

import json
import logging
import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from eagle_datagen.errors import ConfigError
from eagle_datagen.profile import ModelProfile, load_profile
from eagle_datagen.records import FILTER_STAGE, RecordLimits, Reject
from eagle_datagen.sources.benchmarks import BenchmarkSource, load_benchmark
from eagle_datagen.sources.collect import (
    CollectedPrompts,
    PromptFilters,
    SourcePlan,
    check_reject_rate,
    collect_prompts,
    plans_from_recipe,
    plans_from_sources,
)
from eagle_datagen.sources.decontamination import BenchmarkIndex
from eagle_datagen.sources.recipe import Decontamination, NearDuplicates, Recipe, load_recipe
from eagle_datagen.storage.output_root import OutputRoot, open_output_root
from eagle_datagen.tokenization.loader import LoadedTokenizer, load_tokenizer
from eagle_datagen.tokenization.tokenize import TokenizeResult, tokenize_prompts
from eagle_datagen.tokenization.writer import write_rejects, write_tokenized

log = logging.getLogger(__name__)
DEFAULT_MAX_PROMPT_TOKENS = 32768
DEFAULT_MAX_REJECT_RATE = 0.05


@dataclass(frozen=True)
class TokenizeOptions:
    output: str
    tokenizer: str
    prompts: list[str] = field(default_factory=list)
    recipe: str | None = None
    profile: str = "kimi-k2.5"
    categories: list[str] | None = None
    limit: int | None = None
    max_prompt_tokens: int | None = None  # None: the recipe's, else DEFAULT_MAX_PROMPT_TOKENS
    max_reject_rate: float | None = None  # None: the recipe's, else DEFAULT_MAX_REJECT_RATE
    max_record_bytes: int = RecordLimits.max_record_bytes
    seed: int | None = None
    processes: int | None = None
    trust_remote_code: bool = False
    # Keep records whose text would put special tokens into the prompt (None: the recipe's, else False).
    allow_special_token_text: bool | None = None
    # How --prompts sources are read (a recipe names these per source): format, column mapping, history.
    prompts_format: str | None = None
    prompts_columns: dict[str, str] = field(default_factory=dict)
    prompts_history: str | None = None
    # Benchmark sets to decontaminate against, beside the recipe's: "NAME=PATH" or a shipped "NAME".
    benchmarks: list[str] = field(default_factory=list)
    benchmark_ngram: int | None = None  # None: the recipe's, else 13
    near_duplicate_threshold: float | None = None  # None: the recipe's setting (off unless it has one)


@dataclass
class TokenizeSummary:
    output: str
    profile: str
    tokenizer: dict[str, Any]
    records_read: int
    prompts: int
    rejected: int
    duplicates: int
    capped: int
    categories: dict[str, dict[str, Any]]
    files: list[str]
    rejects_file: str | None
    filtered: int = 0  # benchmark overlaps and near-duplicates
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)  # per source: rejects by reason

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass
class TokenizeSetup:
    """Everything that can be wrong with the configuration, checked before a single prompt is read."""

    options: TokenizeOptions
    loaded: LoadedTokenizer
    plans: list[SourcePlan]
    recipe: Recipe | None
    max_reject_rate: float
    seed: int
    allow_special_token_text: bool = False
    filters: PromptFilters = PromptFilters()

    @property
    def profile(self) -> ModelProfile:
        return self.loaded.profile


def setup_tokenize(options: TokenizeOptions) -> TokenizeSetup:
    profile = load_profile(options.profile)
    if bool(options.recipe) == bool(options.prompts):
        raise ConfigError("give either --recipe FILE or one or more --prompts SRC")
    recipe = load_recipe(options.recipe) if options.recipe else None
    source_settings = {
        "format": options.prompts_format,
        "columns": options.prompts_columns,
        "history": options.prompts_history,
    }
    if recipe and any(source_settings.values()):
        raise ConfigError(
            "--prompts-format, --prompts-column and --prompts-history apply to --prompts; a recipe names "
            "format:, columns: and history: per source"
        )
    plans = (
        plans_from_recipe(recipe, options.categories)
        if recipe
        else plans_from_sources(options.prompts, **source_settings)
    )
    filters = prompt_filters(options, recipe)
    loaded = load_tokenizer(options.tokenizer, profile, options.trust_remote_code)
    max_reject_rate = options.max_reject_rate
    if max_reject_rate is None:
        max_reject_rate = recipe.max_reject_rate if recipe else DEFAULT_MAX_REJECT_RATE
    seed = options.seed if options.seed is not None else (recipe.seed if recipe else 0)
    allow = options.allow_special_token_text
    if allow is None:
        allow = recipe.allow_special_token_text if recipe else False
    return TokenizeSetup(options, loaded, plans, recipe, max_reject_rate, seed, allow, filters)


def prompt_filters(options: TokenizeOptions, recipe: Recipe | None) -> PromptFilters:
    """The benchmark index (recipe's sets and --benchmark's, loaded now: a missing file fails before any
    prompt is read) and the near-duplicate settings."""
    decontamination = (recipe.decontamination if recipe else None) or Decontamination()
    sources = list(decontamination.benchmarks) + [BenchmarkSource.parse(b) for b in options.benchmarks]
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise ConfigError(f"benchmark names must be distinct, got {names}")
    index = None
    if sources:
        base_dir = recipe.base_dir if recipe else None
        items = [item for source in sources for item in load_benchmark(source, base_dir)]
        index = BenchmarkIndex(items, options.benchmark_ngram or decontamination.ngram)
        log.info("benchmark index: %d items of %s, %d distinct %d-grams", len(items), names, index.ngrams, index.n)
    near = recipe.near_duplicates if recipe else None
    if options.near_duplicate_threshold is not None:
        near = (near or NearDuplicates()).model_copy(update={"threshold": options.near_duplicate_threshold})
    return PromptFilters(index, near)


def _prompt_token_limits(options: TokenizeOptions, recipe: Recipe | None) -> dict[str, int]:
    if options.max_prompt_tokens is not None:
        return {"*": options.max_prompt_tokens}
    if recipe is None:
        return {"*": DEFAULT_MAX_PROMPT_TOKENS}
    return {"*": recipe.defaults.max_prompt_tokens} | {c: recipe.max_prompt_tokens_for(c) for c in recipe.categories}


def _category_summary(collected: CollectedPrompts, result: TokenizeResult) -> dict[str, dict[str, Any]]:
    lengths: dict[str, list[int]] = {}
    for prompt in result.prompts:
        lengths.setdefault(prompt.record.category, []).append(len(prompt.prompt_ids))
    too_long: dict[str, int] = {}
    for reject in result.rejects:
        too_long[reject.category or "?"] = too_long.get(reject.category or "?", 0) + 1
    summary = {}
    for category, counts in sorted(collected.counts.items()):
        lens = lengths.get(category, [])
        summary[category] = {
            "records_read": counts.read,
            "rejected": counts.rejected + too_long.get(category, 0),
            "duplicates": counts.duplicates,
            "filtered": counts.filtered,
            "capped": counts.capped,
            "prompts": len(lens),
            "prompt_tokens_total": sum(lens),
            "prompt_tokens_median": statistics.median(lens) if lens else 0,
            "prompt_tokens_max": max(lens, default=0),
        }
    return summary


def collect_and_tokenize(
    setup: TokenizeSetup, root: OutputRoot, rejects_key: str
) -> tuple[CollectedPrompts, TokenizeResult, list[Reject]]:
    """Collect and tokenize; rejects are written (before failing on too many of them) to `rejects_key`."""
    options = setup.options
    collected = collect_prompts(
        setup.plans,
        seed=setup.seed,
        base_dir=setup.recipe.base_dir if setup.recipe else None,
        limits=RecordLimits(max_record_bytes=options.max_record_bytes),
        categories=options.categories,
        limit_per_category=options.limit,
        filters=setup.filters,
    )
    if collected.reject_rate > setup.max_reject_rate:  # stop before tokenizing, but keep the reasons
        write_rejects(root, rejects_key, collected.rejects)
        check_reject_rate(collected, setup.max_reject_rate, root.location(rejects_key))
    result = tokenize_prompts(
        setup.loaded,
        collected.prompts,
        _prompt_token_limits(options, setup.recipe),
        processes=options.processes,
        trust_remote_code=options.trust_remote_code,
        allow_special_token_text=setup.allow_special_token_text,
    )
    tokenizer_rejects = []
    for reject in result.rejects:  # tokenizer rejects count against their source too
        spec = collected.source_of.get(reject.origin)
        if spec is not None:
            collected.sources[spec].rejects[reject.reason] += 1
            reject = replace(reject, source_spec=spec)
        tokenizer_rejects.append(reject)
    result.rejects = tokenizer_rejects
    rejects = collected.rejects + result.rejects
    write_rejects(root, rejects_key, rejects)
    everything = CollectedPrompts(collected.prompts, rejects, collected.counts)
    check_reject_rate(everything, setup.max_reject_rate, root.location(rejects_key))
    return collected, result, rejects


def run_tokenize(options: TokenizeOptions) -> TokenizeSummary:
    setup = setup_tokenize(options)
    root = open_output_root(options.output)
    rejects_key = "rejects/rejects.jsonl"
    collected, result, rejects = collect_and_tokenize(setup, root, rejects_key)
    files = write_tokenized(root, result.prompts)
    summary = TokenizeSummary(
        output=root.uri,
        profile=setup.profile.name,
        tokenizer=setup.loaded.provenance(),
        records_read=collected.records_read,
        prompts=len(result.prompts),
        rejected=sum(1 for r in rejects if r.stage != FILTER_STAGE),
        duplicates=sum(c.duplicates for c in collected.counts.values()),
        capped=sum(c.capped for c in collected.counts.values()),
        categories=_category_summary(collected, result),
        files=files,
        rejects_file=rejects_key if rejects else None,
        filtered=sum(c.filtered for c in collected.counts.values()),
        sources={spec: counts.to_json() for spec, counts in collected.sources.items()},
    )
    root.write_bytes("tokenized/_summary.json", json.dumps(summary.to_json(), indent=2).encode())
    return summary
