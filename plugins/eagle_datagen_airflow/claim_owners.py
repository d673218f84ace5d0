"""Which DAG run owns a claim; releasing the claims of DAG runs that have ended; waiting for those still running.

The plan task notes its DAG run beside its claim (`claims/run=<id>.airflow.json`: dag id and DAG run id).
When a later run finds its samples claimed, the plan task asks Airflow (the task SDK's execution API, never
the metadata DB) for the state of each holder's DAG run:
- one that is no longer running (failed, marked failed by someone, or a success whose claims nothing reads
  any more) has provably ended: its claims are withdrawn at once, with a note of who took them over
  (generation/takeover.py: that run, cleared and resumed later, then generates nothing), and this run takes
  its samples over;
- one still running, whose claim showed life within a few heartbeats (`live`: a backfill's other run, or one
  killed moments ago that Airflow has not noticed yet), is waited for: the plan task is rescheduled every
  heartbeat interval (no worker slot is held meanwhile) and looks again, cheaply, without planning
  (`still_waiting_for`), until the holder has ended, published, gone silent or lost its claim (then it plans
  again: takes over, or finds everything published, or fails naming a silent holder), for at most the claim
  TTL; then it fails naming the holders (`wait_or_fail`). It never ends green with nothing published while
  another run still holds the samples.
A holder with no note (a command-line run) or whose state cannot be read is judged by its heartbeat and the
TTL alone.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)
RUNNING = ("queued", "running")  # DagRunState values of a DAG run that may still write under its run id


def owner_key(run_id: str) -> str:
    return f"claims/run={run_id}.airflow.json"


def waiting_key(run_id: str) -> str:
    """The holders a waiting plan task waits for (withdrawn with the run's claims)."""
    return f"claims/run={run_id}.waiting.json"


def note_owner(output: str, run_id: str, dag_run: Any) -> None:
    from eagle_datagen.storage.output_root import open_output_root

    note = {"dag_id": dag_run.dag_id, "dag_run_id": dag_run.run_id}
    open_output_root(output).write_bytes(owner_key(run_id), json.dumps(note).encode())


def airflow_dagrun_state(dag_id: str, dag_run_id: str) -> str:
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    return str(RuntimeTaskInstance.get_dagrun_state(dag_id, dag_run_id))


def _owner_state(root: Any, run_id: str, state_of: Callable[[str, str], str]) -> tuple[dict[str, str], str] | None:
    """(its note, the state of its DAG run) for a holder that is an Airflow run whose state Airflow tells."""
    try:
        note = json.loads(root.read_bytes(owner_key(run_id)))
    except FileNotFoundError:
        return None  # not an Airflow run's claim: the heartbeat and the TTL judge it
    try:
        state = state_of(note["dag_id"], note["dag_run_id"])
    except Exception as exc:  # a DAG run deleted, the API unreachable: not proof that it ended
        log.warning("run %s: the state of DAG run %s is unknown (%s): its claim stands", run_id, note, exc)
        return None
    return note, state.rsplit(".", 1)[-1].lower()  # a DagRunState member or its value


def release_ended_owners(
    output: str,
    holders: Mapping[str, Mapping[str, Any]],
    taker: str,
    state_of: Callable[[str, str], str] = airflow_dagrun_state,
) -> list[str]:
    """Withdraw the claims of the holders whose DAG run is no longer running, noting that run `taker` takes
    their samples over; the run ids released."""
    from eagle_datagen.generation.claims import withdraw_claim
    from eagle_datagen.generation.takeover import note_takeover
    from eagle_datagen.storage.output_root import open_output_root

    root = open_output_root(output)
    released = []
    for run_id in sorted(holders):
        owner = _owner_state(root, run_id, state_of)
        if owner is None or owner[1] in RUNNING:
            continue
        note, state = owner
        note_takeover(root, run_id, taker, f"its DAG run {note['dag_run_id']} of {note['dag_id']} had ended: {state}")
        withdraw_claim(root, run_id)
        log.warning(
            "run %s: its DAG run %s of %s has ended (%s): its claims are released, run %s takes its samples",
            run_id,
            note["dag_run_id"],
            note["dag_id"],
            state,
            taker,
        )
        released.append(run_id)
    return released


def note_waiting(output: str, run_id: str, holders: Mapping[str, Any]) -> None:
    from eagle_datagen.storage.output_root import open_output_root

    open_output_root(output).write_bytes(waiting_key(run_id), json.dumps({"holders": sorted(holders)}).encode())


def stop_waiting(output: str, run_id: str) -> None:
    from eagle_datagen.storage.output_root import open_output_root

    open_output_root(output).delete(waiting_key(run_id))


def still_waiting_for(
    config: Mapping[str, Any], servers: list[Mapping[str, Any]], state_of: Callable[[str, str], str]
) -> dict[str, dict[str, Any]] | None:
    """The holders this run waits for while nothing has changed: every one still claims its samples, is live,
    is not published and (an Airflow run) is still running. None when any of that changed, or when this run
    waits for nothing (no note): then it plans again."""
    from eagle_datagen.generation.claims import claimed_sample_ids
    from eagle_datagen.profile import load_profile
    from eagle_datagen.storage.manifest import manifest_run_ids
    from eagle_datagen.storage.output_root import open_output_root

    root = open_output_root(config["output"])
    key = waiting_key(config["run_id"])
    try:
        waited = json.loads(root.read_bytes(key))["holders"]
    except (FileNotFoundError, ValueError, KeyError):
        return None
    root.write_bytes(key, json.dumps({"holders": waited}).encode())  # its modification time: the store's now
    now = root.list_modified(key)[key]
    model = config.get("model") or load_profile(config["profile"]).model
    weight_version = servers[0].get("weight_version") if config.get("per_weight_version") else None
    holders: dict[str, dict[str, Any]] = {}
    published = set(manifest_run_ids(root))
    claimed_sample_ids(root, now, config["claim_ttl_s"], model, weight_version, published, config["run_id"], holders)
    for run_id in waited:
        holder = holders.get(run_id)
        if holder is None or not holder["live"]:
            return None
        owner = _owner_state(root, run_id, state_of)
        if owner is not None and owner[1] not in RUNNING:
            return None
    return {run_id: holders[run_id] for run_id in waited}


def wait_or_fail(reason: str, waiting_since: datetime | None, ttl_s: float) -> None:
    """Reschedule the plan task a heartbeat interval from now (it waits for live holders), or, once it has
    waited the claim TTL, fail it with `reason` (the holders, their last sign of life, their claims' expiry)."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowRescheduleException

    from eagle_datagen.generation.claims import heartbeat_interval_s

    waited_s = 0.0 if waiting_since is None else time.time() - waiting_since.timestamp()
    if waited_s >= ttl_s:
        raise AirflowFailException(
            f"{reason}; waited {waited_s / 60:.0f} min for the holding runs, which are still live: this run "
            "published nothing (trigger it again once they have published, or mark their DAG runs failed for "
            "this one to take their samples over)"
        )
    interval = heartbeat_interval_s(ttl_s)
    log.warning("waiting for live runs that hold this run's samples (looking again in %.0f s): %s", interval, reason)
    raise AirflowRescheduleException(datetime.fromtimestamp(time.time() + interval, UTC))
