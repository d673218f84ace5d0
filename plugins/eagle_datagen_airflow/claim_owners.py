"""Which DAG run owns a claim, whether it still runs, and waiting for those that do.

The plan task notes its DAG run beside its claim (`claims/run=<id>.airflow.json`: dag id and DAG run id). When a
later run finds samples claimed, its plan asks `AirflowHolders` (the package's `HolderCheck`,
eagle_datagen/generation/claims.py) about each holder, through the task SDK's execution API (never the
metadata DB):
- it still runs while its DAG run is queued or running, or any task instance of it is in a state that may still
  run (`LIVE_TASK_STATES`: a shard waiting for a slot of the `sglang` pool is `scheduled`, one backing off
  `up_for_retry`), or a process of it still beats (a task marked failed whose process has not been stopped yet:
  heartbeat.py). Its claims then hold however long it has been quiet: shards waiting in a pool keep their samples;
- otherwise it has ended (failed, marked failed, a success whose claims nothing reads any more): the planning run
  takes over the samples of it that it plans, at once, whatever else it plans (a note says who took them: that run,
  cleared and resumed later, then generates nothing).
A holder with no note (a command-line run) or whose state cannot be read is judged by its heartbeats and the TTL.

A run all of whose unpublished samples are held waits for holders that still run: the plan task is rescheduled
every heartbeat interval (no worker slot is held meanwhile) and looks again, cheaply, without planning
(`still_waiting_for`), until a holder has ended, published, gone silent or lost its claim (then it plans again:
takes over, finds everything published, or fails naming a silent holder), for at most the claim TTL; then it fails
naming the holders (`wait_or_fail`). It never ends green with nothing published while another run holds the
samples.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)
RUNNING = ("queued", "running")  # DagRunState values of a DAG run that may still write under its run id
# TaskInstanceState values of a task that runs or may run again without anyone clearing it
LIVE_TASK_STATES = ("running", "queued", "scheduled", "up_for_retry", "up_for_reschedule", "deferred", "restarting")


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


def airflow_task_states(dag_id: str, dag_run_id: str) -> dict[str, str | None]:
    """The state of every task instance of the DAG run (mapped ones as `<task>_<index>`)."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    return dict(RuntimeTaskInstance.get_task_states(dag_id, run_ids=[dag_run_id]).get(dag_run_id, {}))


def _state(value: Any) -> str:
    """A DagRunState or TaskInstanceState member, or its value, as its lower-case value ("none": no state yet)."""
    return str(value).rsplit(".", 1)[-1].lower() if value is not None else "none"


@dataclass
class AirflowHolders:
    """Whether the DAG run holding a claim still runs (the package's `HolderCheck`)."""

    dagrun_state: Callable[[str, str], str] = airflow_dagrun_state
    task_states: Callable[[str, str], Mapping[str, Any]] = airflow_task_states

    def __call__(self, root: Any, run_id: str, now: float, live_window_s: float) -> Any:
        from eagle_datagen.generation.claims import HolderVerdict
        from eagle_datagen.generation.heartbeat import describe_processes, live_processes

        try:
            note = json.loads(root.read_bytes(owner_key(run_id)))
        except FileNotFoundError:
            return None  # not an Airflow run's claim: its heartbeats and the TTL judge it
        dag_run = f"its DAG run {note['dag_run_id']} of {note['dag_id']}"
        try:
            state = _state(self.dagrun_state(note["dag_id"], note["dag_run_id"]))
            tasks = {task: _state(s) for task, s in self.task_states(note["dag_id"], note["dag_run_id"]).items()}
        except Exception as exc:  # noqa: BLE001 - a DAG run deleted, the API unreachable: not proof that it ended
            log.warning("run %s: the state of %s is unknown (%s): its claim stands", run_id, dag_run, exc)
            return None
        if state in RUNNING:
            return HolderVerdict(True, f"{dag_run} is {state}")
        live = {task: s for task, s in sorted(tasks.items()) if s in LIVE_TASK_STATES}
        if live:
            listed = ", ".join(f"{task} {s}" for task, s in list(live.items())[:5])
            return HolderVerdict(True, f"{dag_run} is {state}, but not every task of it has ended: {listed}")
        processes = live_processes(root, run_id, now, live_window_s)
        if processes:  # marked failed, its process not stopped yet: it may still generate and publish
            working = describe_processes(processes)
            return HolderVerdict(True, f"{dag_run} is {state}, but a process of it still works: {working}")
        return HolderVerdict(False, f"{dag_run} had ended: {state}, and no task or process of it runs")


def note_waiting(output: str, run_id: str, holders: Mapping[str, Any]) -> None:
    from eagle_datagen.storage.output_root import open_output_root

    open_output_root(output).write_bytes(waiting_key(run_id), json.dumps({"holders": sorted(holders)}).encode())


def stop_waiting(output: str, run_id: str) -> None:
    from eagle_datagen.storage.output_root import open_output_root

    open_output_root(output).delete(waiting_key(run_id))


def still_waiting_for(
    config: Mapping[str, Any], servers: list[Mapping[str, Any]], check: Any
) -> dict[str, dict[str, Any]] | None:
    """The holders this run waits for while nothing has changed: every one still claims its samples, is not
    published and still runs (`check` says so, or it is live by its heartbeats). None when any of that changed,
    or when this run waits for nothing (no note): then it plans again (and takes over a holder that ended)."""
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
    ttl_s = config["claim_ttl_s"]
    claimed_sample_ids(root, now, ttl_s, model, weight_version, published, config["run_id"], holders, check)
    if any(run_id not in holders or not holders[run_id]["live"] for run_id in waited):
        return None
    return {run_id: holders[run_id] for run_id in waited}


def wait_or_fail(reason: str, waiting_since: datetime | None, ttl_s: float) -> None:
    """Reschedule the plan task a heartbeat interval from now (it waits for holders that still run), or, once it
    has waited the claim TTL, fail it with `reason` (the holders, their last sign of life, why they still run)."""
    from eagle_datagen.generation.claims import heartbeat_interval_s
    from eagle_datagen_airflow.compat import AirflowFailException, AirflowRescheduleException

    waited_s = 0.0 if waiting_since is None else time.time() - waiting_since.timestamp()
    if waited_s >= ttl_s:
        waited = f"{waited_s / 60:.0f} min" if waited_s >= 120 else f"{waited_s:.0f} s"
        raise AirflowFailException(
            f"{reason}; waited {waited} for the holding runs, which are still live: this run "
            "published nothing (trigger it again once they have published, or mark their DAG runs failed for "
            "this one to take their samples over)"
        )
    interval = heartbeat_interval_s(ttl_s)
    log.warning("waiting for live runs that hold this run's samples (looking again in %.0f s): %s", interval, reason)
    raise AirflowRescheduleException(datetime.fromtimestamp(time.time() + interval, UTC))
