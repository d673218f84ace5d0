"""The run: one sequence of steps with one contract, for every front end.

    servers = preflight_step(config)                      # tokenizer, profile, sources, every endpoint + canary
    plan = plan_step(config, servers)                     # source, tokenize, write the plan (or load it, and
                                                          # check it matches the configuration)
    generate_step(config, servers, shards)                # generate and publish shards (Airflow: one per task)
                                                          # (or withdraw_step(config) if the plan is refused)
    finalize_step(config)                                 # diagnosis, statistics, vocab, report, manifest

then the release (storage/release.py: `eagle-datagen release`, the release DAG). `run_generation` (the command
line) runs the steps in one process, with one `RunContext` that keeps what an earlier step loaded (the tokenizer,
the plan, the listing of the sources); Airflow runs each step as a task (plugins/eagle_datagen_airflow/tasks.py),
which starts from a fresh context on any worker: the steps take and return plain JSON-able values (a `RunConfig`
dict, run ids, shard indices), keep no state between tasks, and work from what earlier steps stored under the
output root. Neither front end sequences the steps' insides or checks anything of its own: what the command line
checks, the DAG checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator
from typing import Any

from eagle_datagen import settings
from eagle_datagen.errors import ConfigError
from eagle_datagen.generation.claims import HolderCheck, heartbeat_interval_s, withdraw_claim
from eagle_datagen.generation.endpoint_check import preflight_run
from eagle_datagen.generation.heartbeat import process_heartbeat
from eagle_datagen.generation.incremental import ClaimedElsewhere, NothingToDo
from eagle_datagen.generation.mode_check import check_modes, run_modes
from eagle_datagen.generation.plan import RunPlan, check_plan_matches, is_conversation_shard, load_plan
from eagle_datagen.generation.publish import (
    ShardIncomplete,
    finalize_run,
    publish_shard,
    published_summary,
)
from eagle_datagen.generation.screen import AnswerScreen
from eagle_datagen.generation.stage import (
    UNREAD,
    RunOptions,
    RunSummary,
    StoredTally,
    Unread,
    canary_request,
    category_settings,
    check_run_id,
    generate_pending,
    new_run_id,
    prepare_plan,
    resolve_thresholds,
)
from eagle_datagen.generation.takeover import check_claim_stands
from eagle_datagen.heldout import check_policy
from eagle_datagen.inference.preflight import ServerInfo
from eagle_datagen.inference.tokenizer_agreement import agreement_check
from eagle_datagen.profile import load_profile
from eagle_datagen.sources.collect import resolve_sources
from eagle_datagen.sources.recipe import load_recipe
from eagle_datagen.storage.manifest import read_manifest
from eagle_datagen.storage.output_root import OutputRoot, open_output_root
from eagle_datagen.tokenization.loader import load_tokenizer
from eagle_datagen.tokenization.provenance import check_same_tokenizer
from eagle_datagen.tokenization.stage import TokenizeSetup, setup_tokenize
from eagle_datagen.validation.diagnosis import parse_rates

log = logging.getLogger(__name__)


class _RunConfigMethods:
    """What RunConfig does; its fields are the settings themselves (below)."""

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
        """The layers' options: each setting's value where its declaration's `option` says (settings.build_options)."""
        return settings.build_options(RunOptions, self)


# Everything a run needs, as plain values (what a trigger form or a connection provides): one field per setting
# of eagle_datagen/settings.py that has a `config`, named, defaulted and documented there; keyword-only.
RunConfig = dataclasses.make_dataclass(
    "RunConfig",
    settings.config_fields(),
    bases=(_RunConfigMethods,),
    namespace={"__module__": __name__, "__doc__": "A run's settings, one field per declared setting (settings.py)."},
    frozen=True,
    kw_only=True,
)


def _config(config: RunConfig | dict[str, Any]) -> RunConfig:
    return config if isinstance(config, RunConfig) else RunConfig.from_dict(config)


