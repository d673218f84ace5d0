"""What the run learned about its endpoints, under the output root: ejections, stops and answer tallies.

`checkpoints/run=<id>/endpoints/` holds small immutable JSON files (local folder or S3 alike):
- `ejection-<stamp>.json`, written the moment the content breaker takes an endpoint out, so another shard
  task of the same run (on any worker) leaves it out from its start, and the run's report lists it;
- `stop-<stamp>.json`, written when the run stopped early (every endpoint out, or a setup signature): the
  user fixes the deployment and reruns, so the ejections before the newest stop no longer hold;
- `leftout-<stamp>.json`, written by a preflight that left endpoints out of the run (they failed a check),
  each with the reason;
- `tokcheck-<stamp>.json`, written by a preflight with the tokenizer check: how each endpoint it let into the run
  had its tokenizer compared with the client's (messages, prompt, no_tokenizer, unchecked: tokenizer_agreement.py),
  and the modes (thinking, instant) its canaries were rendered in;
- `tally-<stamp>.json`, one per invocation (a command-line run, a shard task), rewritten as it goes and at
  its end: answers per endpoint, quarantined and retried reasons, and the server-fault answers kept as
  evidence (the bad answers that never became rows).
`endpoint_report` folds them into the run's per-endpoint report at publish time.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import Counter
from typing import Any

from eagle_datagen.inference.content_breaker import Ejection
from eagle_datagen.storage.output_root import OutputRoot

log = logging.getLogger(__name__)


def endpoints_prefix(run_id: str) -> str:
    return f"checkpoints/run={run_id}/endpoints/"


def _stamp() -> str:
    return f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"


def _records(root: OutputRoot, run_id: str, kind: str) -> list[tuple[str, dict[str, Any]]]:
    """(key, record) of one kind, oldest first; an unreadable record (a write cut short) is skipped."""
    prefix = endpoints_prefix(run_id) + f"{kind}-"
    found = []
    for key in sorted(root.list(prefix)):
        try:
            found.append((key, json.loads(root.read_bytes(key))))
        except ValueError:
            log.warning("skipping the unreadable endpoint record %s", key)
    return found


class EndpointJournal:
    """The records of one invocation."""

    def __init__(self, root: OutputRoot, run_id: str) -> None:
        self.root = root
        self.run_id = run_id
        self.tally_key = endpoints_prefix(run_id) + f"tally-{_stamp()}.json"

    def _write(self, key: str, record: dict[str, Any]) -> None:
        self.root.write_bytes(key, json.dumps(record, indent=1).encode())

    def record_ejection(self, ejection: Ejection) -> str:
        key = endpoints_prefix(self.run_id) + f"ejection-{_stamp()}.json"
        self._write(key, ejection.to_json())
        return key

    def record_stop(self, message: str, endpoints: list[str]) -> None:
        self._write(
            endpoints_prefix(self.run_id) + f"stop-{_stamp()}.json", {"message": message, "endpoints": endpoints}
        )

    def record_tally(self, tally: dict[str, Any]) -> None:
        self._write(self.tally_key, tally)


def record_left_out(root: OutputRoot, run_id: str, left_out: list[dict[str, str]], by: str) -> None:
    """Endpoints a preflight left out of the run ({url, reason} each)."""
    record = {"by": by, "at": time.time(), "endpoints": left_out}
    root.write_bytes(endpoints_prefix(run_id) + f"leftout-{_stamp()}.json", json.dumps(record, indent=1).encode())


def left_out_endpoints(root: OutputRoot, run_id: str) -> list[dict[str, Any]]:
    """Every endpoint a preflight of the run left out, once per (url, reason), with when it was last so."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for _, raw in _records(root, run_id, "leftout"):
        for item in raw.get("endpoints", []):
            found[(item["url"], item["reason"])] = item | {"by": raw.get("by"), "at": raw.get("at")}
    return list(found.values())


def record_tokenizer_check(
    root: OutputRoot, run_id: str, checks: dict[str, str], by: str, modes: tuple[str, ...] = ()
) -> None:
    """How a preflight checked the tokenizer of each endpoint it let into the run ({url: comparison}), and in which
    modes the canaries were rendered for it (thinking, instant: the modes the run sends)."""
    record = {"by": by, "at": time.time(), "endpoints": checks, "modes": list(modes)}
    root.write_bytes(endpoints_prefix(run_id) + f"tokcheck-{_stamp()}.json", json.dumps(record, indent=1).encode())


