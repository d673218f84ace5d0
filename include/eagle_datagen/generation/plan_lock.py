"""The plan lock: incremental runs under one output root decide which samples are new one at a time.

An incremental run plans by reading what exists (published manifests, the claims of runs in flight) and
claiming what is left. Two runs doing that at once would both find the same samples new and both
generate them, so this step holds `locks/incremental-plan.json`: an object created with write-once
semantics (`put_once`: `IfNoneMatch="*"` on S3, a link that refuses an existing file on a local root),
which exactly one planner can create. The others poll until the holder deletes it. It is held for
seconds (a listing or two, the new manifests and claims, the run's own claim), not while prompts are
sourced and tokenized or the plan's shards are written.

A holder that died leaves its lock behind. A waiter breaks it once it has seen the same lock (same
content) for `stale_s` by its own monotonic clock: no clock of another machine is compared, so clock skew
between workers cannot make a live lock look stale. The break deletes only that content (on S3 a delete
conditional on the ETag just read), so two waiters breaking one dead lock cannot also delete the lock
one of them has taken since. A holder checks that the lock is still its own before it writes its claim.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType

from eagle_datagen.errors import DataGenError
from eagle_datagen.storage.objects import ObjectCollision, delete_if_unchanged, put_once
from eagle_datagen.storage.output_root import OutputRoot

log = logging.getLogger(__name__)
LOCK_KEY = "locks/incremental-plan.json"


class PlanLockBusy(DataGenError):
    """The plan lock could not be had (other planners held it too long) or was lost: plan again later."""


@dataclass(frozen=True)
class PlanLockPolicy:
    # Planners queue for seconds each; this is long enough for a dead holder's lock to go stale and be
    # broken, and short enough that an orchestrator's retry, not a hung task, handles a jam.
    wait_s: float = 900.0
    # Far above a live holder's time (seconds; two minutes at worst while the store restarts and every
    # request is retried), so only a holder that died is broken.
    stale_s: float = 300.0
    poll_s: float = 0.5


@dataclass
class PlanLock:
    """`with PlanLock(root, run_id) as lock:` holds the lock; `lock.acquired_at` is the store's time of it."""

    root: OutputRoot
    run_id: str
    policy: PlanLockPolicy = field(default_factory=PlanLockPolicy)
    acquired_at: float = 0.0  # seconds since the epoch, by the store's clock (the lock's modification time)
    _body: bytes = b""

    def __enter__(self) -> PlanLock:
        self._body = json.dumps(
            {
                "run_id": self.run_id,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "token": uuid.uuid4().hex,
                "created": datetime.now(UTC).isoformat(timespec="seconds"),  # for people; never compared
            }
        ).encode()
        self.acquired_at = self._acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            released = delete_if_unchanged(self.root, LOCK_KEY, self._body)
        except DataGenError as error:
            if exc is None:
                raise
            # the store is failing too: the planning error matters more; the lock goes stale and is broken
            log.warning("run %s: cannot release the plan lock (%s)", self.run_id, error)
            return
        if not released:
            log.warning("run %s: the plan lock was not ours any more when released: %s", self.run_id, self._holder())

    def verify(self) -> None:
        """Raise PlanLockBusy unless the lock is still ours (a waiter broke it as stale)."""
        if self._read() != self._body:
            raise PlanLockBusy(
                f"run {self.run_id} lost the plan lock of {self.root.uri} while planning (another planner broke "
                f"it after {self.policy.stale_s:.0f} s): plan again; nothing was claimed"
            )

    def _read(self) -> bytes | None:
        try:
            return self.root.read_bytes(LOCK_KEY)
        except FileNotFoundError:
            return None

    def _holder(self) -> str:
        current = self._read()
        if current is None:
            return "nobody holds it"
        try:
            holder = json.loads(current)
            return f"held by run {holder['run_id']} ({holder['host']}, pid {holder['pid']}, since {holder['created']})"
        except (ValueError, KeyError, TypeError):
            return f"{LOCK_KEY} holds {current[:200]!r}"

    def _acquire(self) -> float:
        started = time.monotonic()
        seen, seen_since = None, started
        while True:
            try:
                put_once(self.root, LOCK_KEY, self._body)
                stamp = self.root.list_modified(LOCK_KEY).get(LOCK_KEY)
                if stamp is not None:
                    log.info("run %s: plan lock taken after %.1f s", self.run_id, time.monotonic() - started)
                    return stamp
                continue  # broken the moment it was taken: take it again
            except ObjectCollision:
                pass
            current = self._read()
            now = time.monotonic()
            if current is None:
                continue  # released between our attempt and the read: try at once
            if current != seen:
                seen, seen_since = current, now
                log.info("run %s: waiting for the plan lock of %s, %s", self.run_id, self.root.uri, self._holder())
            elif now - seen_since >= self.policy.stale_s:
                log.warning(
                    "run %s: breaking the plan lock, unchanged for %.0f s (its planner died?): %s",
                    self.run_id,
                    now - seen_since,
                    current[:200],
                )
                delete_if_unchanged(self.root, LOCK_KEY, current)
                continue
            if now - started >= self.policy.wait_s:
                raise PlanLockBusy(
                    f"run {self.run_id} waited {now - started:.0f} s for the plan lock of {self.root.uri} "
                    f"({self._holder()}): other incremental runs are planning; try again later"
                )
            time.sleep(self.policy.poll_s * random.uniform(0.5, 1.5))
