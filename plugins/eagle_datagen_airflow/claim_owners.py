"""Which DAG run owns a claim, and releasing the claims of DAG runs that have ended.

The plan task notes its DAG run beside its claim (`claims/run=<id>.airflow.json`: dag id and DAG run id).
When a later run finds its samples claimed, the plan task asks Airflow (the task SDK's execution API, never
the metadata DB) for the state of each holder's DAG run: one that has ended (failed, or marked failed by
someone, or a success whose claims nothing reads any more) holds nothing, and its claims are withdrawn at
once instead of after the TTL of its last heartbeat. A holder with no note (a command-line run) or whose
state cannot be read is left to the heartbeat and the TTL.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger(__name__)
ENDED = ("failed", "success")


def owner_key(run_id: str) -> str:
    return f"claims/run={run_id}.airflow.json"


def note_owner(output: str, run_id: str, dag_run: Any) -> None:
    from eagle_datagen.storage.output_root import open_output_root

    note = {"dag_id": dag_run.dag_id, "dag_run_id": dag_run.run_id}
    open_output_root(output).write_bytes(owner_key(run_id), json.dumps(note).encode())


def _airflow_dagrun_state(dag_id: str, dag_run_id: str) -> str:
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    return str(RuntimeTaskInstance.get_dagrun_state(dag_id, dag_run_id))


def release_ended_owners(
    output: str,
    holders: Mapping[str, Mapping[str, Any]],
    state_of: Callable[[str, str], str] = _airflow_dagrun_state,
) -> list[str]:
    """Withdraw the claims of the holders whose DAG run has ended; the run ids released."""
    from eagle_datagen.generation.claims import withdraw_claim
    from eagle_datagen.storage.output_root import open_output_root

    root = open_output_root(output)
    released = []
    for run_id in sorted(holders):
        try:
            note = json.loads(root.read_bytes(owner_key(run_id)))
        except FileNotFoundError:
            continue  # not an Airflow run's claim: the heartbeat and the TTL judge it
        try:
            state = state_of(note["dag_id"], note["dag_run_id"])
        except Exception as exc:  # a DAG run deleted, the API unreachable: not proof that it ended
            log.warning("run %s: the state of DAG run %s is unknown (%s): its claim stands", run_id, note, exc)
            continue
        state = state.rsplit(".", 1)[-1].lower()  # a DagRunState member or its value
        if state in ENDED:
            withdraw_claim(root, run_id)
            log.warning(
                "run %s: its DAG run %s of %s has ended (%s): its claims are released, this run takes its samples",
                run_id,
                note["dag_run_id"],
                note["dag_id"],
                state,
            )
            released.append(run_id)
    return released
