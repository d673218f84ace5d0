"""POST /abort_request as SGLang 0.5.23 honours it: the requests the server holds, by rid, and ending them early.

Measured on the real server (tests/engine/test_lost_request_real_engine.py checks both servers alike):
- `{"rid": R}` ends every request the server holds whose rid *starts with* R (its scheduler matches by prefix, so
  aborting `S` also ends `S-h` and `S-r2` there); `{"abort_all": true}` ends all; an empty rid without abort_all,
  or a rid nobody holds, is ignored. The answer is always 200 with an empty body (400 for a body that is not
  JSON).
- The aborted /generate is answered HTTP 200 with `finish_reason` `{"type": "abort", "message": "Aborted",
  "status_code": null, "err_type": null}` and the output ids generated so far when it was running, or
  `{"type": "abort", "message": "Abort in waiting queue"}` and no output when it was still queued.
A request the lose fault holds (accepted, never answered) counts as queued: it never ran.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

ABORTED_RUNNING = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
ABORTED_QUEUED = {"type": "abort", "message": "Abort in waiting queue"}
T = TypeVar("T")


class AbortRegistry:
    def __init__(self) -> None:
        self._held: dict[int, tuple[list[str], asyncio.Event]] = {}

    @contextlib.contextmanager
    def holding(self, rids: list[str]) -> Iterator[asyncio.Event]:
        """While the block runs, the server holds these rids; the event is set when one is aborted."""
        aborted = asyncio.Event()
        key = id(aborted)
        self._held[key] = (rids, aborted)
        try:
            yield aborted
        finally:
            del self._held[key]

    def abort(self, rid: str, abort_all: bool = False) -> int:
        """End the held requests that match, as SGLang does; how many were ended."""
        if not abort_all and not rid:
            return 0  # SGLang: "Ignore abort_request with empty rid and abort_all=False"
        ended = 0
        for rids, aborted in self._held.values():
            if not aborted.is_set() and (abort_all or any(r.startswith(rid) for r in rids)):
                aborted.set()
                ended += 1
        return ended


async def unless_aborted(work: Awaitable[T], aborted: asyncio.Event) -> tuple[bool, T | None]:
    """(True, its result) when `work` finishes first; (False, None) when the request is aborted first, `work`
    then cancelled and awaited, so that what it held is let go (work that finished as it was cancelled counts
    as finished: the caller's next phase sees the abort)."""
    task: asyncio.Task[Any] = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(aborted.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
        if task.cancelled():
            return False, None
        return True, task.result()
    finally:  # also when the request itself is cancelled (the client went away, the server stops)
        stop.cancel()
        task.cancel()
