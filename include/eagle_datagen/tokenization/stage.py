"""The tokenize stage end to end: collect prompts, tokenize them, write parts, rejects and a summary.

Used by `eagle-datagen tokenize` and, later, by the run and the Airflow tasks.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from eagle_datagen import settings
from eagle_datagen.errors import ConfigError
from eagle_datagen.modes import THINKING, prompt_mode, sample_modes
from eagle_datagen.profile import ModelProfile, load_profile
from eagle_datagen.records import FILTER_STAGE, PromptRecord, RecordLimits, Reject
from eagle_datagen.sources.benchmarks import BenchmarkSource, load_benchmark
from eagle_datagen.sources.collect import (
    CategoryCounts,
    CollectedPrompts,
    PromptFilters,
    ResolvedSources,
    SourceCounts,
    SourcePlan,
    check_reject_rate,
    collect_prompts,
    plans_from_recipe,
    plans_from_sources,
    stream_prompts,
)
from eagle_datagen.sources.decontamination import BenchmarkIndex
from eagle_datagen.sources.recipe import Decontamination, NearDuplicates, Recipe, load_recipe
from eagle_datagen.storage.output_root import OutputRoot, open_output_root
from eagle_datagen.tokenization.loader import LoadedTokenizer, load_tokenizer
from eagle_datagen.tokenization.tokenize import TokenizeResult, tokenize_prompts, tokenize_stream
from eagle_datagen.tokenization.tokenized_spool import TokenizedSpool
from eagle_datagen.tokenization.writer import write_rejects, write_tokenized_parts

log = logging.getLogger(__name__)
DEFAULT_MAX_PROMPT_TOKENS = 32768
DEFAULT_MAX_REJECT_RATE = 0.05


@dataclass(frozen=True)
class TokenizeOptions:
    output: str
    tokenizer: str
    prompts: list[str] = field(default_factory=list)
    recipe: str | None = None
    profile: str = settings.PROFILE
    categories: list[str] | None = None
    limit: int | None = None
    max_prompt_tokens: int | None = None  # None: the recipe's, else DEFAULT_MAX_PROMPT_TOKENS
    max_reject_rate: float | None = None  # None: the recipe's, else DEFAULT_MAX_REJECT_RATE
    max_record_bytes: int = RecordLimits.max_record_bytes
    seed: int | None = None
    processes: int | None = None
    trust_remote_code: bool = False
    tiktoken_fast_path: bool = False  # opt-in: encode through the tokenizer's tiktoken.Encoding (tiktoken_path.py)
    # Keep records whose text would put special tokens into the prompt (None: the recipe's, else False).
    allow_special_token_text: bool | None = None
    # How --prompts sources are read (a recipe names these per source): format, column mapping, history.
    prompts_format: str | None = None
    prompts_columns: dict[str, str] = field(default_factory=dict)
    prompts_history: str | None = None
    # Benchmark sets to decontaminate against, beside the recipe's: "NAME=PATH" or a shipped "NAME".
    benchmarks: list[str] = field(default_factory=list)
    benchmark_ngram: int | None = None  # None: the recipe's, else 13
    benchmark_dir: str | None = None  # relative benchmark paths are read under it (None: beside the recipe)
    near_duplicate_threshold: float | None = None  # None: the recipe's setting (off unless it has one)
    front_end: str = "cli"  # messages name settings as this front end calls them (settings.named)


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
    resolved_sources: ResolvedSources | None = None  # set once the sources are checked, so they are listed once

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
    loaded = load_tokenizer(
        options.tokenizer,
        profile,
        options.trust_remote_code,
        tiktoken_fast_path=options.tiktoken_fast_path,
        front_end=options.front_end,
    )
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
    listed = list(decontamination.benchmarks)
    sources = listed + [BenchmarkSource.parse(b) for b in options.benchmarks]
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise ConfigError(f"benchmark names must be distinct, got {names}")
    index = None
    if sources:
        base_dir = Path(options.benchmark_dir) if options.benchmark_dir else recipe.base_dir if recipe else None
        items = [
            item
            for source in sources
            for item in load_benchmark(source, base_dir, options.front_end, from_recipe=source in listed)
        ]
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


def _category_summary(
    counts: dict[str, CategoryCounts], spool: TokenizedSpool, tokenizer_rejects: list[Reject]
) -> dict[str, dict[str, Any]]:
    too_long: dict[str, int] = {}
    for reject in tokenizer_rejects:
        too_long[reject.category or "?"] = too_long.get(reject.category or "?", 0) + 1
    summary = {}
    for category, count in sorted(counts.items()):
        lens = spool.lengths(category) if spool.rows(category) else np.zeros(0, dtype=np.int32)
        summary[category] = {
            "records_read": count.read,
            "rejected": count.rejected + too_long.get(category, 0),
            "duplicates": count.duplicates,
            "filtered": count.filtered,
            "capped": count.capped,
            "prompts": len(lens),
            "prompt_tokens_total": int(lens.sum(dtype=np.int64)),
            "prompt_tokens_median": _median(lens),
            "prompt_tokens_max": int(lens.max(initial=0)),
        }
    return summary


def _median(values: np.ndarray) -> int | float:
    if not len(values):
        return 0
    median = float(np.median(values))
    return int(median) if median.is_integer() else median


@dataclass
class TokenizedPrompts:
    """What `stream_and_tokenize` leaves: the tokenized prompts on local disk (`spool`), the counts and every
    reject. A context manager: leaving it removes the spool."""

    spool: TokenizedSpool
    counts: dict[str, CategoryCounts]
    sources: dict[str, SourceCounts]
    rejects: list[Reject]
    tokenizer_rejects: list[Reject]
    records_read: int

    def __enter__(self) -> TokenizedPrompts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.spool.close()


def stream_and_tokenize(
    setup: TokenizeSetup,
    root: OutputRoot,
    rejects_key: str,
    conversations: Callable[[list[str]], Collection[str]] | None = None,
    skip: Callable[[PromptRecord], bool] | None = None,
    modes: Callable[[PromptRecord], str] | None = None,
) -> TokenizedPrompts:
    """Collect and tokenize in memory flat in the number of prompts: records are read one at a time (their keys
    kept), the selected ones tokenized batch by batch into a `TokenizedSpool`. `conversations` names, from the
    collected categories, those whose source conversations the spool keeps (turns: each); `modes` gives each
    record the mode it is rendered in (default: thinking), before `skip` leaves out records before they are
    tokenized (an incremental run's known ones, known by mode). Rejects are written (before failing on too many
    of them) to `rejects_key`."""
    options = setup.options
    streamed = stream_prompts(
        setup.plans,
        seed=setup.seed,
        base_dir=setup.recipe.base_dir if setup.recipe else None,
        limits=RecordLimits(max_record_bytes=options.max_record_bytes),
        categories=options.categories,
        limit_per_category=options.limit,
        filters=setup.filters,
        resolved=setup.resolved_sources,
    )
    with streamed:
        if streamed.reject_rate > setup.max_reject_rate:  # stop before tokenizing, but keep the reasons
            write_rejects(root, rejects_key, streamed.rejects)
            check_reject_rate(streamed, setup.max_reject_rate, root.location(rejects_key), setup.options.front_end)
        spool = TokenizedSpool(conversations(streamed.category_order) if conversations else ())
        try:
            records = streamed.records()
            if modes is not None:
                records = (replace(r, mode=modes(r)) for r in records)
            if skip is not None:
                records = (r for r in records if not skip(r))
            tokenizer_rejects = []
            for tokenized, rejects in tokenize_stream(
                setup.loaded,
                records,
                _prompt_token_limits(options, setup.recipe),
                processes=options.processes,
                trust_remote_code=options.trust_remote_code,
                allow_special_token_text=setup.allow_special_token_text,
                total=streamed.selected,
            ):
                spool.add(tokenized)
                for reject in rejects:  # tokenizer rejects count against their source too
                    spec = streamed.source_of(reject.origin)
                    if spec is not None:
                        streamed.sources[spec].rejects[reject.reason] += 1
                        reject = replace(reject, source_spec=spec)
                    tokenizer_rejects.append(reject)
            spool.finish()
        except BaseException:
            spool.close()
            raise
    result = TokenizedPrompts(
        spool,
        streamed.counts,
        streamed.sources,
        streamed.rejects + tokenizer_rejects,
        tokenizer_rejects,
        streamed.records_read,
    )
    try:
        write_rejects(root, rejects_key, result.rejects)
        check_reject_rate(
            CollectedPrompts([], result.rejects, result.counts),
            setup.max_reject_rate,
            root.location(rejects_key),
            setup.options.front_end,
        )
    except BaseException:
        spool.close()
        raise
    return result


def recipe_modes(setup: TokenizeSetup) -> Callable[[PromptRecord], str] | None:
    """Each record's mode as its recipe category's mode makes it (`eagle-datagen tokenize` renders what a run of
    the recipe would; a run's flags and form choose through generation/stage.category_settings); None: no recipe."""
    recipe = setup.recipe
    if recipe is None:
        return None
    for category in recipe.categories:
        for mode in sample_modes(recipe.mode_for(category)):
            setup.profile.mode(mode)  # a mode the profile lacks: one line, before any prompt is read

    def mode_of(record: PromptRecord) -> str:
        category = record.category
        if category not in recipe.categories:
            return THINKING
        return prompt_mode(
            recipe.mode_for(category), recipe.instant_fraction_for(category), setup.seed, record.prompt_id
        )

    return mode_of


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
        resolved=setup.resolved_sources,
    )
    if collected.reject_rate > setup.max_reject_rate:  # stop before tokenizing, but keep the reasons
        write_rejects(root, rejects_key, collected.rejects)
        check_reject_rate(collected, setup.max_reject_rate, root.location(rejects_key), setup.options.front_end)
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
    check_reject_rate(everything, setup.max_reject_rate, root.location(rejects_key), setup.options.front_end)
    return collected, result, rejects


