"""The run as separate steps, for orchestrators (Airflow tasks, one per step, shards mapped).

Each step takes and returns plain JSON-able values (a `RunConfig` dict, run ids, shard indices), keeps
no state in memory between steps, and works from what earlier steps stored under the output root, so
any step can run (or be retried) on any worker:

    servers = preflight_step(config)                # checks every endpoint before any GPU time is spent
    plan = plan_step(config, servers)               # source, tokenize, write the plan (or load it)
    for shard in plan["shards"]: generate_shard_step(config, plan["run_id"], shard)   # mapped
                                                    # (or withdraw_step(config) if the plan is refused)
    finalize_step(config, plan["run_id"])           # diagnosis, statistics, vocab, report, manifest
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from eagle_datagen import settings
from eagle_datagen.errors import ConfigError
from eagle_datagen.generation.checkpoint import CheckpointPolicy
from eagle_datagen.generation.claims import DEFAULT_CLAIM_TTL_S, withdraw_claim
from eagle_datagen.generation.endpoint_check import preflight_run
from eagle_datagen.generation.incremental import NothingToDo
from eagle_datagen.generation.plan import is_conversation_shard, load_plan
from eagle_datagen.generation.publish import PublishOptions, ShardIncomplete, finalize_run, publish_shard
from eagle_datagen.generation.screen import AnswerScreen
from eagle_datagen.generation.stage import (
    RunOptions,
    SamplingOverrides,
    canary_request,
    check_run_id,
    generate_pending,
    prepare_plan,
    resolve_thresholds,
)
from eagle_datagen.inference.endpoints import BreakerPolicy
from eagle_datagen.inference.liveness import LivenessPolicy
from eagle_datagen.inference.preflight import ServerInfo
from eagle_datagen.inference.retry import RetryPolicy
from eagle_datagen.profile import load_profile
from eagle_datagen.sources.collect import check_sources
from eagle_datagen.sources.recipe import load_recipe
from eagle_datagen.storage.output_root import open_output_root
from eagle_datagen.tokenization.loader import load_tokenizer
from eagle_datagen.tokenization.stage import TokenizeOptions, setup_tokenize
from eagle_datagen.validation.diagnosis import parse_rates
from eagle_datagen.validation.rules import ValidationLimits

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything a run needs, as plain values (what a trigger form or a connection provides). Every field is
    a setting of eagle_datagen/settings.py, where its default and its other front ends are declared."""

    output: str
    tokenizer: str
    sglang_urls: list[str]
    run_id: str
    recipe: str | None = None
    prompts: list[str] = dataclasses.field(default_factory=list)
    categories: list[str] | None = None
    profile: str = settings.PROFILE
    model: str | None = None
    limit: int | None = None
    near_duplicate_threshold: float | None = None  # None: the recipe's near_duplicates
    max_new_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    samples_per_prompt: int | None = None
    turns: str | None = None  # last | each; None: the recipe's
    shard_size: int = settings.SHARD_SIZE
    concurrency: int | None = None
    balance: str = "prefix-affinity"
    incremental: bool = False
    per_weight_version: bool = False
    claim_ttl_s: float = DEFAULT_CLAIM_TTL_S
    dry_run: bool = False  # plan only: the orchestrator generates nothing, so the plan claims no samples
    draft_vocab_size: int = settings.DRAFT_VOCAB_SIZE
    # {reason: highest acceptable share} over the recipe's max_rates and today's defaults (--max-rate)
    max_rates: dict[str, float] = dataclasses.field(default_factory=dict)
    max_attempts: int = settings.MAX_ATTEMPTS
    canary: bool = True
    trust_remote_code: bool = False
    # The settings only the command line sets today (settings.py says why); the Airflow path keeps these
    # defaults, and `options()` is the one place that turns settings into RunOptions for both.
    seed: int | None = None  # None: the recipe's, else 0
    max_reject_rate: float | None = None  # None: the recipe's, else 0.05
    max_record_bytes: int = settings.MAX_RECORD_BYTES
    max_prompt_tokens: int | None = None  # None: the recipe's
    processes: int | None = None  # None: one per 2000 prompts
    allow_special_token_text: bool | None = None  # None: the recipe's
    prompts_format: str | None = None
    prompts_columns: dict[str, str] = dataclasses.field(default_factory=dict)
    prompts_history: str | None = None
    benchmarks: list[str] = dataclasses.field(default_factory=list)
    benchmark_ngram: int | None = None  # None: the recipe's, else 13
    allow_model_mismatch: bool = False
    top_k: int | None = None  # None: the recipe's, else off
    request_timeout_s: float = settings.REQUEST_TIMEOUT_S
    give_up_after_s: float = settings.GIVE_UP_AFTER_S
    lost_after_s: float = settings.LOST_AFTER_S
    wait_ready_s: float = settings.WAIT_READY_S
    min_endpoints: int | None = None  # None: the recipe's, else settings.MIN_ENDPOINTS
    checkpoint_every: int = settings.CHECKPOINT_EVERY
    checkpoint_interval_s: float = settings.CHECKPOINT_INTERVAL_S
    max_reasoning_tokens: int | None = None
    # True when the user asked for draft_vocab_size: a run with fewer distinct tokens then fails instead of
    # being published without a vocabulary (publish.PublishOptions).
    draft_vocab_required: bool = False

    def __post_init__(self) -> None:
        check_run_id(self.run_id)  # every step builds storage keys from it, finalize included
        parse_rates(self.max_rates, "max_rates")

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"unknown run setting(s) {unknown}; known: {sorted(known)}")
        return cls(**raw)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def options(self) -> RunOptions:
        return RunOptions(
            prompts=TokenizeOptions(
                output=self.output,
                tokenizer=self.tokenizer,
                prompts=self.prompts,
                recipe=self.recipe,
                profile=self.profile,
                categories=self.categories,
                limit=self.limit,
                trust_remote_code=self.trust_remote_code,
                near_duplicate_threshold=self.near_duplicate_threshold,
                max_prompt_tokens=self.max_prompt_tokens,
                max_reject_rate=self.max_reject_rate,
                max_record_bytes=self.max_record_bytes,
                seed=self.seed,
                processes=self.processes,
                allow_special_token_text=self.allow_special_token_text,
                prompts_format=self.prompts_format,
                prompts_columns=dict(self.prompts_columns),
                prompts_history=self.prompts_history,
                benchmarks=list(self.benchmarks),
                benchmark_ngram=self.benchmark_ngram,
            ),
            sglang_urls=self.sglang_urls,
            run_id=self.run_id,
            model=self.model,
            allow_model_mismatch=self.allow_model_mismatch,
            sampling=SamplingOverrides(
                max_new_tokens=self.max_new_tokens,
                temperature=self.temperature,
                top_p=self.top_p,
                top_k=self.top_k,
                samples_per_prompt=self.samples_per_prompt,
                turns=self.turns,
            ),
            shard_size=self.shard_size,
            concurrency=self.concurrency,
            balance=self.balance,
            retry=RetryPolicy(max_attempts=self.max_attempts, request_timeout_s=self.request_timeout_s),
            breaker=BreakerPolicy(give_up_after_s=self.give_up_after_s),
            liveness=LivenessPolicy(lost_after_s=self.lost_after_s),
            checkpoint=CheckpointPolicy(max_samples=self.checkpoint_every, max_age_s=self.checkpoint_interval_s),
            canary=self.canary,
            incremental=self.incremental,
            per_weight_version=self.per_weight_version,
            claim_ttl_s=self.claim_ttl_s,
            claim=not self.dry_run,
            preflight_wait_s=self.wait_ready_s,
            min_endpoints=self.min_endpoints,
            publish=PublishOptions(
                limits=ValidationLimits(max_reasoning_tokens=self.max_reasoning_tokens),
                draft_vocab_size=self.draft_vocab_size,
                draft_vocab_required=self.draft_vocab_required,
            ),
            max_rates=dict(self.max_rates),
        )

    def resolved_options(self) -> RunOptions:
        """`options()` with the diagnosis thresholds resolved against the recipe (for the steps that do
        not load the tokenizer setup)."""
        return resolve_thresholds(self.options(), load_recipe(self.recipe) if self.recipe else None)


