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
import re
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from eagle_datagen import settings
from eagle_datagen.conversation.driver import ConversationRunner
from eagle_datagen.conversation.job import ConversationJob
from eagle_datagen.errors import ConfigError
from eagle_datagen.generation.checkpoint import (
    CheckpointPolicy,
    CheckpointWriter,
    checkpoint_rows,
    finish_type,
    load_checkpoint_indexes,
    should_checkpoint,
)
from eagle_datagen.generation.claims import DEFAULT_CLAIM_TTL_S, HolderCheck
from eagle_datagen.generation.endpoint_journal import EndpointJournal, live_ejections
from eagle_datagen.generation.incremental import claim_samples, read_catalog, skip_published
from eagle_datagen.generation.plan import (
    CategorySettings,
    PlannedCategory,
    RunPlan,
    is_conversation_shard,
    load_plan,
    shard_conversations,
    shard_requests,
)
from eagle_datagen.generation.plan_build import source_and_plan
from eagle_datagen.generation.plan_lock import PlanLockPolicy
from eagle_datagen.generation.publish import PublishOptions
from eagle_datagen.generation.screen import AnswerScreen
from eagle_datagen.heldout import freeze_policy, provisional_policy
from eagle_datagen.inference.access import ServerAccess, server_access
from eagle_datagen.inference.affinity import BALANCE_POLICIES, PrefixAffinity, prompt_groups, spaced_samples
from eagle_datagen.inference.client import GenerateClient
from eagle_datagen.inference.content_breaker import ContentBreakerPolicy
from eagle_datagen.inference.endpoints import BreakerPolicy, Endpoint, EndpointPool
from eagle_datagen.inference.liveness import LivenessPolicy
from eagle_datagen.inference.preflight import ServerInfo
from eagle_datagen.inference.retry import RetryPolicy
from eagle_datagen.inference.samples import SampleRequest, SampleResult
from eagle_datagen.inference.scheduler import generation_details, run_jobs
from eagle_datagen.modes import INSTANT, MIX, MODES, THINKING, sample_modes
from eagle_datagen.profile import ModelProfile, load_profile
from eagle_datagen.progress import Progress
from eagle_datagen.sources.recipe import Defaults, Recipe
from eagle_datagen.storage.output_root import OutputRoot
from eagle_datagen.tokenization.provenance import check_same_tokenizer
from eagle_datagen.tokenization.stage import TokenizeOptions, TokenizeSetup

log = logging.getLogger(__name__)
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")  # no dots: manifest artifacts use them
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
    turns: str | None = None  # last | each (docs/internals/multi-turn.md)
    top_logprobs: int | None = None  # k: the top-k logprobs of every output token (inference/logprobs.py)
    mode: str | None = None  # thinking | instant | mix (modes.py)
    instant_fraction: float | None = None  # with mix: the share of prompts generated instant


@dataclass(frozen=True)
class RunOptions:
    prompts: TokenizeOptions
    sglang_urls: list[str]
    api_key_file: str | None = None  # None: $EAGLE_DATAGEN_API_KEY, if set (inference/access.py)
    ca_bundle: str | None = None  # None: the system's CA certificates
    run_id: str | None = None
    model: str | None = None  # what the servers must serve; default: the profile's model
    allow_model_mismatch: bool = False
    allow_unchecked_tokenizer: bool = False  # endpoints whose /v1/tokenize cannot be asked are used unchecked
    sampling: SamplingOverrides = field(default_factory=SamplingOverrides)
    shard_size: int = settings.SHARD_SIZE
    concurrency: int | None = None  # per endpoint; default from the server's max_running_requests
    replicas_behind_url: int | None = None  # None: a router's workers from its /workers, else one (inference/fleet.py)
    balance: str = settings.BALANCE  # or "least-outstanding" (BALANCE_POLICIES); matters with several URLs
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
    dry_run: bool = False  # plan only: the orchestrator generates nothing
    canary_max_new_tokens: int = 4096
    preflight_wait_s: float = settings.WAIT_READY_S
    front_end: str = "cli"  # messages name settings as this front end calls them (settings.named)
    min_endpoints: int | str | None = None  # endpoints that must pass preflight, a count or a share ("50%")
    heldout_fraction: float | None = None  # None: the output root's frozen fraction (heldout.py), else the default

    def access(self) -> ServerAccess:
        """The deployment's API key and CA bundle, read now (the key never rides in the options)."""
        return server_access(self.api_key_file, self.ca_bundle, front_end=self.front_end)

    @property
    def claim(self) -> bool:
        """Whether the plan claims its samples: a dry run's plan is never generated, so it holds none."""
        return not self.dry_run


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
    incomplete: list[str] = field(default_factory=list)  # shards found incomplete when published, with why
    nothing_new: str | None = None  # an incremental run that found every sample published: the line saying so

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def not_published(self) -> str | None:
        """Why the run ended without its data published, in one line with how to finish it; None when it is
        published, or when an incremental run found nothing new (all of it published)."""
        if self.published is not None or self.nothing_new is not None:
            return None
        missing = [f"{self.pending:,} samples ran out of retries"] if self.pending else []
        missing += self.incomplete
        what = "; ".join(missing) or "no manifest was written"
        return f"run {self.run_id} is not published: {what}: {settings.resume_hint('cli', self.run_id)} to finish it"


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(2)


