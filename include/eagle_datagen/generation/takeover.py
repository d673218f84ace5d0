"""A run whose claim was withdrawn generates nothing more: another run may have taken its samples over.

An orchestrator that finds a run's samples claimed by a run that has provably ended (its Airflow DAG run is no
longer running: plugins/eagle_datagen_airflow/claim_owners.py) withdraws that claim, so that the new run takes
the samples over, and notes who took them (`claims/taken-over/run=<id>.json`: the run that took over, when,
why). A run generates only while its claim stands (`check_claim_stands`, before every generation step), so the
ended run, cleared and resumed in Airflow afterwards, stops with one line naming the run that took over instead
of generating and publishing the same samples a second time. A run that never claimed (a dry run) is not
checked.
"""

from __future__ import annotations

import json
import time
from typing import Any

from eagle_datagen.errors import DataGenError
from eagle_datagen.generation.claims import claim_key
from eagle_datagen.storage.output_root import OutputRoot


class ClaimWithdrawn(DataGenError):
    """The run's claim is gone (taken over by another run, or withdrawn): it must not generate its plan."""


def takeover_key(run_id: str) -> str:
    return f"claims/taken-over/run={run_id}.json"


def note_takeover(root: OutputRoot, run_id: str, by: str, why: str) -> None:
    """Written before the claim is withdrawn, so a resumed run can say who holds its samples now."""
    note = {"run_id": run_id, "by": by, "at": time.time(), "why": why}
    root.write_bytes(takeover_key(run_id), json.dumps(note).encode())


def _takeover(root: OutputRoot, run_id: str) -> dict[str, Any] | None:
    try:
        return json.loads(root.read_bytes(takeover_key(run_id)))
    except (FileNotFoundError, ValueError):
        return None


def check_claim_stands(root: OutputRoot, run_id: str) -> None:
    if claim_key(run_id) in root.list(claim_key(run_id)):
        return
    note = _takeover(root, run_id)
    if note is not None:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(note["at"]))
        raise ClaimWithdrawn(
            f"run {run_id} generates nothing: run {note['by']} took its samples over at {when} ({note['why']}); "
            "they are that run's to publish. Trigger a new run for anything still missing"
        )
    raise ClaimWithdrawn(
        f"run {run_id} generates nothing: its claim {claim_key(run_id)} was withdrawn (the run was refused, or "
        "another run took its samples over). Trigger a new run for anything still missing"
    )
