"""`eagle-datagen run`: source and tokenize prompts, plan shards, generate against SGLang, resume.

Order matters: configuration and servers are checked first (tokenizer, profile, preflight with a
canary), so a misconfiguration costs no GPU time; the plan is written before generation, so a rerun
with the same run id continues the same shards; finished samples are checkpointed as they arrive, each
answer validated first (screen.py: a server fault is sent again, a sick endpoint ejected, a deployment
that cannot succeed stops the run).
When every sample is done, the run is published (validation, data and quarantine shards, statistics,
draft vocabulary, report, manifest last: see publish.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import itertools
import logging
import math
import re
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from eagle_datagen import settings
from eagle_datagen.conversation.driver import ConversationRunner, conversation_rows, has_ended
from eagle_datagen.conversation.job import ConversationJob
from eagle_datagen.errors import ConfigError, DataGenError
from eagle_datagen.generation.checkpoint import CheckpointPolicy, CheckpointWriter, load_checkpoints, should_checkpoint
from eagle_datagen.generation.claims import DEFAULT_CLAIM_TTL_S
from eagle_datagen.generation.endpoint_check import preflight_run
from eagle_datagen.generation.endpoint_journal import EndpointJournal, live_ejections
from eagle_datagen.generation.incremental import NothingToDo, claim_samples
from eagle_datagen.generation.plan import (
    CategorySettings,
    RunPlan,
    check_plan_matches,
    is_conversation_shard,
    load_plan,
    shard_conversations,
    shard_requests,
    split_into_shards,
    write_plan,
)
from eagle_datagen.generation.plan_lock import PlanLockPolicy
from eagle_datagen.generation.publish import PublishOptions, publish_run
from eagle_datagen.generation.screen import AnswerScreen
from eagle_datagen.inference.affinity import BALANCE_POLICIES, PrefixAffinity, prompt_groups, spaced_samples
from eagle_datagen.inference.client import GenerateClient
from eagle_datagen.inference.content_breaker import ContentBreakerPolicy
from eagle_datagen.inference.endpoints import BreakerPolicy, Endpoint, EndpointPool
from eagle_datagen.inference.liveness import LivenessPolicy
from eagle_datagen.inference.preflight import ServerInfo, check_endpoint_urls
from eagle_datagen.inference.retry import RetryPolicy
from eagle_datagen.inference.samples import SampleRequest, SampleResult
from eagle_datagen.inference.scheduler import generation_details, run_jobs
from eagle_datagen.profile import load_profile
from eagle_datagen.progress import Progress
from eagle_datagen.sources.collect import resolve_sources
from eagle_datagen.sources.recipe import Defaults, Recipe
from eagle_datagen.storage.output_root import OutputRoot, open_output_root
from eagle_datagen.tokenization.stage import TokenizeOptions, TokenizeSetup, collect_and_tokenize, setup_tokenize

log = logging.getLogger(__name__)
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")  # no dots: manifest artifacts use them
# 1 to 1.25 requests in flight per server slot keeps every slot busy; more only adds queue wait.
WINDOW_PER_SLOT = 1.25
DEFAULT_WINDOW = 64
CANARY_MESSAGES = [{"role": "user", "content": "Reply with the single word OK."}]


class Unread(enum.Enum):
    """`prepare_plan`'s caller has not read the plan yet (None means it read it and there is none)."""

    UNREAD = "unread"


UNREAD = Unread.UNREAD


@dataclass(frozen=True)
class SamplingOverrides:
    max_new_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    samples_per_prompt: int | None = None
    turns: str | None = None  # last | each (docs/multi-turn.md)


