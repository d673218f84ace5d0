"""A run's process heartbeats: each process that works for a run (the command line from its plan to its end, an
Airflow shard task from its start to its last shard published) rewrites `claims/run=<id>.heartbeat.<process>` at a fixed
interval for as long as it works, and marks it stopped when it ends, however it ends (an exception, a signal that
Python turns into one). Incremental runs judge the holder of a claim alive by these (claims.py), not by how often
it checkpoints (a shard of 32k-token answers can go many minutes without a checkpoint), and an orchestrator whose
own records say a run has ended still waits while a process of it beats (takeover.py): a task marked failed
whose process has not been stopped yet. A process killed outright leaves a beat that goes stale."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any

from eagle_datagen.generation.claims import heartbeat_key
from eagle_datagen.storage.output_root import OutputRoot

log = logging.getLogger(__name__)


def write_heartbeat(root: OutputRoot, run_id: str, process: str, by: str = "", stopped: bool = False) -> None:
    """One process's beat: its modification time (the store's clock) is what counts; the body says who beats
    and whether it has stopped."""
    body = {"host": socket.gethostname(), "pid": os.getpid(), "by": by, "stopped": stopped}
    root.write_bytes(heartbeat_key(run_id, process), json.dumps(body).encode())


def live_processes(root: OutputRoot, run_id: str, now: float, window_s: float) -> list[dict[str, Any]]:
    """The run's processes that beat within `window_s` before `now` (the store's time) and have not stopped,
    each with its host, pid, what it does (`by`) and its last beat (`beat`)."""
    live = []
    for key, beat in root.list_modified(heartbeat_key(run_id) + ".").items():
        if now - beat > window_s:
            continue
        try:
            body = json.loads(root.read_bytes(key))
        except FileNotFoundError:  # withdrawn meanwhile
            continue
        except ValueError:  # not one of ours: a sign of life nonetheless
            body = {}
        if not body.get("stopped"):
            live.append({"host": body.get("host"), "pid": body.get("pid"), "by": body.get("by"), "beat": beat})
    return live


def describe_processes(processes: list[dict[str, Any]]) -> str:
    return ", ".join(f"{p['by'] or 'a process'} (pid {p['pid']} on {p['host']})" for p in processes)


@contextlib.contextmanager
def process_heartbeat(root: OutputRoot, run_id: str, interval_s: float, by: str) -> Iterator[None]:
    """Beat at once, then every `interval_s` from a thread of its own (so that neither a blocking publish nor a
    busy event loop delays it) until the block ends; then mark the beat stopped. A failed write is not the
    run's failure: the next beat may land. The stop waits for a beat in flight, so nothing beats after it."""
    process = uuid.uuid4().hex[:12]
    write_heartbeat(root, run_id, process, by)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval_s):
            try:
                write_heartbeat(root, run_id, process, by)
            except Exception as exc:  # noqa: BLE001 - a missed beat is not the run's failure
                log.warning("run %s: heartbeat not written (%s); trying again in %.0f s", run_id, exc, interval_s)

    thread = threading.Thread(target=beat, name=f"heartbeat {run_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        try:
            write_heartbeat(root, run_id, process, by, stopped=True)
        except Exception as exc:  # noqa: BLE001 - the beat goes stale instead, a few intervals later
            log.warning("run %s: heartbeat not marked stopped (%s)", run_id, exc)
