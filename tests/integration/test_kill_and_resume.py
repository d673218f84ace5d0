"""SIGKILL a running `eagle-datagen run` mid-shard, rerun it with the same run id: every sample is
present exactly once, and no more than the in-flight window was generated twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread

from conftest import REPO, user_record, write_jsonl

pytestmark = pytest.mark.slow
WINDOW = 4
PROMPTS, SAMPLES_PER_PROMPT = 60, 2


def checkpointed(root) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in root.glob("checkpoints/run=k/shard=*/chunk-*.jsonl"))


def test_sigkill_mid_shard_then_resume(tmp_path):
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"prompt number {i}") for i in range(PROMPTS)])
    out = tmp_path / "out"
    args = [
        sys.executable,
        "-m",
        "eagle_datagen.cli",
        "run",
        "--prompts",
        str(src),
        "--tokenizer",
        "standin:kimi-k2.5",
        "--output",
        str(out),
        "--run-id",
        "k",
        "--shard-size",
        "25",
        "--samples-per-prompt",
        str(SAMPLES_PER_PROMPT),
        "--concurrency",
        str(WINDOW),
        "--checkpoint-every",
        "1",
        "--draft-vocab-size",
        "256",
    ]
    total = PROMPTS * SAMPLES_PER_PROMPT
    config = SimConfig(
        max_running_requests=WINDOW, decode_s_per_token=0.002, output_tokens_min=40, output_tokens_max=80
    )
    with SimServerThread(config) as sim:
        url = ["--sglang-url", sim.url]
        first = subprocess.Popen(
            args + url, cwd=REPO, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 120
        while checkpointed(out) < total // 3 and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.05)
        assert first.poll() is None, "the run finished before it could be killed"
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        done_before = checkpointed(out)
        assert total // 3 <= done_before < total

        second = subprocess.run(args + url, cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=300)
        generations = sim.stats()["generations"]

    assert second.returncode == 0, second.stderr
    assert f"{done_before:,} resumed from checkpoints" in second.stdout
    rows = [r for p in sorted(out.glob("data/category=*/run=k/part-*.parquet")) for r in pq.read_table(p).to_pylist()]
    assert len(rows) == total and len({r["sample_id"] for r in rows}) == total
    assert all(r["finish_reason"] == "stop" and r["output_ids"][-1] == 163586 for r in rows)
    canaries = 2
    regenerated = generations - canaries - total
    assert 0 <= regenerated <= WINDOW, f"{regenerated} samples were generated twice"