def _config(config: RunConfig | dict[str, Any]) -> RunConfig:
    return config if isinstance(config, RunConfig) else RunConfig.from_dict(config)


def _servers(raw: list[dict[str, Any]]) -> list[ServerInfo]:
    return [ServerInfo(**server) for server in raw]


def preflight_step(config: RunConfig | dict[str, Any]) -> list[dict[str, Any]]:
    """Check tokenizer, profile and every endpoint (with a canary); returns the servers' facts."""
    cfg = _config(config)
    options = cfg.options()
    setup = setup_tokenize(options.prompts)
    root = open_output_root(cfg.output)
    if load_plan(root, cfg.run_id) is None:  # missing sources fail before the canary
        check_sources(setup.plans, setup.recipe.base_dir if setup.recipe else None)
    canary = canary_request(setup, options)
    servers = asyncio.run(
        preflight_run(
            cfg.sglang_urls,
            setup,
            cfg.model or setup.profile.model,
            canary,
            root=root,
            run_id=cfg.run_id,
            wanted_min=options.min_endpoints,
            allow_model_mismatch=options.allow_model_mismatch,
            wait_s=options.preflight_wait_s,
            by="preflight",
        )
    )
    return [dataclasses.asdict(s) for s in servers]


def plan_step(config: RunConfig | dict[str, Any], servers: list[dict[str, Any]]) -> dict[str, Any]:
    """Source, tokenize and plan the run (or load its existing plan). `shards` is empty when an
    incremental run finds nothing new."""
    cfg = _config(config)
    options = cfg.options()
    setup = setup_tokenize(options.prompts)
    root = open_output_root(cfg.output)
    infos = _servers(servers)
    provenance = setup.loaded.provenance() | {"servers": [s.provenance() for s in infos]}
    try:
        plan = prepare_plan(setup, root, cfg.run_id, options, provenance, infos[0].weight_version)
    except NothingToDo as done:
        log.info("%s", done)
        # claimed_by: runs in flight that hold samples of this one (the orchestrator must not end green on them)
        return {"run_id": cfg.run_id, "shards": [], "samples": 0, "reason": str(done)} | done.to_json()
    return {
        "run_id": plan.run_id,
        "shards": [s.index for s in plan.shards],
        "samples": plan.total_samples,
        "categories": sorted(plan.categories),
    }