def check_run_id(run_id: str) -> str:
    if not RUN_ID_PATTERN.fullmatch(run_id):
        raise ConfigError(
            f"run id {run_id!r} must match [A-Za-z0-9][A-Za-z0-9_-]{{0,127}} (letters, digits, '_' and '-')"
        )
    return run_id


def category_settings(
    categories: list[str],
    recipe: Recipe | None,
    profile: ModelProfile | None,
    overrides: SamplingOverrides,
    seed: int = 0,
) -> dict[str, CategorySettings]:
    """Sampling per category, every value by the one precedence (settings.PRECEDENCE): flag or form > recipe
    category > recipe defaults > the model profile's recommendation (for the sample's mode) > the built-in
    default, whether or not the run has a recipe. A mix keeps both modes' sampling and `seed` (the recipe's, which
    chooses its instant prompts); a mode the profile lacks is a ConfigError."""
    given = dataclasses.asdict(overrides)
    chosen = {}
    for category in categories:
        spec = recipe.categories.get(category) if recipe is not None else None
        in_category = spec.sampling.model_dump() if spec is not None and spec.sampling is not None else {}
        in_defaults = recipe.defaults.sampling.model_dump() if recipe is not None else {}
        defaults = recipe.defaults if recipe is not None else Defaults()
        layers = (given, in_category, in_defaults)
        mode = settings.resolve(
            "mode", given=overrides.mode, category=spec.mode if spec is not None else None, defaults=defaults.mode
        )
        if mode not in MODES:
            raise ConfigError(f"unknown mode {mode!r} for category {category}: use one of {list(MODES)}")
        if profile is not None and any(m not in profile.modes for m in sample_modes(mode)):
            raise ConfigError(profile.no_mode(INSTANT))
        mixed = mode == MIX
        chosen[category] = CategorySettings(
            sampling=_sampling(*layers, profile, INSTANT if mode == INSTANT else THINKING),
            samples_per_prompt=settings.resolve(
                "samples_per_prompt",
                given=overrides.samples_per_prompt,
                category=spec.samples_per_prompt if spec is not None else None,
                defaults=defaults.samples_per_prompt,
            ),
            turns=settings.resolve(
                "turns",
                given=overrides.turns,
                category=spec.turns if spec is not None else None,
                defaults=defaults.turns,
            ),
            max_tool_steps=settings.resolve(
                "max_tool_steps",
                category=spec.max_tool_steps if spec is not None else None,
                defaults=defaults.max_tool_steps,
            ),
            top_logprobs=settings.resolve(
                "top_logprobs",
                given=overrides.top_logprobs,
                category=spec.top_logprobs if spec is not None else None,
                defaults=defaults.top_logprobs,
            ),
            mode=mode,
            instant_fraction=settings.resolve(
                "instant_fraction",
                given=overrides.instant_fraction,
                category=spec.instant_fraction if spec is not None else None,
                defaults=defaults.instant_fraction,
            )
            if mixed
            else None,
            mode_seed=seed if mixed else None,
            instant_sampling=_sampling(*layers, profile, INSTANT) if mixed else None,
        )
    return chosen