# the weakest comparison an endpoint had over the run's preflights is what its data can claim
CHECK_STRENGTH = ("unchecked", "no_tokenizer", "prompt", "messages")


def tokenizer_checks(root: OutputRoot, run_id: str) -> dict[str, str]:
    """Per endpoint, the weakest tokenizer comparison any preflight of the run made (CHECK_STRENGTH)."""
    def strength(check: str) -> int:  # a comparison this code does not know counts as the weakest
        return CHECK_STRENGTH.index(check) if check in CHECK_STRENGTH else -1

    weakest: dict[str, str] = {}
    for _, raw in _records(root, run_id, "tokcheck"):
        for url, check in raw.get("endpoints", {}).items():
            weakest[url] = min(weakest.get(url, check), check, key=strength)
    return dict(sorted(weakest.items()))


def tokenizer_check_modes(root: OutputRoot, run_id: str) -> list[str]:
    """The modes every preflight of the run compared the canaries in (a record from before modes were recorded
    rendered thinking alone); empty when no preflight compared any."""
    found: set[str] | None = None
    for _, raw in _records(root, run_id, "tokcheck"):
        modes = set(raw.get("modes", ["thinking"]))
        found = modes if found is None else found & modes
    return sorted(found or ())


def live_ejections(root: OutputRoot, run_id: str) -> list[tuple[str, Ejection]]:
    """(record key, ejection) of the run's ejections since its newest stop: endpoints that stay out."""
    stops = _records(root, run_id, "stop")
    newest_stop = stops[-1][0].rsplit("/", 1)[1].removeprefix("stop-") if stops else ""
    live = []
    for key, raw in _records(root, run_id, "ejection"):
        if key.rsplit("/", 1)[1].removeprefix("ejection-") > newest_stop:
            live.append((key, Ejection.from_json(raw)))
    return live


def endpoint_report(root: OutputRoot, run_id: str) -> dict[str, Any]:
    """Every endpoint of the run over all its invocations: answers, valid, quarantined and retried reasons,
    its ejections, what the liveness monitor found there and how it watched it (`watched_by`: "v1/loads" for
    the server's count, "health_generate" for probes; empty: never watched); plus the run's stops and the
    evidence answers."""
    endpoints: dict[str, dict[str, Any]] = {}

    def entry(url: str) -> dict[str, Any]:
        return endpoints.setdefault(
            url,
            {
                "answers": 0,
                "valid": 0,
                "quarantined": Counter(),
                "server_faults": Counter(),
                "ejections": [],
                "liveness": Counter(),
                "watched_by": set(),  # how lost requests were looked for there (liveness.py: v1/loads, probes)
            },
        )

    evidence = []
    tallies = _records(root, run_id, "tally")
    for _, tally in tallies:
        for url, counts in tally.get("endpoints", {}).items():
            e = entry(url)
            e["answers"] += counts["answers"]
            e["valid"] += counts["valid"]
            e["quarantined"].update(counts["quarantined"])
            e["server_faults"].update(counts["server_faults"])
            evidence.extend({"endpoint": url} | item for item in counts.get("evidence", []))
        for url, found in (tally.get("liveness") or {}).items():  # lost requests found, hedges (liveness.py)
            e = entry(url)
            e["liveness"].update({k: v for k, v in found.items() if type(v) is int})  # counts, not flags or lists
            e["watched_by"].update(found.get("watched_by") or [])
    for _, raw in _records(root, run_id, "ejection"):
        entry(raw["endpoint"])["ejections"].append(raw)
    for e in endpoints.values():
        e["quarantined"], e["server_faults"] = dict(e["quarantined"]), dict(e["server_faults"])
        e["liveness"], e["watched_by"] = dict(e["liveness"]), sorted(e["watched_by"])
    return {
        "endpoints": dict(sorted(endpoints.items())),
        "stops": [raw for _, raw in _records(root, run_id, "stop")],
        "left_out": left_out_endpoints(root, run_id),
        "tokenizer_check": tokenizer_checks(root, run_id),
        "tokenizer_check_modes": tokenizer_check_modes(root, run_id),
        "invocations": len(tallies),
        "policies": [tally.get("policy") for _, tally in tallies if tally.get("policy")],
        "evidence": evidence,
    }
