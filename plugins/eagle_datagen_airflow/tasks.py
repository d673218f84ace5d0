"""The category DAG's task bodies: the run context in, plain JSON to the package's steps, JSON out.

Every step works from what earlier steps stored under the output root, so any task can run, or be
retried, on any worker. XComs carry the run's settings and the servers' facts, never credentials.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from eagle_datagen.errors import ConfigError
from eagle_datagen.inference.access import KeyRefused
from eagle_datagen_airflow.checks import check_deployment
from eagle_datagen_airflow.deployment import object_store, sglang_deployment, sglang_key
from eagle_datagen_airflow.runs import refuse_unknown_conf, run_config, run_id_for

log = logging.getLogger(__name__)


def preflight(category: str, recipe: str, params: Mapping[str, Any], dag: Any, dag_run: Any) -> dict[str, Any]:
    """Resolve the run's settings (params, connection), run the deployment checklist (checks.py), then check every
    endpoint with a canary."""
    from eagle_datagen.generation.steps import preflight_step

    try:  # a bad setting is terminal; a server that is not ready yet is worth the task's retries
        refuse_unknown_conf(dag_run.conf, dag.params)  # the declared params: the run's have the conf merged in
        deployment = sglang_deployment(params["sglang_conn_id"])
        config = run_config(category, recipe, run_id_for(category, dag_run.run_id), params, deployment)
    except ConfigError as exc:
        raise AirflowFailException(str(exc)) from None
    log.info(
        "run %s of %s: %d endpoint(s), output %s",
        config["run_id"],
        category,
        len(config["sglang_urls"]),
        config["output"],
    )
    with object_store(params["aws_conn_id"]), sglang_key(params.get("sglang_conn_id")):
        try:
            check_deployment(config, params)  # `eagle-datagen check`'s lines first: a refused one stops the run here
            servers = preflight_step(config)
        except KeyRefused as exc:  # a refused key stays refused: no retries
            raise AirflowFailException(str(exc)) from None
    return {"config": config, "servers": servers}


def plan(
    config: dict[str, Any],
    servers: list[dict[str, Any]],
    params: Mapping[str, Any],
    dag_run: Any = None,
    holders: Callable[..., Any] | None = None,
    ti: Any = None,
    waiting_since: datetime | None = None,
) -> list[int]:
    """Source, tokenize and plan (or load the plan of an earlier try); returns the shards to generate.

    The samples of other runs' claims (claim_owners.py says how): a holder that has ended (its DAG run over, no
    task or process of it left) is taken over by the plan step, at once and whatever else this run plans; one that
    still runs keeps them however long it has been quiet. A run whose unpublished samples are all held never ends
    green and empty: while a holder still runs the task waits (rescheduled, no slot held), for at most the claim
    TTL, then fails naming it; a silent one (no sign of life for minutes and no DAG run to ask: probably a killed
    command-line run) fails this task at once with the holders, when each last showed life and when its claim
    expires. `holders` is the check (AirflowHolders by default), `ti` (the task instance) says since when it has
    been waiting (`waiting_since`)."""
    from eagle_datagen.generation.steps import plan_step, withdraw_step
    from eagle_datagen_airflow import claim_owners

    check = holders or claim_owners.AirflowHolders()
    if ti is not None and waiting_since is None:
        from airflow.sdk import get_current_context

        waiting_since = ti.get_first_reschedule_date(get_current_context())
    run_id, ttl_s = config["run_id"], config["claim_ttl_s"]
    with object_store(params["aws_conn_id"]):
        held = claim_owners.still_waiting_for(config, servers, check) if waiting_since is not None else None
        if held:  # nothing changed since the last look: no need to plan again
            from eagle_datagen.generation.incremental import describe_holders

            reason = f"run {run_id}: nothing to generate, its samples are held: {describe_holders(held)}"
            claim_owners.wait_or_fail(reason, waiting_since, ttl_s)
        planned = plan_step(config, servers, None if params["dry_run"] else check)
        shards = planned["shards"]
        try:
            check_mappable(len(shards), planned["samples"], config["shard_size"])
        except AirflowFailException:
            withdraw_step(config)  # the run ends here: the next one must not skip the samples it claimed
            raise
        if shards and dag_run is not None and not params["dry_run"]:
            claim_owners.note_owner(config["output"], run_id, dag_run)  # who to ask whether this run has ended
        holding = planned.get("claimed_by") or {}
        if params["dry_run"]:
            log.info("dry run: %d samples in %d shard(s) planned, nothing generated", planned["samples"], len(shards))
            return []
        if not shards and holding:
            if any(not h.get("live", True) for h in holding.values()):
                raise AirflowFailException(
                    planned["reason"] + "; or mark the holding DAG run's task instances failed to release its claims"
                )
            claim_owners.note_waiting(config["output"], run_id, holding)  # what the next look checks, cheaply
            claim_owners.wait_or_fail(planned["reason"], waiting_since, ttl_s)
        if waiting_since is not None:
            claim_owners.stop_waiting(config["output"], run_id)
    if not shards:
        log.info(
            "nothing new to generate: %d samples are already published under %s",
            planned.get("published", 0),
            config["output"],
        )
    else:
        log.info("run %s: %d samples in %d shard(s) to generate", run_id, planned["samples"], len(shards))
    return shards


def check_mappable(shards: int, samples: int, shard_size: int) -> None:
    """Airflow refuses to map more than [core] max_map_length task instances, and says so only as "pushed
    value is too large to map": fail the plan with the fix instead, before any shard is generated."""
    from airflow.sdk.configuration import conf

    limit = conf.getint("core", "max_map_length", fallback=1024)
    if shards > limit:
        needed = math.ceil(shard_size * shards / limit)
        raise AirflowFailException(
            f"the run plans {shards} shards ({samples} samples) but Airflow maps at most {limit} tasks "
            f"([core] max_map_length): trigger it again with shard_size of at least {needed}, or raise "
            "AIRFLOW__CORE__MAX_MAP_LENGTH"
        )


