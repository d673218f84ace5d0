"""Claims: the samples a run has planned and not published yet, which concurrent incremental runs leave alone.

`claims/run=<id>.parquet` lists a run's planned sample ids (one string column; the run's model, weight
version and categories in the schema metadata), so reading a claim never touches prompt token ids. Every
run writes its claim when it plans, before its plan's shards (an incremental run while it holds the plan
lock). An incremental run treats as existing the samples of published manifests (the catalog) and of
every claim whose run is in flight: it has no manifest yet, and it still runs. Whether it runs is first its
orchestrator's word (`HolderCheck`, below; takeover.py: a DAG run runs while any task of it may still run, shards
waiting in a pool included, however long it has been quiet); where nobody can tell (a command-line run), it
runs while some object of it was modified within the TTL (the claim, its plan, a checkpoint chunk, a data or
quarantine shard, a manifest artifact written by finalize) or one of its processes beat
(`claims/run=<id>.heartbeat.<process>`, rewritten every `heartbeat_interval_s(ttl)` for as long as the process
works for the run: heartbeat.py), so that a run's liveness does not hang on how often it checkpoints. A run
that has ended (its orchestrator says so; or its newest object is older than the TTL: its process died, or it
failed for good) holds nothing: the next run that plans its samples takes them over (takeover.py). A holder is
`live` when it still runs by its orchestrator's word or showed life within `LIVE_HEARTBEATS` heartbeat
intervals; one silent for longer, but not yet for the TTL, is `silent`: probably dead, not yet provably so
(incremental.py and the orchestrators say what to do about each).

Every time compared is the store's: objects' modification times against the plan lock's, all recorded by
the store when it wrote them, so the clocks of the workers do not enter (the time_ns in checkpoint chunk
names is a worker's clock, and is not used here).
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from eagle_datagen import settings
from eagle_datagen.storage.output_root import OutputRoot
from eagle_datagen.storage.parquet import read_parquet_bytes
from eagle_datagen.storage.sample_id_set import SampleIdSet, digests_from_hex

log = logging.getLogger(__name__)
CLAIM_METADATA = b"eagle_datagen.claim"
# A live run writes every few seconds while samples finish (checkpoint chunks, default every 2 s). Its
# longest quiet spells: shards waiting for a slot of the `sglang` pool, the first samples of a shard (32k
# output tokens at 30 tokens/s is about 18 minutes) and task retries backing off (up to 15 minutes). An hour
# outlasts these, and a run that died frees its samples for the next run the same day.
DEFAULT_CLAIM_TTL_S = settings.CLAIM_TTL_S  # declared in settings.py
# A run's working process rewrites its heartbeat every minute (a quarter of the TTL, when that is shorter: tests);
# a holder that missed three in a row is silent, not live.
HEARTBEAT_EVERY_S = 60.0
LIVE_HEARTBEATS = 3


def heartbeat_interval_s(ttl_s: float) -> float:
    return min(HEARTBEAT_EVERY_S, ttl_s / 4)


@dataclass(frozen=True)
class Claim:
    run_id: str
    model: str
    weight_version: str | None
    categories: list[str]
    sample_ids: Sequence[str] | pa.StringArray  # a planner writes an Arrow array (`hex_strings`): the same file


def claim_key(run_id: str) -> str:
    return f"claims/run={run_id}.parquet"


def write_claim(root: OutputRoot, claim: Claim) -> None:
    """Rewritten, not written once: a plan step retried before its plan was stored claims afresh."""
    meta = {"run_id": claim.run_id, "model": claim.model, "weight_version": claim.weight_version}
    schema = pa.schema(
        [("sample_id", pa.string())], metadata={CLAIM_METADATA: json.dumps(meta | {"categories": claim.categories})}
    )
    buffer = io.BytesIO()
    pq.write_table(pa.table({"sample_id": claim.sample_ids}, schema=schema), buffer, compression="zstd")
    root.write_bytes(claim_key(claim.run_id), buffer.getvalue())


def heartbeat_key(run_id: str, process: str = "") -> str:
    """Where the run's processes beat (a prefix of every one), or where one process does (heartbeat.py)."""
    return f"claims/run={run_id}.heartbeat" + (f".{process}" if process else "")


def withdraw_claim(root: OutputRoot, run_id: str) -> None:
    """For a run that will not generate its plan: its samples are free at once, not after the TTL."""
    for key in [claim_key(run_id), *root.list(f"claims/run={run_id}.")]:  # its heartbeat, an orchestrator's note
        root.delete(key)


def read_claim(root: OutputRoot, run_id: str) -> Claim:
    """The claim with its ids as Python strings (`_read_claim_ids` keeps them as an Arrow array)."""
    claim = _read_claim_ids(root, run_id)
    return Claim(claim.run_id, claim.model, claim.weight_version, claim.categories, claim.sample_ids.to_pylist())


def _read_claim_ids(root: OutputRoot, run_id: str) -> Claim:
    table = read_parquet_bytes(root.read_bytes(claim_key(run_id)))
    meta = json.loads(table.schema.metadata[CLAIM_METADATA])
    ids = table.column(0).combine_chunks()
    return Claim(meta["run_id"], meta["model"], meta["weight_version"], meta["categories"], ids)


