"""Peak memory of this process and every process under it, sampled once a second from /proc (Linux).

The CPU loop's steps run in several processes at once (SGLang's three per server, the side environment's
trainer, the pipeline's CLI), so neither this process's RSS nor `ru_maxrss` of its children says what the loop
costs; the summed RSS of the whole tree does. `with TreeMemory() as memory: ...` then `memory.peak_bytes`.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


def _rss_and_parents() -> tuple[dict[int, int], dict[int, int]]:
    rss, parents = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:  # the process ended meanwhile
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        pid = int(entry.name)
        parents[pid] = int(fields.get("PPid", "0").strip() or 0)
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
    return rss, parents


def tree_rss_bytes(root: int | None = None) -> int:
    """The summed RSS of `root` (default: this process) and all its descendants."""
    root = os.getpid() if root is None else root
    rss, parents = _rss_and_parents()
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total


class TreeMemory:
    """Samples tree_rss_bytes() every `every_s` in a daemon thread while the block runs; keeps the peak."""

    def __init__(self, every_s: float = 1.0) -> None:
        self.every_s = every_s
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> int:
        current = tree_rss_bytes()
        self.peak_bytes = max(self.peak_bytes, current)
        return current

    def __enter__(self) -> TreeMemory:
        def run() -> None:
            while not self._stop.wait(self.every_s):
                self.sample()

        self.sample()
        self._thread = threading.Thread(target=run, name="tree-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
