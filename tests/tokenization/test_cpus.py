"""Worker pools are sized to the CPUs this process may use (eagle_datagen/cpus.py): a cgroup quota (a pod's CPU
limit) caps the affinity mask, rounded down, never below one."""

from __future__ import annotations

import os

from eagle_datagen.cpus import cgroup_cpu_limit, usable_cpus
from eagle_datagen.tokenization.tokenize import MIN_PROMPTS_PER_PROCESS, auto_processes


def test_cgroup_v2_quota(tmp_path):
    (tmp_path / "cpu.max").write_text("250000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 2.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test_cgroup_v1_quota(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("150000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test_no_cgroup_files_means_no_limit(tmp_path):
    assert cgroup_cpu_limit(tmp_path) is None
    assert usable_cpus(tmp_path) == len(os.sched_getaffinity(0))


def test_a_quota_caps_the_affinity_mask_rounded_down_and_at_least_one(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    (tmp_path / "cpu.max").write_text("350000 100000\n")
    assert usable_cpus(tmp_path) == 3
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert usable_cpus(tmp_path) == 1
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cpus(tmp_path) == 16


def test_auto_processes_follow_the_usable_cpus(monkeypatch):
    import eagle_datagen.tokenization.tokenize as tokenize

    monkeypatch.setattr(tokenize, "usable_cpus", lambda: 3)
    assert auto_processes(100 * MIN_PROMPTS_PER_PROCESS) == 3
    assert auto_processes(2 * MIN_PROMPTS_PER_PROCESS) == 2
    assert auto_processes(10) == 1