def withdraw_step(config: RunConfig | dict[str, Any]) -> None:
    """The orchestrator will not generate this plan (it refused it after the plan step): the samples the
    plan claimed are free for the next run at once."""
    cfg = _config(config)
    withdraw_claim(open_output_root(cfg.output), cfg.run_id)
    log.info("run %s: plan withdrawn; its samples are free for other runs", cfg.run_id)


def generate_shard_step(
    config: RunConfig | dict[str, Any], servers: list[dict[str, Any]], shard: int
) -> dict[str, Any]:
    """Generate what the shard's checkpoints lack, then validate it into data/ and quarantine/."""
    cfg = _config(config)
    options = cfg.resolved_options()
    root = open_output_root(cfg.output)
    plan = load_plan(root, cfg.run_id)
    if plan is None:
        raise ConfigError(f"run {cfg.run_id} has no plan under {cfg.output}: run the plan step first")
    profile = load_profile(plan.profile)
    tokenizer = None
    if is_conversation_shard(plan, shard):  # its steps are rendered here, with the run's own tokenizer
        tokenizer = load_tokenizer(cfg.tokenizer, profile, cfg.trust_remote_code).tokenizer
    resumed, todo, client = asyncio.run(
        generate_pending(
            root,
            plan,
            [shard],
            _servers(servers),
            options,
            vocab_size=profile.vocab_size,
            tokenizer=tokenizer,
            by=f"shard {shard}",
        )
    )
    try:
        rows = publish_shard(root, plan, shard, profile, options.publish)
    except ShardIncomplete as exc:  # samples out of attempts: a task retry (on any worker) resumes them
        raise RetryableShardError(f"{exc} (failed attempts: {client.stats.describe_failures()})") from None
    endpoints = client.screen.summary() if isinstance(client.screen, AnswerScreen) else {}
    for url, counts in endpoints.items():
        if counts["ejected"]:
            log.warning("shard %d: endpoint %s is out of rotation for this run: %s", shard, url, counts["ejected"])
    return {"shard": shard, "resumed": resumed, "generated": todo, "rows": rows, "endpoints": endpoints}


class RetryableShardError(Exception):
    """Some samples of a shard ran out of attempts: the orchestrator should retry the task later."""


def finalize_step(config: RunConfig | dict[str, Any]) -> dict[str, Any]:
    cfg = _config(config)
    root = open_output_root(cfg.output)
    plan = load_plan(root, cfg.run_id)
    if plan is None:
        return {"run_id": cfg.run_id, "published": False, "reason": "nothing planned"}
    summary = finalize_run(root, plan, load_profile(plan.profile), cfg.resolved_options().publish)
    return {"run_id": cfg.run_id, "published": True} | dataclasses.asdict(summary)