@dataclasses.dataclass
class RunContext:
    """One run's options and what its steps have loaded so far. The command line passes one context through
    every step; an orchestrator's task starts from a fresh one (`of`), so each step loads what it needs."""

    options: RunOptions
    _setup: TokenizeSetup | None = None
    _root: OutputRoot | None = None
    _plan: RunPlan | None | Unread = UNREAD
    _thresholds_resolved: bool = False
    _beating: bool = False

    def __post_init__(self) -> None:
        # An empty run id (an unset variable in a script) is refused, not replaced by a new run's id.
        run_id = check_run_id(self.options.run_id if self.options.run_id is not None else new_run_id())
        self.options = dataclasses.replace(self.options, run_id=run_id)

    @classmethod
    def of(cls, config: RunConfig | dict[str, Any] | RunContext) -> RunContext:
        return config if isinstance(config, RunContext) else cls(_config(config).options())

    @property
    def run_id(self) -> str:
        return self.options.run_id

    def setup(self) -> TokenizeSetup:
        """Tokenizer, profile and recipe, loaded once per process; the diagnosis thresholds resolved against
        the recipe."""
        if self._setup is None:
            self._setup = setup_tokenize(self.options.prompts)
            self.options = resolve_thresholds(self.options, self._setup.recipe)
            self._thresholds_resolved = True
        return self._setup

    def resolved_options(self) -> RunOptions:
        """The options with the recipe's diagnosis thresholds, without loading the tokenizer."""
        if not self._thresholds_resolved:
            recipe = self._setup.recipe if self._setup else None
            if recipe is None and self.options.prompts.recipe:
                recipe = load_recipe(self.options.prompts.recipe)
            self.options = resolve_thresholds(self.options, recipe)
            self._thresholds_resolved = True
        return self.options

    def root(self) -> OutputRoot:
        if self._root is None:
            self._root = open_output_root(self.options.prompts.output)
        return self._root

    def plan(self) -> RunPlan | None:
        """The run's stored plan (None: not planned yet)."""
        if self._plan is UNREAD:
            self._plan = load_plan(self.root(), self.run_id)
        return self._plan

    @contextlib.contextmanager
    def heartbeat(self, by: str) -> Iterator[None]:
        """This process's heartbeat for the run while the block runs (heartbeat.py): its claims' sign of life,
        once per process (the command line beats from its plan to its end, each step inside it beats with it)."""
        if self._beating or not self.options.claim:
            yield
            return
        self._beating = True
        try:
            with process_heartbeat(self.root(), self.run_id, heartbeat_interval_s(self.options.claim_ttl_s), by):
                yield
        finally:
            self._beating = False


def _servers(raw: list[dict[str, Any]]) -> list[ServerInfo]:
    return [ServerInfo(**server) for server in raw]


def preflight_step(config: RunConfig | dict[str, Any] | RunContext) -> list[dict[str, Any]]:
    """Check tokenizer, profile, the sources (a first run) and every endpoint (with a canary of the run's own
    sampling); returns the servers' facts. Nothing here spends GPU time beyond the canary."""
    ctx = RunContext.of(config)
    options = ctx.options
    if not options.sglang_urls:
        raise ConfigError("give at least one " + settings.named("sglang_urls", options.front_end))
    access = options.access()  # an unreadable key file or CA bundle fails before anything is loaded
    setup = ctx.setup()
    existing = ctx.plan()
    check_policy(ctx.root(), options.heldout_fraction, options.front_end)  # another fraction: refused before the canary
    if existing is None:  # missing sources fail before the canary; a rerun works from its plan, needs none
        setup.resolved_sources = resolve_sources(setup.plans, setup.recipe.base_dir if setup.recipe else None)
        check_modes(setup, options)  # a mode the profile or the chat template lacks fails here too
    servers = asyncio.run(
        preflight_run(
            options.sglang_urls,
            setup,
            options.model or setup.profile.model,
            canary_request(setup, ctx.options, existing),
            root=ctx.root(),
            run_id=ctx.run_id,
            wanted_min=options.min_endpoints,
            allow_model_mismatch=options.allow_model_mismatch,
            wait_s=options.preflight_wait_s,
            by="run" if isinstance(config, RunContext) else "preflight",
            agreement=agreement_check(
                setup.loaded.tokenizer,
                options.front_end,
                encode=setup.loaded.encoder(),  # the ids the run sends, by the path it encodes with
                allow_unchecked=options.allow_unchecked_tokenizer,
                modes=run_modes(setup, options, existing),  # each mode the run sends, rendered and compared
            ),
            front_end=options.front_end,
            replicas_behind_url=options.replicas_behind_url,
            access=access,
        )
    )
    return [dataclasses.asdict(s) for s in servers]