@dataclass(frozen=True)
class RunOptions:
    prompts: TokenizeOptions
    sglang_urls: list[str]
    run_id: str | None = None
    model: str | None = None  # what the servers must serve; default: the profile's model
    allow_model_mismatch: bool = False
    sampling: SamplingOverrides = field(default_factory=SamplingOverrides)
    shard_size: int = settings.SHARD_SIZE
    concurrency: int | None = None  # per endpoint; default from the server's max_running_requests
    balance: str = "prefix-affinity"  # or "least-outstanding" (BALANCE_POLICIES); matters with several URLs
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)
    liveness: LivenessPolicy = field(default_factory=LivenessPolicy)  # lost requests found and hedged
    checkpoint: CheckpointPolicy = field(default_factory=CheckpointPolicy)
    publish: PublishOptions = field(default_factory=PublishOptions)
    # The user's highest acceptable share per reject reason (`--max-rate REASON=RATE`), over the recipe's
    # `max_rates` and today's defaults (validation/diagnosis.py); `resolve_thresholds` merges them.
    max_rates: dict[str, float] = field(default_factory=dict)
    content_breaker: ContentBreakerPolicy = field(default_factory=ContentBreakerPolicy)
    canary: bool = True
    incremental: bool = False  # generate only samples that no manifest under the output root lists yet
    per_weight_version: bool = False  # with incremental: samples of other weight versions do not count
    claim_ttl_s: float = DEFAULT_CLAIM_TTL_S  # with incremental: how long a silent run in flight keeps its samples
    plan_lock: PlanLockPolicy = field(default_factory=PlanLockPolicy)
    claim: bool = True  # False for a dry run: a plan that is never generated holds no samples
    canary_max_new_tokens: int = 4096
    preflight_wait_s: float = settings.WAIT_READY_S
    min_endpoints: int | None = None  # endpoints that must pass preflight; None: the recipe's, else 1


@dataclass
class RunSummary:
    run_id: str
    output: str
    shards: int
    samples: int
    resumed: int  # already checkpointed when this invocation started
    generated: int  # finished by this invocation
    pending: int  # still to do (transient failures that ran out of retries)
    finish: dict[str, int]
    failures: dict[str, int]
    retries: int
    published: dict[str, Any] | None  # the publish summary, once every sample is done
    servers: list[dict[str, Any]]
    elapsed_s: float
    endpoints: dict[str, dict[str, Any]] = field(default_factory=dict)  # answers, faults, ejection per endpoint

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(2)


def check_run_id(run_id: str) -> str:
    if not RUN_ID_PATTERN.fullmatch(run_id):
        raise ConfigError(
            f"run id {run_id!r} must match [A-Za-z0-9][A-Za-z0-9_-]{{0,127}} (letters, digits, '_' and '-')"
        )
    return run_id


def category_settings(
    categories: list[str], recipe: Recipe | None, profile_sampling: dict[str, float], overrides: SamplingOverrides
) -> dict[str, CategorySettings]:
    """Sampling per category: flags > recipe category > recipe defaults (or the profile's recommendation)."""
    cli = {
        k: v
        for k, v in {
            "max_new_tokens": overrides.max_new_tokens,
            "temperature": overrides.temperature,
            "top_p": overrides.top_p,
            "top_k": overrides.top_k,
        }.items()
        if v is not None
    }
    settings = {}
    for category in categories:
        if recipe is not None and category in recipe.categories:
            base = recipe.sampling_for(category).model_dump(exclude_none=True)
            per_prompt = recipe.samples_per_prompt_for(category)
            turns, max_tool_steps = recipe.turns_for(category), recipe.max_tool_steps_for(category)
        else:
            defaults = Defaults()
            base = defaults.sampling.model_dump(exclude_none=True) | profile_sampling
            per_prompt = 1
            turns, max_tool_steps = defaults.turns, defaults.max_tool_steps
        settings[category] = CategorySettings(
            sampling=base | cli,
            samples_per_prompt=overrides.samples_per_prompt or per_prompt,
            turns=overrides.turns or turns,
            max_tool_steps=max_tool_steps,
        )
    return settings


def resolve_thresholds(options: RunOptions, recipe: Recipe | None) -> RunOptions:
    """The run's diagnosis thresholds: today's defaults (or the caller's), then the recipe's `max_rates`,
    then the user's (command line, trigger form)."""
    rates = (recipe.max_rates if recipe is not None else {}) | options.max_rates
    if not rates:
        return options
    publish = dataclasses.replace(options.publish, thresholds=options.publish.thresholds.with_rates(rates))
    return dataclasses.replace(options, publish=publish)