def generate_shard(
    config: dict[str, Any], servers: list[dict[str, Any]], shard: int, params: Mapping[str, Any]
) -> dict[str, Any]:
    """Generate what the shard's checkpoints lack, then validate it into data/ and quarantine/."""
    from eagle_datagen.generation.steps import generate_shard_step

    with object_store(params["aws_conn_id"]), sglang_key(params.get("sglang_conn_id")):
        try:
            return generate_shard_step(config, servers, shard)
        except KeyRefused as exc:  # the key was changed under the run: a retry would be refused too
            raise AirflowFailException(str(exc)) from None


def finalize(config: dict[str, Any], params: Mapping[str, Any], asset_event: Any) -> dict[str, Any]:
    """Diagnosis, statistics, draft vocabulary, report and the manifest; the asset event says where."""
    from eagle_datagen.generation.steps import finalize_step

    with object_store(params["aws_conn_id"]):
        summary = finalize_step(config)
    asset_event.extra = {
        "output": config["output"],
        "run_id": config["run_id"],
        "manifest": summary.get("manifest"),
        "data": summary.get("data"),
        "quarantine": summary.get("quarantine"),
    }
    return summary


def assemble_release(
    categories: list[str], params: Mapping[str, Any], dag_run: Any, asset_event: Any
) -> dict[str, Any]:
    """The release of every category's published runs under the output root; the asset event says where."""
    from eagle_datagen.generation.release import assemble_release
    from eagle_datagen.storage.output_root import open_output_root
    from eagle_datagen.storage.releases import release_key
    from eagle_datagen_airflow.runs import sanitize

    release_id = sanitize(dag_run.run_id)
    with object_store(params["aws_conn_id"]):
        root = open_output_root(params["output"])
        release = assemble_release(
            root, release_id, categories, dag_run.run_after.isoformat(), params["draft_vocab_size"]
        )
    log.info(
        "release %s: %d samples of %d categories from %d run(s)",
        release_id,
        release["counts"]["samples"],
        len(release["categories"]),
        len(release["runs"]),
    )
    asset_event.extra = {"output": params["output"], "release_id": release_id, "release": release_key(release_id)}
    return {"release_id": release_id, "release": release_key(release_id), "counts": release["counts"]}


def export_release(release: dict[str, Any], params: Mapping[str, Any], recipe: Any = None) -> list[dict[str, Any]]:
    """The release in each trainer format and training mix the params ask for (the mixes: `recipe`'s), stored
    under exports/release=<id>/<format>/ (the `all` mix) and exports/release=<id>/mix=<name>/<format>/."""
    from eagle_datagen.export.mix import recipe_mix
    from eagle_datagen.export.rows import SeqLimit
    from eagle_datagen.export.stage import ExportOptions
    from eagle_datagen.export.upload import export_into_root
    from eagle_datagen.sources.recipe import ALL_MIX
    from eagle_datagen.storage.output_root import open_output_root

    stored = []
    with object_store(params["aws_conn_id"]):
        root = open_output_root(params["output"])
        for name in params.get("export_mixes") or [ALL_MIX]:
            try:
                mix = recipe_mix(recipe, name)
            except ConfigError as exc:
                raise AirflowFailException(str(exc)) from None
            for fmt in params["export_formats"]:
                options = ExportOptions(
                    format=fmt,
                    to="",
                    release_id=release["release_id"],
                    limit=SeqLimit(params["export_max_seq_len"]),
                    command=f"release DAG export of {release['release_id']} as {fmt}, mix {name}",
                    mix=mix,
                    front_end="airflow",
                )
                try:
                    result = export_into_root(root, options)
                except ConfigError as exc:
                    raise AirflowFailException(str(exc)) from None
                log.info(
                    "release %s as %s, mix %s: %d rows at %s",
                    release["release_id"],
                    fmt,
                    name,
                    result["rows"],
                    result["location"],
                )
                stored.append(result | {"mix": name})
    if not stored:
        log.info("no export_formats asked: nothing exported")
    return stored