def plan_step(
    config: RunConfig | dict[str, Any] | RunContext, servers: list[dict[str, Any]], holders: HolderCheck | None = None
) -> dict[str, Any]:
    """Source, tokenize and plan the run, or load its existing plan and check that it is the plan this
    configuration makes (same model, profile and sampling per category). `shards` is empty when an incremental
    run finds nothing new. `holders`: the orchestrator's word on whether runs holding claims still run (an
    incremental run takes over the samples of those that have ended: takeover.py)."""
    ctx = RunContext.of(config)
    setup = ctx.setup()
    infos = _servers(servers)
    index = setup.filters.benchmarks if setup.filters is not None else None
    provenance = setup.loaded.provenance() | {
        "servers": [s.provenance() for s in infos],
        # every benchmark the run was checked against (a named one whose file is missing refuses the run)
        "decontamination": index.summary() if index is not None else None,
    }
    existing = ctx.plan()
    weight_version = infos[0].weight_version
    try:
        plan = prepare_plan(setup, ctx.root(), ctx.run_id, ctx.options, provenance, weight_version, existing, holders)
    except NothingToDo as done:
        log.info("%s", done)
        # claimed_by: runs in flight that hold samples of this one (the orchestrator must not end green on them)
        nothing = {"run_id": ctx.run_id, "shards": [], "samples": 0, "categories": [], "reason": str(done)}
        return nothing | done.to_json()
    if existing is not None:
        sampling = category_settings(
            list(plan.categories), setup.recipe, setup.profile, ctx.options.sampling, setup.seed
        )
        model = ctx.options.model or setup.profile.model
        wanted = dataclasses.replace(plan, model=model, categories=sampling)
        check_plan_matches(plan, wanted, ctx.options.front_end)
    ctx._plan = plan
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


def generate_step(
    config: RunConfig | dict[str, Any] | RunContext, servers: list[dict[str, Any]], shards: list[int]
) -> dict[str, Any]:
    """Generate what these shards' checkpoints lack (one pool over all of them), then validate each complete shard
    into data/ and quarantine/. `pending` counts the samples that ran out of attempts: a rerun (a task retry)
    resumes them from the checkpoints."""
    ctx = RunContext.of(config)
    options = ctx.resolved_options()
    root = ctx.root()
    plan = ctx.plan()
    if plan is None:
        raise ConfigError(f"run {ctx.run_id} has no plan under {root.uri}: run the plan step first")
    if published_summary(root, ctx.run_id) is not None:  # a finished run (a task rerun after finalize)
        return _already_published(plan, shards)
    if options.claim:  # a run resumed after another took its samples over generates none of them (takeover.py)
        check_claim_stands(root, ctx.run_id)
    by = "run" if len(shards) == len(plan.shards) else f"shard {shards[0]}" if len(shards) == 1 else "shards"
    with ctx.heartbeat(by):  # from here to the last shard published: its claims' sign of life
        return _generate(ctx, options, root, plan, servers, shards, by)


def _generate(
    ctx: RunContext,
    options: RunOptions,
    root: OutputRoot,
    plan: RunPlan,
    servers: list[dict[str, Any]],
    shards: list[int],
    by: str,
) -> dict[str, Any]:
    profile = ctx._setup.profile if ctx._setup is not None else load_profile(plan.profile)
    tokenizer = None
    if ctx._setup is not None:
        tokenizer = ctx._setup.loaded.tokenizer
    elif any(is_conversation_shard(plan, shard) for shard in shards):  # steps rendered with the run's tokenizer
        prompts = options.prompts
        tokenizer = load_tokenizer(
            prompts.tokenizer, profile, prompts.trust_remote_code, front_end=prompts.front_end
        ).tokenizer
    tally = StoredTally()
    resumed, to_do, client = asyncio.run(
        generate_pending(
            root,
            plan,
            shards,
            _servers(servers),
            options,
            vocab_size=profile.vocab_size,
            tokenizer=tokenizer,
            by=by,
            tally=tally,
        )
    )
    total = sum(plan.shards[shard].samples for shard in shards)
    rows, incomplete = 0, []
    if tally.done == total and read_manifest(root, plan.run_id) is None:
        if options.claim:  # taken over while it generated (it looked ended): publish nothing of it
            check_claim_stands(root, plan.run_id)
        for shard in shards:
            try:
                rows += publish_shard(root, plan, shard, profile, options.publish)
            except ShardIncomplete as exc:
                incomplete.append(str(exc))
    endpoints = client.screen.summary() if isinstance(client.screen, AnswerScreen) else {}
    for url, counts in endpoints.items():
        if counts["ejected"]:
            log.warning("endpoint %s is out of rotation for run %s: %s", url, plan.run_id, counts["ejected"])
    return {
        "shards": list(shards),
        "resumed": resumed,
        "generated": to_do - (total - tally.done),
        "pending": total - tally.done,
        "incomplete": incomplete,
        "rows": rows,
        "finish": dict(tally.finish),
        "failures": dict(client.stats.failures),
        "failed_attempts": client.stats.describe_failures(),
        "retries": client.stats.retries,
        "endpoints": endpoints,
    }


def _already_published(plan: RunPlan, shards: list[int]) -> dict[str, Any]:
    """generate_step's answer for a run whose manifest exists: every sample stored, nothing to do."""
    total = sum(plan.shards[shard].samples for shard in shards)
    return {
        "shards": list(shards),
        "resumed": total,
        "generated": 0,
        "pending": 0,
        "incomplete": [],
        "rows": total,
        "finish": {},
        "failures": {},
        "failed_attempts": "",
        "retries": 0,
        "endpoints": {},
    }


