"""The benchmarks still run: each one's smallest case end to end, so a change to what they wrap (they patch
`generate_pending` to time the generation phase) breaks a test, not the next person's benchmark session.
What they measure is not asserted here (speed is measured in bench/, never in timed tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def run_bench(script: str, *args: str) -> str:
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_prefill_benchmark_runs_both_policies():
    out = run_bench("bench_prefill.py", "--cases", "fast:2", "--fast-seconds", "2", "--shard-size", "50")
    rows = [line for line in out.splitlines() if line.startswith("| fast | 2 |")]
    assert [row.split("|")[3].strip() for row in rows] == ["least-outstanding", "prefix-affinity"], out
    assert "failed 0" in out


def test_logprob_storage_benchmark_runs_its_smallest_case():
    out = run_bench("bench_logprob_storage.py", "--samples", "5", "--k", "3")
    assert any(line.startswith("| 3 | 28 |") for line in out.splitlines()), out


def test_generation_benchmark_runs_its_smallest_case():
    out = run_bench(
        "bench_generate.py", "--profiles", "fast", "--replicas", "1", "--fast-seconds", "2", "--repeats", "0"
    )
    assert any(line.startswith("| fast | 1 |") for line in out.splitlines()), out


def test_resume_benchmark_runs_its_smallest_case():
    """Both readers find every synthesized sample (the benchmark asserts it), on a local folder and on S3."""
    out = run_bench("bench_resume.py", "--tokens", "200k", "--sample-tokens", "1000", "--repeats", "1")
    assert any(line.startswith("| local | 200,000 | 200 | 1 |") for line in out.splitlines()), out
    assert any(line.startswith("| s3 | 200,000 | 200 | 1 |") for line in out.splitlines()), out
