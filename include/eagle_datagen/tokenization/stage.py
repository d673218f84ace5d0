"""The tokenize stage end to end: collect prompts, tokenize them, write parts, rejects and a summary.

Used by `eagle-datagen tokenize` and, later, by the run and the Airflow tasks.
"""

from __future__ import annotations

import json
import logging
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle_datagen.errors import ConfigError
from eagle_datagen.profile import load_profile
from eagle_datagen.records import RecordLimits
from eagle_datagen.sources.collect import (
    CollectedPrompts,
    SourcePlan,
    check_reject_rate,
    collect_prompts,
    plans_from_recipe,
    plans_from_sources,
)
from eagle_datagen.sources.recipe import Recipe, load_recipe
from eagle_datagen.storage.output_root import open_output_root
from eagle_datagen.tokenization.loader import load_tokenizer
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

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def _plans(options: TokenizeOptions) -> tuple[list[SourcePlan], Recipe | None, Path | None]:
    if bool(options.recipe) == bool(options.prompts):
        raise ConfigError("give either --recipe FILE or one or more --prompts SRC")
    if options.recipe:
        recipe = load_recipe(options.recipe)
        return plans_from_recipe(recipe, options.categories), recipe, recipe.base_dir
    return plans_from_sources(options.prompts), None, None


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
            "capped": counts.capped,
            "prompts": len(lens),
            "prompt_tokens_total": sum(lens),
            "prompt_tokens_median": statistics.median(lens) if lens else 0,
            "prompt_tokens_max": max(lens, default=0),
        }
    return summary


def run_tokenize(options: TokenizeOptions) -> TokenizeSummary:
    # Everything that can be wrong with the configuration is checked before reading a single prompt.
    profile = load_profile(options.profile)
    plans, recipe, base_dir = _plans(options)
    loaded = load_tokenizer(options.tokenizer, profile, options.trust_remote_code)
    max_reject_rate = options.max_reject_rate
    if max_reject_rate is None:
        max_reject_rate = recipe.max_reject_rate if recipe else DEFAULT_MAX_REJECT_RATE
    seed = options.seed if options.seed is not None else (recipe.seed if recipe else 0)
    root = open_output_root(options.output)
    rejects_key = "rejects/rejects.jsonl"

    collected = collect_prompts(
        plans,
        seed=seed,
        base_dir=base_dir,
        limits=RecordLimits(max_record_bytes=options.max_record_bytes),
        categories=options.categories,
        limit_per_category=options.limit,
    )
    if collected.reject_rate > max_reject_rate:  # stop before tokenizing, but keep the reasons
        write_rejects(root, rejects_key, collected.rejects)
        check_reject_rate(collected, max_reject_rate, root.location(rejects_key))

    result = tokenize_prompts(
        loaded,
        collected.prompts,
        _prompt_token_limits(options, recipe),
        processes=options.processes,
        trust_remote_code=options.trust_remote_code,
    )
    all_rejects = collected.rejects + result.rejects
    rejects_file = write_rejects(root, rejects_key, all_rejects)
    check_reject_rate(
        CollectedPrompts(collected.prompts, all_rejects, collected.counts), max_reject_rate, root.location(rejects_key)
    )
    files = write_tokenized(root, result.prompts)
    summary = TokenizeSummary(
        output=root.uri,
        profile=profile.name,
        tokenizer=loaded.provenance(),
        records_read=collected.records_read,
        prompts=len(result.prompts),
        rejected=len(all_rejects),
        duplicates=sum(c.duplicates for c in collected.counts.values()),
        capped=sum(c.capped for c in collected.counts.values()),
        categories=_category_summary(collected, result),
        files=files,
        rejects_file=rejects_file,
    )
    root.write_bytes("tokenized/_summary.json", json.dumps(summary.to_json(), indent=2).encode())
    return summary
