"""Thinking and instant modes end to end on the command line against the stand-in SGLang server: every row
carries its mode, instant prompts end in <think></think> and their answers hold no think token; a mix keeps each
prompt's mode across a SIGKILL and a rerun; a wrong shape of either mode is quarantined with its reason (and never
sent again); the two modes of one prompt are two samples to an incremental refresh; tool loops keep their mode."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from conversation_records import multi_turn_record, tool_loop_record
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from generation_runs import checkpointed_samples, run_cli

from conftest import DEMO_RECIPE, REPO, user_record, write_jsonl

pytestmark = pytest.mark.slow
THINK, END, EOS = 163606, 163607, 163586


@pytest.fixture(scope="module")
def sim():
    with SimServerThread(SimConfig().with_profile("instant")) as server:
        yield server


def rows_of(root: Path, run_id: str) -> list[dict]:
    rows = []
    for kind in ("data", "quarantine"):
        for part in sorted(root.glob(f"{kind}/category=*/run={run_id}/part-*.parquet")):
            rows += [r | {"kind": kind} for r in pq.read_table(part).to_pylist()]
    return rows


def run(url: str, out: Path, run_id: str, *args: str) -> subprocess.CompletedProcess:
    command = [*_cli(), "--sglang-url", url, "--output", str(out), "--run-id", run_id, "--draft-vocab-size", "8"]
    return subprocess.run([*command, *args], capture_output=True, text=True, cwd=REPO, timeout=300)


def _cli() -> list[str]:
    return [sys.executable, "-m", "eagle_datagen.cli", "run", "--tokenizer", "standin:kimi-k2.5", "--trust-remote-code"]


def prompts_file(tmp_path: Path, n: int = 40) -> Path:
    return write_jsonl(tmp_path / "p.jsonl", [user_record(f"question {i}: " + "word " * (i % 7)) for i in range(n)])


def test_instant_mode_end_to_end_with_its_counts_everywhere(tmp_path, sim):
    out = tmp_path / "out"
    result = run(sim.url, out, "i1", "--recipe", str(DEMO_RECIPE), "--categories", "math,tool_use", "--mode", "instant")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = rows_of(out, "i1")
    assert rows and {r["mode"] for r in rows} == {"instant"} and {r["kind"] for r in rows} == {"data"}
    for row in rows:
        assert row["prompt_ids"][-2:] == [THINK, END]
        assert THINK not in row["output_ids"] and END not in row["output_ids"] and row["output_ids"][-1] == EOS
        assert json.loads(row["sampling"])["temperature"] == 1.0  # the demo recipe sets it: it wins over 0.6
    manifest = json.loads((out / "manifests" / "run=i1.json").read_text())
    assert manifest["counts"]["modes"]["instant"]["data"] == len(rows) and "thinking" not in manifest["counts"]["modes"]
    assert manifest["sampling"]["math"]["mode"] == "instant"
    statistics = json.loads((out / "manifests" / "run=i1.statistics.json").read_text())
    assert statistics["modes"]["all"]["instant"]["valid"] == len(rows)
    assert statistics["all"]["without_think_end"] == 0 and statistics["all"]["lengths"]["answer"]["count"] == len(rows)
    assert "<h2>Modes</h2>" in (out / "manifests" / "run=i1.report.html").read_text()
    export = subprocess.run(
        [sys.executable, "-m", "eagle_datagen.cli", "export", "--output", str(out), "--run-id", "i1"]
        + ["--format", "hf", "--to", str(tmp_path / "hf")],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert export.returncode == 0, export.stderr[-2000:]
    info = yaml.safe_load((tmp_path / "hf" / "export_info.yaml").read_text())
    assert info["modes"] == {"instant": sum(not r["heldout"] for r in rows)}  # held-out rows are never exported
    assert "modes (rows): instant" in (tmp_path / "hf" / "README.md").read_text()


def test_a_mix_keeps_each_prompt_s_mode_across_a_sigkill_and_a_rerun(tmp_path, sim):
    source = prompts_file(tmp_path, 60)
    out = tmp_path / "out"
    args = ["--prompts", str(source), "--sglang-url", sim.url, "--output", str(out), "--run-id", "mix"]
    args += ["--mode", "mix", "--instant-fraction", "0.4", "--seed", "3", "--no-canary", "--checkpoint-every", "1"]
    args += ["--concurrency", "2", "--shard-size", "20", "--draft-vocab-size", "8"]
    first = run_cli(args, kill_when=lambda: checkpointed_samples(out, "mix") >= 15)
    assert first.killed, first.stderr[-2000:]
    planned = {}
    for shard in sorted((out / "plans" / "run=mix").glob("shard-*.parquet")):
        planned |= dict(zip(*pq.read_table(shard, columns=["prompt_id", "mode"]).to_pydict().values(), strict=True))
    second = run_cli(args)
    assert second.returncode == 0, second.stderr[-2000:]
    rows = rows_of(out, "mix")
    assert len(rows) == len({r["sample_id"] for r in rows}) == 60  # every sample exactly once
    assert {r["prompt_id"]: r["mode"] for r in rows} == planned  # the modes the plan chose before the kill
    modes = Counter(r["mode"] for r in rows)
    assert 10 <= modes["instant"] <= 38 and modes["thinking"] + modes["instant"] == 60
    for row in rows:
        assert row["prompt_ids"][-1] == (END if row["mode"] == "instant" else THINK)
        assert (END in row["output_ids"]) == (row["mode"] == "thinking")
    # a fresh run with the same seed and share chooses the same prompts; another seed other ones
    flags = ["--prompts", str(source), "--mode", "mix", "--instant-fraction", "0.4", "--no-canary"]
    for name, seed in (("same", "3"), ("other", "4")):
        assert run(sim.url, tmp_path / name, name, *flags, "--seed", seed).returncode == 0
    assert {r["prompt_id"]: r["mode"] for r in rows_of(tmp_path / "same", "same")} == planned
    assert {r["prompt_id"]: r["mode"] for r in rows_of(tmp_path / "other", "other")} != planned


def test_wrong_shapes_of_each_mode_are_quarantined_with_their_reason_and_never_resent(tmp_path):
    config = SimConfig(faults={"think_in_instant": 0.3, "no_think_end": 0.2}, fault_seed=5).with_profile("instant")
    with SimServerThread(config) as faulty:
        result = run(
            faulty.url, tmp_path / "out", "f", "--prompts", str(prompts_file(tmp_path, 80)), "--mode", "mix",
            "--no-canary", "--max-rate", "missing_think_end=0.9", "--max-rate", "think_token_in_instant=0.9",
        )  # fmt: skip
        generated = faulty.stats()["generations"]
    assert result.returncode == 0, result.stderr[-3000:]
    rows = rows_of(tmp_path / "out", "f")
    assert generated == len(rows) == 80  # each answer once: a model's answer is not a server fault
    reasons = Counter((r["mode"], r.get("reject_reason")) for r in rows if r["kind"] == "quarantine")
    assert set(reasons) == {("instant", "think_token_in_instant"), ("thinking", "missing_think_end")}
    for row in rows:
        if row.get("reject_reason") == "think_token_in_instant":
            assert row["prompt_ids"][-2:] == [THINK, END] and END in row["output_ids"]
            assert "the instant answer holds </think> (163607) x1" in row["reject_detail"]
    manifest = json.loads((tmp_path / "out" / "manifests" / "run=f.json").read_text())
    assert manifest["counts"]["modes"]["instant"]["reasons"] == {
        "think_token_in_instant": reasons[("instant", "think_token_in_instant")]
    }
    # the default thresholds judge each mode's reason among that mode's samples: the same run fails without them
    with SimServerThread(SimConfig(faults={"think_in_instant": 1.0}).with_profile("instant")) as broken:
        failed = run(
            broken.url,
            tmp_path / "out2",
            "g",
            "--prompts",
            str(prompts_file(tmp_path, 80)),
            "--mode",
            "mix",
            "--instant-fraction",
            "0.4",
            "--no-canary",
        )
    assert failed.returncode != 0
    assert "of instant answers hold <think> (163606) or </think> (163607)" in failed.stderr


def test_the_two_modes_of_a_prompt_are_two_samples_to_an_incremental_refresh(tmp_path, sim):
    source, out = prompts_file(tmp_path, 20), tmp_path / "out"
    assert run(sim.url, out, "t", "--prompts", str(source)).returncode == 0
    instant = run(sim.url, out, "i", "--prompts", str(source), "--mode", "instant", "--incremental")
    assert instant.returncode == 0, instant.stderr[-2000:]
    assert len(rows_of(out, "i")) == 20  # none of them is published yet
    both = run(sim.url, out, "m", "--prompts", str(source), "--mode", "mix", "--incremental")
    assert both.returncode == 0 and "already published" in both.stderr + both.stdout
    assert not (out / "manifests" / "run=m.json").exists()
    ids = [r["sample_id"] for run_id in ("t", "i") for r in rows_of(out, run_id)]
    assert len(ids) == len(set(ids)) == 40


def test_a_tool_loop_keeps_its_conversation_s_mode(tmp_path):
    """Every step of an instant conversation is rendered instant (its prompt ends in <think></think>, the tool
    loop's history holds no reasoning) and its answers hold none; the loop extends its parent token for token."""
    config = SimConfig(tokenizer_path="standin:kimi-k2.5", tool_calls=True).with_profile("instant")
    records = [tool_loop_record(["search", "book"]), multi_turn_record(3)]
    source = write_jsonl(tmp_path / "c.jsonl", records)
    with SimServerThread(config) as server:
        result = run(
            server.url, tmp_path / "out", "c", "--prompts", str(source), "--turns", "each", "--mode", "instant"
        )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = rows_of(tmp_path / "out", "c")
    assert len(rows) == 3 + 3 and {r["mode"] for r in rows} == {"instant"}
    assert Counter(r["step_kind"] for r in rows) == {"user_turn": 4, "tool_result": 2}
    for row in rows:
        assert row["prompt_ids"][-2:] == [THINK, END] and END not in row["output_ids"]
        assert row["trajectory_end"] in (None, "complete")
    assert {r["prompt_drift"] for r in rows if r["step_kind"] == "tool_result"} == {"none"}