def _sampling(
    given: dict[str, Any],
    in_category: dict[str, Any],
    in_defaults: dict[str, Any],
    profile: ModelProfile | None,
    mode: str,
) -> dict[str, Any]:
    """The sampling of one mode's samples: each parameter by the precedence, the profile's recommendation being
    the mode's own."""
    recommended = profile.mode(mode).sampling if profile is not None else {}
    sampling = {}
    for name in dict.fromkeys([*settings.SAMPLING, *recommended]):
        value = settings.resolve(
            name,
            given=given.get(name),
            category=in_category.get(name),
            defaults=in_defaults.get(name),
            profile=recommended.get(name),
        )
        if value is not None:  # top_k and min_p are off unless something sets them
            sampling[name] = value
    return sampling


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
        sampling = next(iter(plan.categories.values())).sampling_of(THINKING)
    else:  # the first category the run plans: the canary asks what the run will (in thinking mode, whose
        # answer shows whether the server keeps think tokens)
        recipe = setup.recipe
        chosen = options.prompts.categories if options.prompts is not None else None
        planned = chosen or (list(recipe.categories) if recipe is not None else None) or [""]
        first = sorted(planned)[0]
        thinking_only = dataclasses.replace(options.sampling, mode=THINKING)
        sampling = category_settings([first], recipe, setup.profile, thinking_only)[first].sampling
    ids = setup.loaded.tokenizer.apply_chat_template(
        CANARY_MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    params = sampling | {"max_new_tokens": options.canary_max_new_tokens, "sampling_seed": 1}
    return {"input_ids": ids, "sampling_params": params, "rid": f"eagle-datagen-canary-{secrets.token_hex(4)}"}


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
        # two reads of the checkpoints, a chunk at a time: which conversations ended (each one's last step, as
        # conversation_rows and has_ended find it), then the steps of the others, to continue: memory holds the
        # interrupted conversations, not the shard
        last: dict[str, tuple[int, int, bool]] = {}
        for seen, row in enumerate(checkpoint_rows(root, plan.run_id, index)):
            if tally is not None:
                tally.count(row)
            step = row.get("conversation")
            if step is not None:
                mark = (step["turn_index"], seen, step["trajectory_end"] is not None)
                if mark[:2] > last.get(step["conversation_id"], (-1, -1, False))[:2]:
                    last[step["conversation_id"]] = mark
        ended = {cid for cid, (_, _, end) in last.items() if end}
        if tally is not None:
            tally.done += len(ended)
        stored[index] = {
            row["sample_id"]: row
            for row in checkpoint_rows(root, plan.run_id, index)
            if (row.get("conversation") or {}).get("conversation_id") not in ended
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
    indexes = load_checkpoint_indexes(root, plan.run_id, single)  # ids and outcomes, not the answers
    for index in single:
        outcomes = indexes[index]
        tally.finish.update(outcomes.values())
        tally.done += len(outcomes)
        done[index] = set(outcomes)
    conversations, stored_steps = pending_conversations(root, plan, shard_indices, tally)
    if conversations and tokenizer is None:
        raise ConfigError("a turns: each shard needs the tokenizer to render its steps")
    to_do = sum(plan.shards[index].samples for index in single) - sum(len(ids) for ids in done.values())
    to_do += len(conversations)
    resumed = sum(plan.shards[index].samples for index in shard_indices) - to_do
    endpoints = [Endpoint(s.url, s.window(options.concurrency)) for s in servers]
    for server, endpoint in zip(servers, endpoints, strict=True):  # what sized each window (inference/fleet.py)
        log.info("run %s: %s: %s, %d in flight", plan.run_id, server.url, server.fleet.describe(), endpoint.window)
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
        front_end=options.front_end,
    )
    if options.balance not in BALANCE_POLICIES:
        raise ConfigError(f"unknown balance policy {options.balance!r}; known: {list(BALANCE_POLICIES)}")
    affinity = PrefixAffinity([e.url for e in endpoints]) if options.balance == "prefix-affinity" else None
    pool = EndpointPool(endpoints, options.breaker, affinity=affinity, gate=screen.breaker, access=options.access())
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
            await run_jobs(jobs, pool.workers, on_drained=client.drained)
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
    holders: HolderCheck | None = None,
) -> RunPlan:
    """Load the run's plan, or source, tokenize, claim the samples (incremental.py) and write it. A rerun
    never re-sources. `existing` is the plan the caller already read (None: there is none); `holders` is the
    orchestrator's word on whether the runs holding claims still run (takeover.py)."""
    if existing is UNREAD:
        existing = load_plan(root, run_id)
    if existing is not None:
        check_same_tokenizer(run_id, existing.provenance, provenance, "run", options.front_end)
        if existing.heldout and not options.dry_run:  # a dry run's plan generated after all: its split now holds
            freeze_policy(root, existing.heldout["fraction"], run_id, options.front_end)
        log.info("run %s: continuing the existing plan (%d shards)", run_id, len(existing.shards))
        return existing
    model = options.model or setup.profile.model
    heldout = (
        # a dry run generates nothing: it marks its plan as a run would, and freezes no fraction (heldout.py)
        provisional_policy(root, options.heldout_fraction, run_id, options.front_end)
        if options.dry_run
        else freeze_policy(root, options.heldout_fraction, run_id, options.front_end)
    )

    def settings_for(categories: list[str]) -> dict[str, CategorySettings]:
        return category_settings(categories, setup.recipe, setup.profile, options.sampling, setup.seed)

    # an incremental run reads the catalog first, and tokenizes only the records it lacks
    catalog = read_catalog(root, model, weight_version, options.per_weight_version) if options.incremental else None
    if catalog is not None:  # one tokenizer per output root (samples are known by prompt): refused before tokenizing
        for published, made_with in sorted(catalog.provenance.items()):
            check_same_tokenizer(published, made_with, provenance, "published run", options.front_end)
    skip = skip_published(catalog, model, setup.loaded.provenance(), settings_for) if catalog else None

    def choose(planned: list[PlannedCategory], settings: dict[str, CategorySettings]) -> list[PlannedCategory]:
        return claim_samples(
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
            tokenizer=provenance,
            catalog=catalog,
            front_end=options.front_end,
            check=holders,
        )

    return source_and_plan(
        setup,
        root,
        run_id,
        model=model,
        provenance=provenance,
        shard_size=options.shard_size,
        settings_for=settings_for,
        choose=choose,
        skip=skip,
        heldout=heldout,
    )