def canary_request(setup: TokenizeSetup, options: RunOptions, plan: RunPlan | None = None) -> dict[str, Any] | None:
    """The preflight's canary /generate body, with the run's own sampling (its plan's, when it has one)."""
    if not options.canary:
        return None
    if plan is not None:
        sampling = next(iter(plan.categories.values())).sampling
    else:
        settings = category_settings(["canary"], setup.recipe, setup.profile.sampling, options.sampling)
        sampling = settings["canary"].sampling
    ids = setup.loaded.tokenizer.apply_chat_template(
        CANARY_MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    params = sampling | {"max_new_tokens": options.canary_max_new_tokens, "sampling_seed": 1}
    return {"input_ids": ids, "sampling_params": params, "rid": f"eagle-datagen-canary-{secrets.token_hex(4)}"}


def finish_type(row: dict[str, Any]) -> str:
    """A checkpoint row's outcome as the run summary counts it."""
    return "error" if row["error"] else (row["finish_reason"] or {}).get("type", "abort")


@dataclass
class StoredTally:
    """What the run's checkpoints hold, counted while they are loaded and written, so that the end of a run
    needs no second read of them."""

    finish: Counter[str] = field(default_factory=Counter)
    done: int = 0  # single-turn samples stored and conversations ended

    def count(self, row: dict[str, Any]) -> None:
        self.finish[finish_type(row)] += 1


def pending_requests(
    root: OutputRoot, plan: RunPlan, shard_indices: list[int], done: dict[int, set[str]], spacing: int = 1
) -> Iterator[SampleRequest]:
    """The samples of these shards that `done` lacks, one shard read at a time: the next shard's plan is read
    in a thread while this one generates, so neither the event loop nor memory holds the whole run. Within a
    shard, prompts sharing leading ids come side by side; a prompt's samples go out `spacing` requests apart,
    and so does the first sample of a prompt extending the one before it (a conversation's next step)
    (`spaced_samples`), so that each prefix is computed once and then found in the server's cache."""

    def groups() -> Iterator[list[SampleRequest]]:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="plan-reader") as reader:
            upcoming = (reader.submit(shard_requests, root, plan, index) for index in shard_indices)
            loading = next(upcoming, None)
            while loading is not None:
                requests = loading.result()  # ready by now, unless generating a shard is faster than reading one
                loading = next(upcoming, None)
                todo = [r for r in requests if r.sample_id not in done[r.shard]]
                yield from prompt_groups(todo, lambda r: r.prompt_ids)

    return spaced_samples(groups(), spacing, lambda r: r.prompt_ids)


def pending_conversations(
    root: OutputRoot, plan: RunPlan, shard_indices: list[int], tally: StoredTally | None = None
) -> tuple[list[ConversationJob], dict[int, dict[str, dict[str, Any]]]]:
    """The conversations of these `turns: each` shards that have not ended, and their shards' stored steps;
    `tally` counts every stored step and every ended conversation."""
    jobs: list[ConversationJob] = []
    stored: dict[int, dict[str, dict[str, Any]]] = {}
    for index in shard_indices:
        if not is_conversation_shard(plan, index):
            continue
        rows = load_checkpoints(root, plan.run_id, index)
        ended = {cid for cid, steps in conversation_rows(rows).items() if has_ended(steps)}
        if tally is not None:
            for row in rows.values():
                tally.count(row)
            tally.done += len(ended)
        # keep only the steps of conversations to continue: memory holds the interrupted ones, not the run
        stored[index] = {
            k: r for k, r in rows.items() if (r.get("conversation") or {}).get("conversation_id") not in ended
        }
        jobs += [job for job in shard_conversations(root, plan, index) if job.conversation_id not in ended]
    return jobs, stored


