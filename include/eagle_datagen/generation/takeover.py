"""Taking over the claims of a run that has ended, and a run whose claim was withdrawn generating nothing more.

An incremental run that finds samples claimed by another run asks whether that run still runs (`claims.HolderCheck`:
an orchestrator answers from its own records, e.g. plugins/eagle_datagen_airflow/claim_owners.py for a DAG run:
running while its DAG run runs or any task of it is queued, scheduled, running, up for retry or reschedule,
deferred or restarting, or a process of it still beats; ended otherwise). Its answer outranks the claim's age: a
holder that still runs keeps its samples however long it has been quiet (shards waiting in a pool), and one that
has ended is taken over at once. A holder the check cannot tell about (a command-line run, a state nobody can
read) keeps its samples until it has shown no sign of life for the claim TTL (claims.py), and is taken over then.

Taking over (`take_over`, under the plan lock, by a run that plans some of the holder's samples itself, whatever
else it plans) notes who took the samples (`claims/taken-over/run=<id>.json`: the run that took over, when, why)
and withdraws the holder's claim. A run generates only while its claim stands (`check_claim_stands`, before every
generation step and before publishing), so the ended run, cleared and resumed afterwards, stops with one line
naming the run that took over instead of generating and publishing the same samples a second time. A run that
never claimed (a dry run) is not checked.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from eagle_datagen.errors import DataGenError
from eagle_datagen.generation.claims import claim_key, withdraw_claim
from eagle_datagen.storage.output_root import OutputRoot

log = logging.getLogger(__name__)


class ClaimWithdrawn(DataGenError):
    """The run's claim is gone (taken over by another run, or withdrawn): it must not generate its plan."""


def takeover_key(run_id: str) -> str:
    return f"claims/taken-over/run={run_id}.json"


def note_takeover(root: OutputRoot, run_id: str, by: str, why: str) -> None:
    """Written before the claim is withdrawn, so a resumed run can say who holds its samples now."""
    note = {"run_id": run_id, "by": by, "at": time.time(), "why": why}
    root.write_bytes(takeover_key(run_id), json.dumps(note).encode())


def take_over(root: OutputRoot, run_id: str, by: str, why: str) -> None:
    """Run `by` takes the samples of the ended run `run_id` over: noted, then its claim withdrawn."""
    note_takeover(root, run_id, by, why)
    withdraw_claim(root, run_id)
    log.warning("run %s has ended (%s): its claims are released, run %s takes its samples over", run_id, why, by)


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
