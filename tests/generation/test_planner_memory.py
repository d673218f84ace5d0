"""The planner's memory is flat in the number of prompts: planning 50,000 prompts (sourcing, tokenizing, claims
and shards, in a subprocess with the default worker count) peaks within a fixed margin of planning 5,000, and under
the ceiling docs/internals/scaling.md states. Before streaming the plan, each prompt held about 10 KB as a record and
33 bytes
per token as a list: 50,000 prompts of ~250 tokens added about 900 MB. Since the planner keeps its keys as arrays
(16-byte sample-id digests, no Python object per prompt: plan.PlannedCategory) the 45,000 more prompts add about
10 MB (measured 284 MB at 5,000, 294 MB at 50,000); the bound leaves room for the noise of sampled PSS."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
CEILING_MB = 1536  # docs/internals/scaling.md: the planner's ceiling at any size, default worker count
GROWTH_MB = 60  # 45,000 more prompts may add their arrays (tens of bytes each), not their records or objects


def _bench():
    spec = importlib.util.spec_from_file_location("bench_plan", ROOT / "bench" / "bench_plan.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_planning_50k_prompts_peaks_near_planning_5k(tmp_path):
    bench = _bench()
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    peaks = {}
    for n in (5_000, 50_000):
        source = bench.write_prompts(tmp_path / f"p{n}.jsonl", n, scale=0.05)  # short prompts: quick to tokenize
        output = tmp_path / f"out{n}"
        result = bench.measure(
            [sys.executable, str(ROOT / "bench" / "bench_plan.py"), "--plan-child", str(source), str(output), "r", "0"],
            env,
        )
        assert result["samples"] == n and result["tokenized"] == n
        peaks[n] = result["peak_pss_mb"]
        rows = sum(pq.read_metadata(f).num_rows for f in (output / "plans" / "run=r").glob("shard-*.parquet"))
        assert rows == n
    assert peaks[50_000] < CEILING_MB, peaks
    assert peaks[50_000] - peaks[5_000] < GROWTH_MB, peaks
