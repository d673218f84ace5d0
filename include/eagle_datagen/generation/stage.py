"""`eagle-datagen run`: source and tokenize prompts, plan shards, generate against SGLang, resume.

Order matters: configuration and servers are checked first (tokenizer, profile, preflight with a
canary), so a misconfiguration costs no GPU time; the plan is written before generation, so a rerun
with the same run id continues the same shards; finished samples are checkpointed as they arrive.
Until the storage issue lands, a finished shard is written unvalidated to
`generated/run=<id>/category=<c>/part-<shard>.parquet`.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import math
import re
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from eagle_datagen.errors import ConfigError, DataGenError
from eagle_datagen.generation.checkpoint import CheckpointPolicy, CheckpointWriter, load_checkpoints
from eagle_datagen.generation.plan import (
    CategorySettings,
    RunPlan,
    check_plan_matches,
    load_plan,
    shard_requests,
    split_into_shards,
    write_plan,
)
from eagle_datagen.inference.client import GenerateClient
from eagle_datagen.inference.endpoints import BreakerPolicy, Endpoint, EndpointPool
from eagle_datagen.inference.preflight import ServerInfo, preflight
from eagle_datagen.inference.retry import RetryPolicy
from eagle_datagen.inference.samples import SampleRequest
from eagle_datagen.inference.scheduler import generation_details, run_samples
from eagle_datagen.progress import Progress
from eagle_datagen.sources.recipe import Defaults, Recipe
from eagle_datagen.storage.output_root import OutputRoot, open_output_root
from eagle_datagen.tokenization.stage import TokenizeOptions, TokenizeSetup, collect_and_tokenize, setup_tokenize

log = logging.getLogger(__name__)
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# 1 to 1.25 requests in flight per server slot keeps every slot busy; more only adds queue wait.
WINDOW_PER_SLOT = 1.25
DEFAULT_WINDOW = 64
CANARY_MESSAGES = [{"role": "user", "content": "Reply with the single word OK."}]


@dataclass(frozen=True)
class SamplingOverrides:
    max_new_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    samples_per_prompt: int | None = None


@dataclass(frozen=True)
class RunOptions:
    prompts: TokenizeOptions
    sglang_urls: list[str]
    run_id: str | None = None
    model: str | None = None  # what the servers must serve; default: the profile's model
    allow_model_mismatch: bool = False
    sampling: SamplingOverrides = field(default_factory=SamplingOverrides)
    shard_size: int = 1000
    concurrency: int | None = None  # per endpoint; default from the server's max_running_requests
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)
    checkpoint: CheckpointPolicy = field(default_factory=CheckpointPolicy)
    canary: bool = True
    canary_max_new_tokens: int = 4096
    preflight_wait_s: float = 30.0


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
    files: list[str]
    servers: list[dict[str, Any]]
    elapsed_s: float

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(2)


def check_run_id(run_id: str) -> str:
    if not RUN_ID_PATTERN.fullmatch(run_id):
        raise ConfigError(f"run id {run_id!r} must match [A-Za-z0-9][A-Za-z0-9_.-]{{0,127}} (no slashes or spaces)")
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
        else:
            base = Defaults().sampling.model_dump(exclude_none=True) | profile_sampling
            per_prompt = 1
        settings[category] = CategorySettings(
            sampling=base | cli, samples_per_prompt=overrides.samples_per_prompt or per_prompt
        )
    return settings


def _canary_body(setup: TokenizeSetup, sampling: dict[str, Any], max_new_tokens: int) -> dict[str, Any]:
    ids = setup.loaded.tokenizer.apply_chat_template(
        CANARY_MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    params = sampling | {"max_new_tokens": max_new_tokens, "sampling_seed": 1}
    return {"input_ids": ids, "sampling_params": params, "rid": f"eagle-datagen-canary-{secrets.token_hex(4)}"}


def _result_table(plan: RunPlan, requests: list[SampleRequest], rows: dict[str, dict[str, Any]]) -> pa.Table:
    records = []
    for request in requests:
        row = rows[request.sample_id]
        meta = row["meta_info"] or {}
        finish = row["finish_reason"] or {}
        records.append(
            {
                "sample_id": request.sample_id,
                "record_id": request.record_id,
                "prompt_id": request.prompt_id,
                "category": request.category,
                "sample_index": request.sample_index,
                "prompt_ids": request.prompt_ids,
                "output_ids": row["output_ids"],
                "finish_reason": "error" if row["error"] else finish.get("type", "abort"),
                "finish_detail": json.dumps(finish),
                "completion_tokens": int(meta.get("completion_tokens", len(row["output_ids"]))),
                "prompt_tokens": int(meta.get("prompt_tokens", len(request.prompt_ids))),
                "sampling": json.dumps(request.sampling, sort_keys=True),
                "model": plan.model,
                "run_id": plan.run_id,
                "weight_version": meta.get("weight_version"),
                "endpoint": row["endpoint"],
                "attempts": row["attempts"],
                "error": row["error"],
            }
        )
    schema = pa.schema(
        [
            ("sample_id", pa.string()),
            ("record_id", pa.string()),
            ("prompt_id", pa.string()),
            ("category", pa.string()),
            ("sample_index", pa.int32()),
            ("prompt_ids", pa.list_(pa.int32())),
            ("output_ids", pa.list_(pa.int32())),
            ("finish_reason", pa.string()),
            ("finish_detail", pa.string()),
            ("completion_tokens", pa.int32()),
            ("prompt_tokens", pa.int32()),
            ("sampling", pa.string()),
            ("model", pa.string()),
            ("run_id", pa.string()),
            ("weight_version", pa.string()),
            ("endpoint", pa.string()),
            ("attempts", pa.int32()),
            ("error", pa.string()),
        ]
    )
    return pa.Table.from_pylist(records, schema=schema)


def write_shard_results(root: OutputRoot, plan: RunPlan, index: int) -> str | None:
    """The shard's results from its checkpoints, once every sample is done; None while some are pending."""
    requests = shard_requests(root, plan, index)
    done = load_checkpoints(root, plan.run_id, index)
    if any(r.sample_id not in done for r in requests):
        return None
    info = plan.shards[index]
    key = f"generated/run={plan.run_id}/category={info.category}/part-{index:05d}.parquet"
    buffer = io.BytesIO()
    pq.write_table(_result_table(plan, requests, done), buffer, compression="zstd")
    root.write_bytes(key, buffer.getvalue())
    return key


