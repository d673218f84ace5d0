"""The shard memory benchmark still runs: its toy size end to end (synthesized checkpoints, publish, finalize,
export plain and shuffled), without a baseline checkout. What it measures is not asserted (not a timed test)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_shard_memory_benchmark_runs_its_toy_size(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_shard_memory.py"), "--sizes", "toy", "--workdir", str(tmp_path)],
        cwd=ROOT,
        env=os.environ | {"HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    steps = [line.split("|")[2].strip() for line in done.stdout.splitlines() if line.startswith("| 0.0M tokens")]
    assert steps == ["publish", "finalize", "export", "export shuffled", "export mixed"], done.stdout
    assert not tmp_path.exists()  # the workdir is removed