def run_tokenize(options: TokenizeOptions) -> TokenizeSummary:
    setup = setup_tokenize(options)
    root = open_output_root(options.output)
    rejects_key = "rejects/rejects.jsonl"
    with stream_and_tokenize(setup, root, rejects_key, modes=recipe_modes(setup)) as tokenized:
        files = write_tokenized_parts(root, tokenized.spool)
        rejects = tokenized.rejects
        summary = TokenizeSummary(
            output=root.uri,
            profile=setup.profile.name,
            tokenizer=setup.loaded.provenance(),
            records_read=tokenized.records_read,
            prompts=tokenized.spool.total,
            rejected=sum(1 for r in rejects if r.stage != FILTER_STAGE),
            duplicates=sum(c.duplicates for c in tokenized.counts.values()),
            capped=sum(c.capped for c in tokenized.counts.values()),
            categories=_category_summary(tokenized.counts, tokenized.spool, tokenized.tokenizer_rejects),
            files=files,
            rejects_file=rejects_key if rejects else None,
            filtered=sum(c.filtered for c in tokenized.counts.values()),
            sources={spec: counts.to_json() for spec, counts in tokenized.sources.items()},
        )
    root.write_bytes("tokenized/_summary.json", json.dumps(summary.to_json(), indent=2).encode())
    return summary