async def generate_pending(
    root: OutputRoot,
    plan: RunPlan,
    shard_indices: list[int],
    servers: list[ServerInfo],
    options: RunOptions,
    vocab_size: int | None = None,
    tokenizer: Any = None,
    by: str = "run",
    tally: StoredTally | None = None,
) -> tuple[int, int, GenerateClient]:
    """Generate every sample of these shards that has no checkpoint yet, and every step of their
    conversations that has not been stored. Returns (resumed, to_do, client), counted in samples and
    conversations. With `vocab_size` (the model's), a request holding an id at or above it is never sent;
    `tokenizer` renders the steps of `turns: each` shards; `tally` ends up counting what the shards'
    checkpoints hold, those found and those written."""
    tally = tally if tally is not None else StoredTally()
    single = [index for index in shard_indices if not is_conversation_shard(plan, index)]
    done: dict[int, set[str]] = {}
    for index in single:
        rows = load_checkpoints(root, plan.run_id, index)
        for row in rows.values():
            tally.count(row)
        tally.done += len(rows)
        done[index] = set(rows)  # ids only
    conversations, stored_steps = pending_conversations(root, plan, shard_indices, tally)
    if conversations and tokenizer is None:
        raise ConfigError("a turns: each shard needs the tokenizer to render its steps")
    to_do = sum(plan.shards[index].samples for index in single) - sum(len(ids) for ids in done.values())
    to_do += len(conversations)
    resumed = sum(plan.shards[index].samples for index in shard_indices) - to_do
    endpoints = [
        Endpoint(s.url, options.concurrency or math.ceil(WINDOW_PER_SLOT * (s.max_running_requests or DEFAULT_WINDOW)))
        for s in servers
    ]
    profile = load_profile(plan.profile)
    journal = EndpointJournal(root, plan.run_id)
    screen = AnswerScreen(
        [e.url for e in endpoints],
        profile,
        plan.run_id,
        options.publish.limits,
        options.publish.thresholds,
        options.content_breaker,
        journal,
        by=by,
    )
    if options.balance not in BALANCE_POLICIES:
        raise ConfigError(f"unknown balance policy {options.balance!r}; known: {list(BALANCE_POLICIES)}")
    affinity = PrefixAffinity([e.url for e in endpoints]) if options.balance == "prefix-affinity" else None
    pool = EndpointPool(endpoints, options.breaker, affinity=affinity, gate=screen.breaker)
    pending = pending_requests(root, plan, single, done, spacing=pool.workers)
    for key, ejection in live_ejections(root, plan.run_id):
        screen.learn(key, ejection)
    log.info(
        "run %s: %d samples to generate, %d already done; %d in flight over %d endpoint(s), %s",
        plan.run_id,
        to_do,
        resumed,
        pool.total_window,
        len(endpoints),
        "prefix affinity" if pool.affinity else "least outstanding",
    )

    async def stored(result: SampleResult) -> None:
        await checkpoints.add(result)  # first: the result that stops the run is kept too
        if should_checkpoint(result):
            tally.count(result.to_checkpoint())
            tally.done += 1
            screen.count_row(result)

    async def stored_step(shard: int, row: dict[str, Any]) -> None:
        await checkpoints.add_row(shard, row)
        tally.count(row)

    opened: list[GenerateClient] = []
    try:
        async with (
            GenerateClient(
                pool, options.retry, screen=screen, vocab_size=vocab_size, liveness=options.liveness
            ) as client,
            CheckpointWriter(root, plan.run_id, options.checkpoint) as checkpoints,
        ):
            opened.append(client)
            progress = Progress("generate", total=to_do, unit="samples", details=generation_details(client))
            if to_do:
                screen.raise_if_all_out()  # every endpoint was ejected earlier in the run
            runner = ConversationRunner(
                client,
                tokenizer,
                profile,
                options.publish.limits,
                stored_step,
                stored_steps,
                on_answer=screen.count_row,
            )

            def conversation_job(job: ConversationJob) -> Callable[[], Awaitable[None]]:
                async def run() -> None:
                    if await runner.run(job):
                        tally.done += 1
                    progress.advance()

                return run

            def sample_job(request: SampleRequest) -> Callable[[], Awaitable[None]]:
                async def run() -> None:
                    await stored(await client.generate(request))
                    progress.advance()

                return run

            # conversations first, the longest first: they are the long jobs, and starting them early shortens
            # the drain (the last jobs running alone while slots sit idle)
            conversations.sort(key=lambda j: -sum(m["role"] == "user" for m in j.messages))
            jobs = itertools.chain((conversation_job(j) for j in conversations), (sample_job(r) for r in pending))
            await run_jobs(jobs, pool.workers)
            progress.finish()
    finally:
        liveness = opened[0].liveness.summary() if opened and opened[0].liveness is not None else {}
        if screen.answered or screen.stopped or liveness:
            await asyncio.to_thread(journal.record_tally, screen.tally() | {"liveness": liveness})
    log.info("endpoints: %s", pool.describe())
    if pool.affinity is not None:
        a = pool.affinity
        log.info(
            "prefix affinity: %d followed a recent placement, %d placed on the ring (%d spilled past a full "
            "replica), %d sent elsewhere to keep slots busy",
            a.followed,
            a.placed,
            a.spilled,
            pool.stolen,
        )
    return resumed, to_do, client


