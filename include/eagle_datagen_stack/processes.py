"""Processes of a local deployment: each in its own process group, with its own log, stopped by that group.

A component that forks workers (the api-server's uvicorn, the scheduler's executor, Celery) leaves
children behind when only its leader is signalled; a process group of its own lets us stop all of them
without touching anything we did not start.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import requests


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


class ComponentDied(RuntimeError):
    """A component exited while the stack still needed it."""


@dataclass
class Component:
    """`Component("scheduler", [...], env, logs).start()`; `.stop()` ends its whole process group."""

    name: str
    args: Sequence[str]
    env: dict[str, str]
    log_dir: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    def start(self) -> Component:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            self.process = subprocess.Popen(
                list(self.args), env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise ComponentDied(
                f"{self.name} exited with status {self.process.returncode}; its log ({self.log_path}) ends:\n"
                f"{tail(self.log_path)}"
            )

    def stop(self, term_wait_s: float = 30.0) -> None:
        if self.process is not None:
            stop_group(self.process, term_wait_s)

    def kill(self) -> None:
        """SIGKILL the whole group at once, as a crashed machine would."""
        if self.process is not None:
            stop_group(self.process, term_wait_s=0)


def stop_group(proc: subprocess.Popen, term_wait_s: float = 30.0) -> None:
    """SIGTERM the process group `proc` leads (SIGKILL straight away when term_wait_s is 0), then SIGKILL
    what is left; returns when the leader is reaped and the group is empty (or after the waits)."""
    steps = [(signal.SIGKILL, 10.0)] if term_wait_s <= 0 else [(signal.SIGTERM, term_wait_s), (signal.SIGKILL, 10.0)]
    for sig, wait in steps:
        try:
            os.killpg(proc.pid, sig)  # the group we created for the component (same id as its leader)
        except ProcessLookupError:
            break
        if _wait_group_empty(proc, wait):
            break
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - a leader that survives SIGKILL
        pass


def _wait_group_empty(proc: subprocess.Popen, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader, so that it does not linger as a zombie member of the group
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def wait_until(
    condition: Callable[[], object],
    timeout_s: float,
    what: str,
    alive: Sequence[Component] = (),
    every_s: float = 0.5,
) -> object:
    """Poll `condition` until it returns something truthy; fail early when a component dies, and after
    `timeout_s` with a message that says what was awaited."""
    deadline = time.monotonic() + timeout_s
    while True:
        for component in alive:
            component.check_alive()
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not done after {timeout_s:.0f} s")
        time.sleep(every_s)


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    try:
        return requests.get(url, timeout=timeout_s).status_code == 200
    except requests.RequestException:
        return False