def _activity_prefixes(run_id: str, categories: list[str]) -> Iterator[str]:
    """Where a run writes after it plans, most active first (the listing stops at the first recent one)."""
    yield heartbeat_key(run_id)
    yield f"checkpoints/run={run_id}/"
    yield f"plans/run={run_id}/"
    yield f"manifests/run={run_id}."
    for category in categories:
        yield f"data/category={category}/run={run_id}/"
        yield f"quarantine/category={category}/run={run_id}/"


def _active_since(root: OutputRoot, prefixes: Iterator[str], horizon: float) -> bool:
    return any(t >= horizon for prefix in prefixes for t in root.list_modified(prefix).values())


def _last_active(root: OutputRoot, prefixes: Iterator[str], claimed_at: float) -> float:
    return max([claimed_at, *(t for prefix in prefixes for t in root.list_modified(prefix).values())])


@dataclass(frozen=True)
class HolderVerdict:
    """Whether the run holding a claim still runs, and why (for the log and the takeover note)."""

    running: bool  # True: it keeps its samples whatever their age; False: it has ended, take them over
    why: str  # "its DAG run ... is running", "its task generate_shard_3 is scheduled", "... had ended: failed"


class HolderCheck(Protocol):
    """An orchestrator's answer for a run that holds a claim; None when it cannot tell (not its run, or its
    records cannot be read): the claim's age decides then. `now` is the store's time, `live_window_s` how
    recent a process's beat must be for it to count as running (heartbeat.live_processes)."""

    def __call__(self, root: OutputRoot, run_id: str, now: float, live_window_s: float) -> HolderVerdict | None: ...


@dataclass(frozen=True)
class Ended:
    """A claim whose run has ended (its orchestrator says so, or no sign of life for the TTL): free to take over."""

    why: str
    sample_ids: SampleIdSet


def live_window_s(ttl_s: float) -> float:
    """How recent a sign of life must be for its run to count as live (a process beating now)."""
    return LIVE_HEARTBEATS * heartbeat_interval_s(ttl_s)


def claimed_sample_ids(
    root: OutputRoot,
    now: float,
    ttl_s: float,
    model: str,
    weight_version: str | None,
    published: Container[str],
    own_run_id: str,
    holders: dict[str, dict[str, Any]] | None = None,
    check: HolderCheck | None = None,
    ended: dict[str, Ended] | None = None,
) -> SampleIdSet:
    """The sample ids that runs in flight at `now` (the store's time) have claimed: claims of `model` (and
    `weight_version`, when given) whose run is not in `published` and still runs: `check` (an orchestrator's
    records, takeover.py) says it runs, or, where it cannot tell, the run showed life within `ttl_s`. `holders`,
    when given, gets each such run's claimed samples, last sign of life, when its claim expires (store times; None
    while its orchestrator says it runs), whether it is live (running, or showed life within LIVE_HEARTBEATS
    heartbeat intervals) and why it runs, for a message that says which run holds what and until when. `ended`,
    when given, gets each claim whose run has ended, with why and its samples, for the caller to take over."""
    horizon = now - ttl_s
    found = []
    runs = 0
    for key, claimed_at in root.list_modified("claims/").items():
        run_id = key.removeprefix("claims/run=").removesuffix(".parquet")
        if not key.endswith(".parquet") or run_id == own_run_id or run_id in published:
            continue
        claim = _read_claim_ids(root, run_id)
        if claim.model != model or (weight_version is not None and claim.weight_version != weight_version):
            continue
        verdict = check(root, run_id, now, live_window_s(ttl_s)) if check is not None else None
        if verdict is not None and not verdict.running:
            if ended is not None:
                ended[run_id] = Ended(verdict.why, SampleIdSet(digests_from_hex(claim.sample_ids)))
            continue
        if verdict is None and claimed_at < horizon:
            if not _active_since(root, _activity_prefixes(run_id, claim.categories), horizon):
                log.info(
                    "run %s: no activity for more than %.0f s: its %d claimed samples are free",
                    run_id,
                    ttl_s,
                    len(claim.sample_ids),
                )
                if ended is not None:
                    why = f"no sign of life for more than {ttl_s:.0f} s, the claim TTL"
                    ended[run_id] = Ended(why, SampleIdSet(digests_from_hex(claim.sample_ids)))
                continue
        runs += 1
        found.append(digests_from_hex(claim.sample_ids))
        if holders is not None:
            last = _last_active(root, _activity_prefixes(run_id, claim.categories), claimed_at)
            holders[run_id] = {
                "samples": len(claim.sample_ids),
                "last_active": last,
                "expires": None if verdict is not None else last + ttl_s,
                "live": verdict is not None or now - last <= live_window_s(ttl_s),
                "running": verdict.why if verdict is not None else None,
            }
    claimed = SampleIdSet.merged(found)
    log.info("claims: %d samples planned by %d run(s) in flight", len(claimed), runs)
    return claimed
