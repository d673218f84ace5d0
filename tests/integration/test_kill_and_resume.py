"""SIGKILL a running `eagle-datagen run` mid-shard, rerun it with the same run id: every sample is
present exactly once, and no more than the in-flight window was generated twice."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from generation_runs import checkpointed_samples, run_cli

from conftest import user_record, write_jsonl

pytestmark = pytest.mark.slow
WINDOW = 4
PROMPTS, SAMPLES_PER_PROMPT = 60, 2


def test_sigkill_mid_shard_then_resume(tmp_path):
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"prompt number {i}") for i in range(PROMPTS)])
    out = tmp_path / "out"
    args = [
        "--prompts",
        str(src),
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
        first = run_cli(args + url, kill_when=lambda: checkpointed_samples(out, "k") >= total // 3, timeout_s=120)
        assert first.killed, f"the run finished before it could be killed: {first.stderr[-2000:]}"
        done_before = checkpointed_samples(out, "k")
        assert total // 3 <= done_before < total

        second = run_cli(args + url)
        generations = sim.stats()["generations"]

    assert second.returncode == 0, second.stderr
    assert f"{done_before:,} resumed from checkpoints" in second.stdout
    rows = [r for p in sorted(out.glob("data/category=*/run=k/part-*.parquet")) for r in pq.read_table(p).to_pylist()]
    assert len(rows) == total and len({r["sample_id"] for r in rows}) == total
    assert all(r["finish_reason"] == "stop" and r["output_ids"][-1] == 163586 for r in rows)
    canaries = 2
    regenerated = generations - canaries - total
    assert 0 <= regenerated <= WINDOW, f"{regenerated} samples were generated twice"
