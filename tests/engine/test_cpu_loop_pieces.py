"""The CPU loop's pieces without SGLang: the evaluate command each drafter is measured by (the on-policy run's
held-out prompts under the loop's output root), the prompt set (every prompt; the runs hold some out), the table,
and the process-tree usage the loop reports."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from eagle_datagen_stack import acceptance
from eagle_datagen_stack.acceptance import EvalRequest
from eagle_datagen_stack.cpu_loop import (
    LoopResult,
    LoopSettings,
    dtype_args,
    fitting_draft_vocab,
    format_table,
    prompt_set,
)
from eagle_datagen_stack.process_tree import TreeUsage


def test_each_drafter_is_measured_by_eagle_datagen_evaluate_on_the_runs_heldout_prompts(monkeypatch, tmp_path):
    calls = []

    def fake_run(command, **kwargs):
        calls.append(command)
        (tmp_path / "r.json").write_text(json.dumps({"schema": "eagle-datagen/evaluation/v1", "label": "B"}))

        class Done:
            returncode, stderr = 0, ""
        return Done()

    monkeypatch.setattr(acceptance.subprocess, "run", fake_run)
    request = EvalRequest(tmp_path / "out", "onpolicy", "tok", True, max_new_tokens=16)
    report = acceptance.evaluate_drafter("http://x", request, "B", tmp_path / "r.json")
    assert report["label"] == "B"
    [command] = calls
    assert command[:4] == [sys.executable, "-m", "eagle_datagen.cli", "evaluate"] and "--prompts" not in command
    for flag, value in (("--output", str(tmp_path / "out")), ("--run-id", "onpolicy"), ("--sglang-url", "http://x"),
                        ("--label", "B"), ("--to", str(tmp_path / "r.json")), ("--tokenizer", "tok"),
                        ("--max-new-tokens", "16")):  # fmt: skip
        assert command[command.index(flag) + 1] == value
    assert "--trust-remote-code" in command and "--compare-url" not in command


def test_the_paired_ab_sends_the_same_requests_to_the_rival(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(acceptance.subprocess, "run", lambda command, **kwargs: calls.append(command) or Ok())
    (tmp_path / "r.json").write_text("{}")
    acceptance.evaluate_drafter("http://a", EvalRequest(tmp_path, "r", "tok"), "on-policy", tmp_path / "r.json",
                                compare=("http://b", "random"))
    [command] = calls
    assert command[command.index("--sglang-url") + 1] == "http://a"
    assert command[command.index("--compare-url") + 1] == "http://b"
    assert command[command.index("--compare-label") + 1] == "random"


class Ok:
    returncode, stderr = 0, ""


def test_a_failed_evaluation_stops_the_loop_with_its_error(monkeypatch, tmp_path):
    class Failed:
        returncode, stderr = 1, "eagle-datagen: error: http://x: not a speculative server"

    monkeypatch.setattr(acceptance.subprocess, "run", lambda command, **kwargs: Failed())
    with pytest.raises(RuntimeError, match="evaluate failed .1.: eagle-datagen: error: http://x: not a speculative"):
        acceptance.evaluate_drafter("http://x", EvalRequest(tmp_path, "r", "tok"), "C", tmp_path / "r.json")


def test_the_prompt_set_holds_every_prompt_of_the_loops_categories(tmp_path):
    source = tmp_path / "prompts"
    source.mkdir()
    for category, n in (("math", 4), ("chat", 3), ("code", 5)):
        rows = [{"category": category, "messages": [{"role": "user", "content": f"{category} {i}"}]} for i in range(n)]
        (source / f"{category}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    (tmp_path / "w").mkdir()
    path = prompt_set(LoopSettings(work=tmp_path / "w", prompts=source, categories=("math", "chat")))
    written = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["category"] for r in written] == ["math"] * 4 + ["chat"] * 3  # none held out here: the runs do that


def test_table_has_a_row_per_category_and_a_column_per_drafter(tmp_path):
    def report(mean):
        cell = {"requests": 6, "failed": 0, "accept_length_total": {"value": mean, "ci95": [mean - 0.1, mean + 0.1]}}
        return {"categories": {"chat": cell, "math": cell}, "overall": {**cell, "requests": 12}}

    result = LoopResult({"random": report(1.05), "off-policy": report(1.2), "on-policy": report(3.9)},
                        {"train": 60.0}, {"train": 70.0}, 3 * 2**30, LoopSettings(work=tmp_path))
    lines = format_table(result).splitlines()
    assert lines[1].split() == ["category", "(prompts)", "random", "off-policy", "on-policy"]
    assert lines[2].startswith("chat (6)") and "3.90 [3.80, 4.00]" in lines[2] and "1.05 [0.95, 1.15]" in lines[2]
    assert lines[4].startswith("overall (12)")
    assert "peak memory 3.0 GiB" in lines[-1]
    diff = {"value": 2.7, "ci95": [2.5, 2.9]}
    paired = LoopResult(result.reports, {}, {}, 0, LoopSettings(work=tmp_path),
                        {"random": {"overall": {"accept_length_total_diff": diff, "paired_prompts": 12}}})
    row = format_table(paired).splitlines()[5]
    assert row.startswith("on-policy - random") and row.endswith("+2.70 [+2.50, +2.90] (12 paired)")


def test_tree_usage_counts_a_child_that_has_ended():
    burn = ("import time\nheld = b'x' * (80 * 2**20)\nend = time.process_time() + 1.0\n"
            "while time.process_time() < end: pass")
    with TreeUsage(every_s=0.1) as usage:
        before = usage.cpu_seconds()
        subprocess.run([sys.executable, "-c", burn], check=True)
        time.sleep(0.2)
        spent = usage.cpu_seconds() - before
    assert 0.8 <= spent <= 3.0, spent  # the child's second (the last tenth of a second may be missed)
    assert usage.peak_bytes >= 80 * 2**20


def test_the_draft_vocabulary_is_at_most_what_the_run_supervised(tmp_path, capsys):
    (tmp_path / "manifests").mkdir()
    summary = {"token_frequency": {"distinct_tokens": 218, "total_tokens": 900}}
    (tmp_path / "manifests" / "run=onpolicy.summary.json").write_text(json.dumps(summary))
    assert fitting_draft_vocab(tmp_path, "onpolicy", 128) == 128 and capsys.readouterr().out == ""
    assert fitting_draft_vocab(tmp_path, "onpolicy", 256) == 218
    assert "run onpolicy's draft vocabulary: 218 tokens" in capsys.readouterr().out  # said, not silent


def test_a_float32_checkpoint_is_served_in_float32(tmp_path):
    for dtype, args in (("float32", ("--dtype", "float32")), ("bfloat16", ())):
        (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": dtype}))
        assert dtype_args(tmp_path) == args  # SGLang's `auto` would serve float32 weights as float16
