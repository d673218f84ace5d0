"""What this process and every process under it use: peak summed RSS and CPU seconds, sampled from /proc (Linux).

The CPU loop's steps run in several processes at once (SGLang's three per server, the side environment's
trainer, the pipeline's CLI), and a server's scheduler is reaped by its own leader, or by nobody once its group is
killed, so neither this process's RSS nor `os.times()`'s children say what the loop costs; the whole tree, read
every second, does. A process's CPU counts up to its last sample (at most a second of it is missed when it ends).
`with TreeUsage() as usage: ...` then `usage.peak_bytes`, `usage.cpu_seconds()`.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def _processes() -> dict[int, tuple[int, int, float]]:
    """pid -> (parent pid, RSS bytes, CPU seconds) of every process readable now."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            status = (entry / "status").read_text()
        except OSError:  # the process ended meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces
        rss = next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:")), 0)
        found[int(entry.name)] = (int(fields[1]), rss, (int(fields[11]) + int(fields[12])) / _TICKS)
    return found


def tree_pids(processes: dict[int, tuple[int, int, float]], root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


class TreeUsage:
    """Samples this process's tree every `every_s` in a daemon thread while the block runs."""

    def __init__(self, every_s: float = 1.0) -> None:
        self.every_s = every_s
        self.peak_bytes = 0
        self._cpu: dict[int, float] = {}  # pid -> CPU seconds at its last sample
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        processes = _processes()
        pids = [pid for pid in tree_pids(processes, os.getpid()) if pid in processes]
        with self._lock:
            self.peak_bytes = max(self.peak_bytes, sum(processes[pid][1] for pid in pids))
            for pid in pids:
                self._cpu[pid] = max(self._cpu.get(pid, 0.0), processes[pid][2])

    def cpu_seconds(self) -> float:
        """CPU seconds of the tree so far (a fresh sample first)."""
        self.sample()
        with self._lock:
            return sum(self._cpu.values())

    def __enter__(self) -> TreeUsage:
        def run() -> None:
            while not self._stop.wait(self.every_s):
                self.sample()

        self.sample()
        self._thread = threading.Thread(target=run, name="tree-usage", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
