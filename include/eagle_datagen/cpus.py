"""How many CPUs this process may really use: what worker pools are sized by.

`os.cpu_count()` counts the machine's CPUs. An Airflow task often gets fewer: a Celery worker pinned to some
cores (its affinity mask), a Kubernetes pod or a container with a CPU limit (a cgroup quota, which throttles
rather than pins, so the affinity mask still shows every core). Sizing a pool by the machine there starts more
processes than the task may run at once, each loading the tokenizer, all slower for it.
"""

from __future__ import annotations

import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def cgroup_cpu_limit(root: Path = CGROUP) -> float | None:
    """The CPU quota of this process's cgroup in CPUs (2.5: 250 ms of CPU per 100 ms), or None when unlimited or
    unknown. cgroup v2's `cpu.max` ("200000 100000", or "max 100000"), else v1's cfs quota and period."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def usable_cpus(root: Path = CGROUP) -> int:
    """The CPUs this process may use: its affinity mask, capped by its cgroup's quota (rounded down, at least 1)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit(root)
    if limit is not None:
        cpus = min(cpus, int(limit))
    return max(1, cpus)