def prepare_plan(
    setup: TokenizeSetup,
    root: OutputRoot,
    run_id: str,
    options: RunOptions,
    provenance: dict[str, Any],
    weight_version: str | None = None,
    existing: RunPlan | None | Unread = UNREAD,
) -> RunPlan:
    """Load the run's plan, or source, tokenize, claim the samples (incremental.py) and write it. A rerun
    never re-sources. `existing` is the plan the caller already read (None: there is none)."""
    if existing is UNREAD:
        existing = load_plan(root, run_id)
    if existing is not None:
        log.info("run %s: continuing the existing plan (%d shards)", run_id, len(existing.shards))
        return existing
    _, tokenized, _ = collect_and_tokenize(setup, root, f"rejects/run={run_id}/rejects.jsonl")
    if not tokenized.prompts:
        raise DataGenError("no prompts left to generate after validation: check the sources and --categories")
    categories = sorted({p.record.category for p in tokenized.prompts})
    settings = category_settings(categories, setup.recipe, setup.profile.sampling, options.sampling)
    model = options.model or setup.profile.model
    planned = [(p, list(range(settings[p.record.category].samples_per_prompt))) for p in tokenized.prompts]
    planned = claim_samples(
        root,
        run_id,
        planned,
        settings,
        model,
        weight_version,
        incremental=options.incremental,
        per_weight_version=options.per_weight_version,
        claim_ttl_s=options.claim_ttl_s,
        lock_policy=options.plan_lock,
        claim=options.claim,
    )
    shards = split_into_shards(planned, options.shard_size)
    plan = RunPlan(
        run_id=run_id,
        model=model,
        profile=setup.profile.name,
        categories=settings,
        shards=[info for info, _ in shards],
        provenance=provenance,
    )
    write_plan(root, plan, [prompts for _, prompts in shards])
    log.info("run %s: planned %d samples in %d shards", run_id, plan.total_samples, len(plan.shards))
    return plan


def run_generation(options: RunOptions) -> RunSummary:
    started = time.monotonic()
    if not options.sglang_urls:
        raise ConfigError("give at least one --sglang-url")
    check_endpoint_urls(options.sglang_urls)
    # An empty --run-id (an unset variable in a script) must not quietly start a new run instead of resuming.
    run_id = check_run_id(options.run_id if options.run_id is not None else new_run_id())
    setup = setup_tokenize(options.prompts)
    options = resolve_thresholds(options, setup.recipe)
    root = open_output_root(options.prompts.output)
    existing = load_plan(root, run_id)
    if existing is None:  # a rerun works from its plan and needs no sources; the plan reuses this listing
        setup.resolved_sources = resolve_sources(setup.plans, setup.recipe.base_dir if setup.recipe else None)
    model = options.model or setup.profile.model
    canary = canary_request(setup, options, existing)
    servers = asyncio.run(
        preflight_run(
            options.sglang_urls,
            setup,
            model,
            canary,
            root=root,
            run_id=run_id,
            wanted_min=options.min_endpoints,
            allow_model_mismatch=options.allow_model_mismatch,
            wait_s=options.preflight_wait_s,
            by="run",
        )
    )
    provenance = setup.loaded.provenance() | {"servers": [s.provenance() for s in servers]}
    try:
        plan = prepare_plan(setup, root, run_id, options, provenance, servers[0].weight_version, existing)
    except NothingToDo as done:
        log.info("%s", done)
        return RunSummary(
            run_id,
            root.uri,
            0,
            0,
            0,
            0,
            0,
            {},
            {},
            0,
            None,
            [s.provenance() for s in servers],
            round(time.monotonic() - started, 2),
        )
    if existing is not None:
        wanted = RunPlan(
            run_id,
            model,
            plan.profile,
            category_settings(list(plan.categories), setup.recipe, setup.profile.sampling, options.sampling),
            plan.shards,
            plan.provenance,
        )
        check_plan_matches(plan, wanted)
    tally = StoredTally()
    resumed, generated, client = asyncio.run(
        generate_pending(
            root,
            plan,
            [s.index for s in plan.shards],
            servers,
            options,
            vocab_size=setup.profile.vocab_size,
            tokenizer=setup.loaded.tokenizer,
            tally=tally,
        )
    )
    finish, done = tally.finish, tally.done  # counted on the way: the checkpoints are read once more, to publish
    published = publish_run(root, plan, setup.profile, options.publish) if done == plan.total_samples else None
    return RunSummary(
        run_id=run_id,
        output=root.uri,
        shards=len(plan.shards),
        samples=plan.total_samples,
        resumed=resumed,
        generated=generated - (plan.total_samples - done),
        pending=plan.total_samples - done,
        finish=dict(finish),
        failures=dict(client.stats.failures),
        retries=client.stats.retries,
        published=published.__dict__ if published else None,
        servers=[s.provenance() for s in servers],
        elapsed_s=round(time.monotonic() - started, 2),
        endpoints=client.screen.summary() if isinstance(client.screen, AnswerScreen) else {},
    )
