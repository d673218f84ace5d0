"""`eagle-datagen run`'s exit status tells the truth: 0 only when the run is published (or an incremental run
found nothing new, in one line), otherwise non-zero with one line on stderr saying what is missing and how a
rerun finishes it. The real command line as a subprocess against the stand-in SGLang server."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from eagle_datagen.standin.sglang.config import FaultRates, SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from generation_runs import run_cli

from conftest import user_record, write_jsonl

pytestmark = pytest.mark.slow
PROMPTS = 12


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("eagle-datagen:")]


def damage_a_chunk(out: Path, run_id: str) -> Path:
    """Cut a checkpoint chunk's last answer in half, its index left as it was: a chunk damaged at rest."""
    chunk = next(p for p in sorted(out.glob(f"checkpoints/run={run_id}/shard=*/chunk-*.jsonl")) if p.stat().st_size)
    lines = chunk.read_bytes().splitlines()
    chunk.write_bytes(b"\n".join([*lines[:-1], lines[-1][: len(lines[-1]) // 2]]) + b"\n")
    return chunk


def test_a_shard_found_incomplete_at_publish_ends_the_run_with_exit_3_and_the_reason(tmp_path):
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"prompt number {i}") for i in range(PROMPTS)])
    out = tmp_path / "out"
    args = ["--prompts", str(src), "--output", str(out), "--run-id", "inc", "--shard-size", "4", "--no-canary"]
    args += ["--checkpoint-every", "1", "--max-attempts", "1", "--draft-vocab-size", "16"]
    flaky = SimConfig(faults=FaultRates(error_503=0.3), fault_seed=3).with_profile("instant")
    with SimServerThread(flaky) as sim:
        first = run_cli(args + ["--sglang-url", sim.url], timeout_s=120)
    assert first.returncode == 3, first.stderr[-3000:]  # samples out of retries: not published, resumable
    [line] = error_lines(first.stderr)
    assert "run inc is not published:" in line and "samples ran out of retries" in line
    assert line.endswith("rerun with --run-id inc to finish it")

    chunk = damage_a_chunk(out, "inc")
    shard = int(chunk.parent.name.removeprefix("shard="))
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        second = run_cli(args + ["--sglang-url", sim.url], timeout_s=120)  # every sample done, by the indexes
        assert second.returncode == 3, second.stderr[-3000:]  # was 0: nothing pending, shard incomplete, no reason
        [line] = error_lines(second.stderr)
        assert f"run inc is not published: shard {shard} of run inc: 1 of its 4 samples are listed by" in line
        assert "missing from their chunks (damaged checkpoints)" in line and "rerun with --run-id inc" in line
        assert f"not published: shard {shard} of run inc" in second.stdout
        assert not (out / "manifests" / "run=inc.json").exists()

        third = run_cli(args + ["--sglang-url", sim.url], timeout_s=120)  # the damaged sample generated again
    assert third.returncode == 0, third.stderr[-3000:]
    assert error_lines(third.stderr) == []
    files = [*out.glob("data/category=*/run=inc/*.parquet"), *out.glob("quarantine/category=*/run=inc/*.parquet")]
    rows = [r for path in files for r in pq.read_table(path).to_pylist()]
    assert len(rows) == PROMPTS and len({r["sample_id"] for r in rows}) == PROMPTS
    assert (out / "manifests" / "run=inc.json").exists()


def test_an_incremental_run_with_nothing_new_says_so_in_one_line_and_exits_0(tmp_path):
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"prompt number {i}") for i in range(4)])
    out = tmp_path / "out"
    args = ["--prompts", str(src), "--output", str(out), "--no-canary", "--draft-vocab-size", "16", "--incremental"]
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        first = run_cli(args + ["--sglang-url", sim.url, "--run-id", "a"], timeout_s=120)
        assert first.returncode == 0, first.stderr[-3000:]
        again = run_cli(args + ["--sglang-url", sim.url, "--run-id", "b"], timeout_s=120)
    assert again.returncode == 0, again.stderr[-3000:]
    [line] = again.stdout.strip().splitlines()  # one line, not a summary of zeros
    assert line == f"run b: every sample is already published under this output root ({out}): nothing new to generate"
    assert error_lines(again.stderr) == []