def generate_shard_step(
    config: RunConfig | dict[str, Any], servers: list[dict[str, Any]], shard: int
) -> dict[str, Any]:
    """`generate_step` for one shard (an orchestrator's mapped task): samples out of attempts fail the task with
    `RetryableShardError`, so a task retry (on any worker) resumes them."""
    result = generate_step(config, servers, [shard])
    if result["pending"] or result["incomplete"]:
        detail = "; ".join(result["incomplete"]) or f"shard {shard}: {result['pending']} samples pending"
        raise RetryableShardError(f"{detail} (failed attempts: {result['failed_attempts']})")
    return {k: result[k] for k in ("resumed", "generated", "rows", "endpoints")} | {"shard": shard}


class RetryableShardError(Exception):
    """Some samples of a shard ran out of attempts: the orchestrator should retry the task later."""


def finalize_step(config: RunConfig | dict[str, Any] | RunContext) -> dict[str, Any]:
    """Diagnosis, statistics, draft vocabulary, report and the manifest, written last."""
    ctx = RunContext.of(config)
    plan = ctx.plan()
    if plan is None:  # never a green end: nothing was published
        raise ConfigError(f"run {ctx.run_id} has no plan under {ctx.root().uri}: nothing to publish (plan it first)")
    profile = ctx._setup.profile if ctx._setup is not None else load_profile(plan.profile)
    summary = finalize_run(ctx.root(), plan, profile, ctx.resolved_options().publish)
    return {"run_id": ctx.run_id, "published": True} | dataclasses.asdict(summary)


def _finished_run(ctx: RunContext) -> tuple[RunPlan, dict[str, Any]] | None:
    """The run's plan and publication when its manifest exists (after checking that the plan matches the
    settings and the tokenizer asked for now, as a resumed run is checked)."""
    existing = ctx.plan()
    published = published_summary(ctx.root(), ctx.run_id) if existing is not None else None
    if existing is None or published is None:
        return None
    setup, options = ctx.setup(), ctx.options
    check_same_tokenizer(ctx.run_id, existing.provenance, setup.loaded.provenance(), "run")
    chosen = category_settings(list(existing.categories), setup.recipe, setup.profile, options.sampling, setup.seed)
    model = options.model or setup.profile.model
    check_plan_matches(existing, dataclasses.replace(existing, model=model, categories=chosen))
    log.info("run %s is already published (%s): nothing to generate", ctx.run_id, published.manifest)
    return existing, published.__dict__


def run_generation(options: RunOptions) -> RunSummary:
    """The command line's run: the steps above, in this order, in one process (one context)."""
    started = time.monotonic()
    ctx = RunContext(options)
    run_id = ctx.run_id
    finished = _finished_run(ctx)
    if finished is not None:  # known from its manifest at once: no preflight, no checkpoint read
        plan, published = finished
        samples, elapsed = plan.total_samples, round(time.monotonic() - started, 2)
        return RunSummary(
            run_id, ctx.root().uri, len(plan.shards), samples, samples, 0, 0, {}, {}, 0, published, [], elapsed
        )
    servers = preflight_step(ctx)
    planned = plan_step(ctx, servers)
    infos = _servers(servers)
    if not planned["shards"] and planned.get("claimed_by"):  # nothing of its own, yet not all published
        raise ClaimedElsewhere(planned["reason"])
    if not planned["shards"]:  # an incremental run that found nothing new: all of it is published
        elapsed = round(time.monotonic() - started, 2)
        provenance = [s.provenance() for s in infos]
        nothing_new = f"{planned['reason']} ({ctx.root().uri}): nothing new to generate"
        return RunSummary(
            run_id, ctx.root().uri, 0, 0, 0, 0, 0, {}, {}, 0, None, provenance, elapsed, nothing_new=nothing_new
        )
    with ctx.heartbeat("run"):  # the process's claims live as long as it runs, publishing included
        generated = generate_step(ctx, servers, planned["shards"])
        published = None
        if not generated["pending"] and not generated["incomplete"]:
            published = finalize_step(ctx)
            published = {k: v for k, v in published.items() if k not in ("run_id", "published")}
    return RunSummary(
        run_id=run_id,
        output=ctx.root().uri,
        shards=len(planned["shards"]),
        samples=planned["samples"],
        resumed=generated["resumed"],
        generated=generated["generated"],
        pending=generated["pending"],
        finish=generated["finish"],
        failures=generated["failures"],
        retries=generated["retries"],
        published=published,
        servers=[s.provenance() for s in infos],
        elapsed_s=round(time.monotonic() - started, 2),
        endpoints=generated["endpoints"],
        incomplete=generated["incomplete"],
    )