async def generate_pending(
    root: OutputRoot,
    plan: RunPlan,
    shard_indices: list[int],
    servers: list[ServerInfo],
    options: RunOptions,
) -> tuple[int, int, GenerateClient]:
    """Generate every sample of these shards that has no checkpoint yet. Returns (resumed, to_do, client)."""
    pending: list[SampleRequest] = []
    resumed = 0
    for index in shard_indices:
        done = load_checkpoints(root, plan.run_id, index)
        requests = shard_requests(root, plan, index)
        resumed += sum(1 for r in requests if r.sample_id in done)
        pending.extend(r for r in requests if r.sample_id not in done)
    endpoints = [
        Endpoint(s.url, options.concurrency or math.ceil(WINDOW_PER_SLOT * (s.max_running_requests or DEFAULT_WINDOW)))
        for s in servers
    ]
    pool = EndpointPool(endpoints, options.breaker)
    log.info(
        "run %s: %d samples to generate, %d already done; %d in flight over %d endpoint(s)",
        plan.run_id,
        len(pending),
        resumed,
        pool.total_window,
        len(endpoints),
    )
    async with (
        GenerateClient(pool, options.retry) as client,
        CheckpointWriter(root, plan.run_id, options.checkpoint) as checkpoints,
    ):
        progress = Progress("generate", total=len(pending), unit="samples", details=generation_details(client))
        await run_samples(client, pending, pool.total_window, checkpoints.add, progress)
        progress.finish()
    log.info("endpoints: %s", pool.describe())
    return resumed, len(pending), client


def _finish_counts(results_root: OutputRoot, plan: RunPlan) -> Counter[str]:
    counts: Counter[str] = Counter()
    for info in plan.shards:
        for row in load_checkpoints(results_root, plan.run_id, info.index).values():
            counts["error" if row["error"] else (row["finish_reason"] or {}).get("type", "abort")] += 1
    return counts


def prepare_plan(
    setup: TokenizeSetup, root: OutputRoot, run_id: str, options: RunOptions, provenance: dict[str, Any]
) -> RunPlan:
    """Load the run's plan, or source, tokenize and write it. A rerun never re-sources."""
    existing = load_plan(root, run_id)
    if existing is not None:
        log.info("run %s: continuing the existing plan (%d shards)", run_id, len(existing.shards))
        return existing
    _, tokenized, _ = collect_and_tokenize(setup, root, f"rejects/run={run_id}/rejects.jsonl")
    if not tokenized.prompts:
        raise DataGenError("no prompts left to generate after validation: check the sources and --categories")
    categories = sorted({p.record.category for p in tokenized.prompts})
    settings = category_settings(categories, setup.recipe, setup.profile.sampling, options.sampling)
    shards = split_into_shards(tokenized.prompts, options.shard_size, settings)
    plan = RunPlan(
        run_id=run_id,
        model=options.model or setup.profile.model,
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
    run_id = check_run_id(options.run_id or new_run_id())
    setup = setup_tokenize(options.prompts)
    root = open_output_root(options.prompts.output)
    existing = load_plan(root, run_id)
    model = options.model or setup.profile.model
    canary_sampling = (
        next(iter(existing.categories.values())).sampling
        if existing
        else category_settings(["canary"], setup.recipe, setup.profile.sampling, options.sampling)["canary"].sampling
    )
    canary = _canary_body(setup, canary_sampling, options.canary_max_new_tokens) if options.canary else None
    servers = asyncio.run(
        preflight(
            options.sglang_urls,
            setup.profile,
            model,
            canary,
            allow_model_mismatch=options.allow_model_mismatch,
            wait_s=options.preflight_wait_s,
        )
    )
    provenance = setup.loaded.provenance() | {"servers": [s.provenance() for s in servers]}
    plan = prepare_plan(setup, root, run_id, options, provenance)
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
    resumed, generated, client = asyncio.run(
        generate_pending(root, plan, [s.index for s in plan.shards], servers, options)
    )
    files = [key for info in plan.shards if (key := write_shard_results(root, plan, info.index))]
    finish = _finish_counts(root, plan)
    done = sum(finish.values())
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
        files=files,
        servers=[s.provenance() for s in servers],
        elapsed_s=round(time.monotonic() - started, 2),
    )
