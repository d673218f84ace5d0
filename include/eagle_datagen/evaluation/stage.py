"""An evaluation: three steps with one contract, for the command line and the evaluate DAG (as generation/steps.py
is for a run).

    prepared = prepare_step(config)                 # tokenizer, prompt set, sampling, every endpoint checked
    measure_step(config, prepared, categories)      # the requests of these categories to every deployment
    finish_step(config, prepared)                   # the numbers, the records file, the report, the JSON last

`evaluate_all` (the command line) runs them in one process, every category in one pool; the DAG runs
`measure_step` once per category, mapped, on any worker. The steps take and return plain JSON and work from what the
earlier ones stored (EvaluationPlace: the prompt set, each category's records), so a retried task measures its
category again and `finish_step` only reads. Nothing is sent before every endpoint has passed its checks, and a
baseline that cannot pair is refused before that too.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from eagle_datagen.errors import ConfigError, DataGenError
from eagle_datagen.evaluation import aggregate
from eagle_datagen.evaluation.comparable import check_comparable, differences, sampling_by_mode_of
from eagle_datagen.evaluation.intervals import METHOD
from eagle_datagen.evaluation.options import SCHEMA, EvaluateConfig, EvaluateOptions
from eagle_datagen.evaluation.place import EvaluationPlace, check_eval_id, place_for
from eagle_datagen.evaluation.prompts import (
    EvalPrompt,
    choose,
    heldout_prompts,
    prompts_of,
    prompts_table,
    source_prompts,
)
from eagle_datagen.evaluation.records import RECORD_SCHEMA, read_records, records_bytes, records_table
from eagle_datagen.evaluation.report import render_evaluation
from eagle_datagen.evaluation.requests import Side, send
from eagle_datagen.evaluation.results import Baseline, check_pairs_with, deployment_json, load_baseline
from eagle_datagen.evaluation.servers import SpeculativeServer, check_deployment
from eagle_datagen.generation.plan import parquet_bytes
from eagle_datagen.generation.stage import category_settings, new_run_id
from eagle_datagen.heldout import read_policy
from eagle_datagen.inference.tokenizer_agreement import agreement_check
from eagle_datagen.modes import SAMPLE_MODES, THINKING
from eagle_datagen.profile import load_profile
from eagle_datagen.records import PromptRecord
from eagle_datagen.sources.recipe import load_recipe
from eagle_datagen.storage.manifest import list_manifests
from eagle_datagen.storage.objects import put_once
from eagle_datagen.storage.output_root import LocalOutputRoot, open_output_root
from eagle_datagen.storage.parquet import read_parquet_bytes
from eagle_datagen.tokenization.loader import load_tokenizer
from eagle_datagen.tokenization.provenance import check_same_tokenizer
from eagle_datagen.tokenization.stage import setup_tokenize

log = logging.getLogger(__name__)


def _options(config: EvaluateConfig | dict[str, Any]) -> EvaluateOptions:
    config = config if isinstance(config, EvaluateConfig) else EvaluateConfig.from_dict(config)
    options = config.options()
    return replace(options, eval_id=check_eval_id(options.eval_id or new_run_id()))


def _place(options: EvaluateOptions) -> EvaluationPlace:
    return place_for(options.prompts.output, options.to, options.eval_id)


def _prompt_set(options: EvaluateOptions, place: EvaluationPlace, tokenizer: Any) -> tuple[list, dict[str, Any]]:
    """The prompts (before the cap per category) and where they came from."""
    wanted = options.prompts.categories
    if options.prompts.prompts:
        prompt_options = replace(options.prompts, recipe=None, output=options.prompts.output or place.root.uri)
        setup = setup_tokenize(prompt_options)
        prompts = source_prompts(setup, place.root, place.rejects_key, _modes(options, setup.profile))
        return prompts, {"source": "prompts", "sources": list(options.prompts.prompts)}
    if not options.prompts.output:
        raise ConfigError("give --output ROOT (its held-out prompts) or --prompts SRC: the prompts to evaluate on")
    root = open_output_root(options.prompts.output)
    for manifest in list_manifests(root):  # the stored ids were made by this tokenizer, or the prompts differ
        if not options.runs or manifest["run_id"] in options.runs:
            check_same_tokenizer(  # its stored ids are sent as they are: whichever path made them
                manifest["run_id"],
                manifest["provenance"],
                tokenizer.provenance(),
                "published run",
                options.front_end,
                encode_path=False,
            )
    prompts = heldout_prompts(root, options.runs, wanted)
    policy = read_policy(root)
    return prompts, {
        "source": "heldout",
        "output": root.uri,
        "runs": sorted({p.run_id for p in prompts if p.run_id}),
        "heldout_fraction": policy.fraction if policy else None,
    }


def _modes(options: EvaluateOptions, profile: Any) -> Callable[[PromptRecord], str]:
    """Each `--prompts` record's mode, as a run with the same settings (mode, instant fraction, recipe) would
    choose it, the evaluation's seed choosing a mix's instant prompts."""
    recipe = load_recipe(options.prompts.recipe) if options.prompts.recipe else None
    chosen: dict[str, Any] = {}

    def mode_of(record: PromptRecord) -> str:
        if record.category not in chosen:
            found = category_settings([record.category], recipe, profile, options.sampling, options.seed)
            chosen[record.category] = found[record.category]
        return chosen[record.category].mode_of(record.prompt_id)

    return mode_of


def sampling_by_mode(
    options: EvaluateOptions, prompts: list[EvalPrompt], recipe: Any, profile: Any
) -> dict[str, dict[str, dict[str, Any]]]:
    """category -> mode -> the sampling of that category's prompts of that mode, by generation's precedence (the
    profile's recommendation being the mode's own)."""
    result: dict[str, dict[str, dict[str, Any]]] = {}
    for mode in sorted({p.mode for p in prompts}):
        categories = sorted({p.category for p in prompts if p.mode == mode})
        overrides = replace(options.sampling, mode=mode, instant_fraction=None)
        for category, chosen in category_settings(categories, recipe, profile, overrides, options.seed).items():
            result.setdefault(category, {})[mode] = chosen.sampling
    return result


def _comparable(
    options: EvaluateOptions,
    deployment_a: dict[str, Any],
    by_mode: dict[str, Any],
    deployment_b: dict[str, Any] | None,
    baseline: Baseline | None,
) -> list[str] | None:
    """The differences between A and B that --allow-comparison-mismatch accepts (None without a comparison);
    ConfigError for any without it, before any request."""
    if deployment_b is not None:
        found = differences(deployment_a, deployment_b, by_mode, by_mode)
        other = f"deployment B ({', '.join(options.compare_urls)})"
    elif baseline is not None:
        found = differences(
            deployment_a, baseline.results["deployment"], by_mode, sampling_by_mode_of(baseline.results)
        )
        other = f"baseline {baseline.location}"
    else:
        return None
    return check_comparable(found, other, options.allow_comparison_mismatch, options.front_end)


def prepare_step(config: EvaluateConfig | dict[str, Any]) -> dict[str, Any]:
    """Check the configuration and every endpoint, choose and store the prompt set; returns what the later steps
    need (the eval id, the categories, the deployments' facts, the sampling per category)."""
    options = _options(config)
    place = _place(options)
    if place.json_key in place.root.list(place.json_key):
        raise ConfigError(f"evaluation {options.eval_id} exists at {place.location(place.json_key)}: give another id")
    profile = load_profile(options.prompts.profile)
    loaded = load_tokenizer(
        options.prompts.tokenizer, profile, options.prompts.trust_remote_code, front_end=options.front_end
    )
    prompts, origin = _prompt_set(options, place, loaded)
    prompts = choose(prompts, options.max_prompts_per_category, options.seed)
    categories = sorted({p.category for p in prompts})
    recipe = load_recipe(options.prompts.recipe) if options.prompts.recipe else None
    chosen = category_settings(categories, recipe, profile, options.sampling)
    sampling = {c: s.sampling for c, s in chosen.items()}
    by_mode = sampling_by_mode(options, prompts, recipe, profile)
    baseline = load_baseline(options.baseline) if options.baseline else None
    if baseline is not None:
        keys = {p.prompt_key for p in prompts}
        check_pairs_with(baseline, options.seed, options.requests_per_prompt, keys, options.front_end)
    model = options.model or profile.model

    access = options.access()  # before the deployments: an unreadable key file fails here

    async def deployments() -> tuple[list[SpeculativeServer], list[SpeculativeServer]]:
        wait, front_end = options.preflight_wait_s, options.front_end
        agreement = agreement_check(  # the ids the evaluation sends, by the path it encodes with, in its modes
            loaded.tokenizer,
            front_end,
            encode=loaded.encoder(),
            allow_unchecked=options.allow_unchecked_tokenizer,
            modes={m: dict(profile.mode(m).template_kwargs) for m in SAMPLE_MODES if any(p.mode == m for p in prompts)},
        )
        replicas = options.replicas_behind_url
        a = await check_deployment(
            options.sglang_urls, profile, model, agreement, wait, front_end, replicas, access=access["A"]
        )
        b = []
        if options.compare_urls:
            b = await check_deployment(
                options.compare_urls, profile, model, agreement, wait, front_end, replicas, access=access["B"]
            )
        return a, b

    if not options.sglang_urls:
        raise ConfigError("give at least one --sglang-url: the speculative deployment to evaluate")
    servers_a, servers_b = asyncio.run(deployments())
    deployment_a = deployment_json(options.label or servers_a[0].draft_model, [s.to_json() for s in servers_a])
    deployment_b = None
    if servers_b:
        deployment_b = deployment_json(
            options.compare_label or servers_b[0].draft_model, [s.to_json() for s in servers_b]
        )
    accepted = _comparable(options, deployment_a, by_mode, deployment_b, baseline)
    place.root.write_bytes(place.prompts_key, parquet_bytes(prompts_table(prompts)))
    per_category = {c: sum(1 for p in prompts if p.category == c) for c in categories}
    prepared = {
        "eval_id": options.eval_id,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "location": place.location(place.json_key),
        "categories": categories,
        "model": model,
        "profile": profile.name,
        "tokenizer": loaded.provenance(),
        "prompts": origin
        | {"per_category": per_category, "max_prompts_per_category": options.max_prompts_per_category},
        "sampling": sampling,
        "sampling_by_mode": by_mode,
        "modes": {
            c: {m: sum(1 for p in prompts if p.category == c and p.mode == m) for m in by_mode[c]} for c in categories
        },
        "deployments": {"A": deployment_a, **({"B": deployment_b} if deployment_b else {})},
        "accepted_differences": accepted,
    }
    place.root.write_bytes(place.prepared_key, json.dumps(prepared, indent=1).encode())
    log.info(
        "evaluation %s: %d prompts in %d categories, deployment A %s%s",
        options.eval_id,
        len(prompts),
        len(categories),
        prepared["deployments"]["A"]["label"],
        f", B {prepared['deployments']['B']['label']}" if servers_b else "",
    )
    return prepared


def measure_step(
    config: EvaluateConfig | dict[str, Any], prepared: dict[str, Any], categories: list[str]
) -> dict[str, Any]:
    """Send these categories' requests to every deployment; store each category's records."""
    options = replace(_options(config), eval_id=prepared["eval_id"])
    place = _place(options)
    prompts = prompts_of(read_parquet_bytes(place.root.read_bytes(place.prompts_key)), categories)
    sides = [
        Side(name, d["label"], [SpeculativeServer.from_json(s) for s in d["servers"]])
        for name, d in prepared["deployments"].items()
    ]
    vocab_size = load_profile(prepared["profile"]).vocab_size
    by_mode = prepared.get("sampling_by_mode") or {c: {THINKING: s} for c, s in prepared["sampling"].items()}
    records = asyncio.run(send(sides, prompts, by_mode, options, prepared["eval_id"], vocab_size))
    counts = {}
    for category in categories:
        rows = [r for r in records if r["category"] == category]
        place.root.write_bytes(place.part_key(category), records_bytes(records_table(rows)))
        counts[category] = {
            "requests": len(rows),
            "failed": sum(r["status"] == "failed" for r in rows),
            "measured": sum(r["status"] == "ok" for r in rows),
        }
    return {"eval_id": prepared["eval_id"], "categories": counts}


def _records(place: EvaluationPlace, categories: list[str]) -> pa.Table:
    missing = [c for c in categories if place.part_key(c) not in place.root.list(place.part_key(c))]
    if missing:
        raise DataGenError(f"categories {missing} of this evaluation were not measured: run their measure step first")
    tables = [read_records(place.root.read_bytes(place.part_key(c))) for c in categories]
    table = pa.concat_tables(tables) if tables else RECORD_SCHEMA.empty_table()
    order = ("side", "category", "prompt_key", "request_index")  # the file's bytes do not depend on timing
    return table.sort_by([(name, "ascending") for name in order])


def _comparison(
    prepared: dict[str, Any], rows: list[dict[str, Any]], baseline: Baseline | None
) -> dict[str, Any] | None:
    if "B" in prepared["deployments"]:
        deployment = prepared["deployments"]["B"]
        other = [r for r in rows if r["side"] == "B"]
        source: dict[str, Any] = {"source": "compare_url"}
    elif baseline is not None:
        deployment = baseline.results["deployment"]
        other = baseline.rows
        source = {
            "source": "baseline",
            "baseline": {"eval_id": baseline.results["eval_id"], "location": baseline.location},
        }
    else:
        return None
    mine = [r for r in rows if r["side"] == "A"]
    accepted = {"accepted_differences": prepared.get("accepted_differences") or []}
    return (
        {"label": deployment["label"], **source, "deployment": deployment, "results": aggregate.summarize(other)}
        | accepted
        | aggregate.paired(mine, other)
    )


def _empty_comparison(comparison: dict[str, Any] | None) -> str | None:
    """Why a comparison measured nothing, in words (None when it measured something on both sides)."""
    if comparison is None:
        return None
    theirs = comparison["results"]["overall"]
    if not theirs["measured"]:
        failures = ", ".join(f"{kind} x{n}" for kind, n in theirs["failures"].items()) or "none failed"
        return (
            f"deployment B ({comparison['label']}) measured nothing: {theirs['requests']} requests, "
            f"{theirs['failed']} failed ({failures}), {theirs['unmeasured']} answered without speculative metrics"
        )
    if not comparison["overall"]["paired_prompts"]:
        return f"no prompt was measured on both A and B ({comparison['label']}): nothing to compare"
    return None


def finish_step(config: EvaluateConfig | dict[str, Any], prepared: dict[str, Any]) -> dict[str, Any]:
    """The numbers from the records, the records file, the report and the JSON (written last); then the work files
    go. DataGenError (after writing) when a category has no measured request, or a comparison measured nothing on
    B's side or no prompt on both."""
    options = replace(_options(config), eval_id=prepared["eval_id"])
    place = _place(options)
    table = _records(place, prepared["categories"])
    rows = table.to_pylist()
    stored = put_once(place.root, place.records_key, records_bytes(table))
    mine = aggregate.summarize([r for r in rows if r["side"] == "A"])
    baseline = load_baseline(options.baseline) if options.baseline else None
    deployment = prepared["deployments"]["A"]
    results: dict[str, Any] = {
        "schema": SCHEMA,
        "eval_id": prepared["eval_id"],
        "created_at": prepared["created_at"],
        "label": deployment["label"],
        "deployment": deployment,
        "model": prepared["model"],
        "profile": prepared["profile"],
        "tokenizer": prepared["tokenizer"],
        "prompts": prepared["prompts"] | {"requests_per_prompt": options.requests_per_prompt},
        "sampling": prepared["sampling"],
        "sampling_by_mode": prepared.get("sampling_by_mode"),
        "seed": options.seed,
        "headline": aggregate.HEADLINE,
        "intervals": METHOD,
        "categories": mine["categories"],
        "overall": mine["overall"],
        "modes": mine["modes"],
        "categories_by_mode": mine["categories_by_mode"],
    }
    comparison = _comparison(prepared, rows, baseline)
    if comparison is not None:
        results["comparison"] = comparison
    results["records"] = {"key": place.name(place.records_key), "sha256": stored.sha256, "rows": table.num_rows}
    if place.rejects_key in place.root.list(place.rejects_key):
        results["rejects"] = {"key": place.name(place.rejects_key)}
    page = render_evaluation(results).encode()
    report = put_once(place.root, place.report_key, page)
    results["report"] = {"key": place.name(place.report_key), "sha256": report.sha256}
    put_once(place.root, place.json_key, json.dumps(results, indent=1).encode())
    _remove_work(place)
    empty = [c for c, block in mine["categories"].items() if not block["measured"]]
    empty += [c for c in prepared["categories"] if c not in mine["categories"]]
    if empty:
        raise DataGenError(
            f"evaluation {prepared['eval_id']}: no measured request in {sorted(set(empty))} "
            f"({place.location(place.json_key)} counts the failures): check the endpoints and rerun"
        )
    why = _empty_comparison(comparison)
    if why:  # an A/B with nothing on one side is no comparison, whatever A measured
        raise DataGenError(
            f"evaluation {prepared['eval_id']}: {why} ({place.location(place.json_key)} counts them): check B's "
            "endpoints or the baseline and rerun"
        )
    return {
        "eval_id": prepared["eval_id"],
        "json": place.location(place.json_key),
        "report": place.location(place.report_key),
        "results": results,
    }


def _remove_work(place: EvaluationPlace) -> None:
    """The steps' work files (the prompt set, each category's records), and on a local root their folders."""
    for key in place.root.list(place.base + "/"):
        place.root.delete(key)
    if isinstance(place.root, LocalOutputRoot):
        folder = place.root.path / place.base
        for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True) if folder.is_dir() else []:
            if path.is_dir() and not any(path.iterdir()):
                path.rmdir()
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def evaluate_all(config: EvaluateConfig | dict[str, Any]) -> dict[str, Any]:
    """The command line's evaluation: the steps in one process, every category in one pool."""
    prepared = prepare_step(config)
    measure_step(config, prepared, prepared["categories"])
    return finish_step(config, prepared)
