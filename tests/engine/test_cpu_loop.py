"""The loop closed on the CPU (issues 30, 36): the project's on-policy data trains an EAGLE-3 drafter that the real
SGLang target accepts better than one trained, with the same step budget, on another model's answers to the same
prompts, and better than an untrained one. The target is a small model trained so that its answer depends on the
prompt (engine/build_loop_models.py), so held-out prompts ask of a drafter what it learned of the target.
eagle_datagen_stack.cpu_loop runs the whole chain with the product's own parts (generate with the frozen held-out
split, export, hidden states, `speculators train`, `eagle-datagen convert-drafter`, serve with EAGLE3, the paired A/B
of `eagle-datagen evaluate --compare-url` on the on-policy run's held-out prompts, two drafters served side by side);
docs/internals/evaluation-cpu-loop.md has the table and what it costs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from eagle_datagen.evaluation.intervals import MIN_PROMPTS
from eagle_datagen_stack.cpu_loop import DRAFTERS, LoopSettings, format_table, missing_parts, run_loop

pytestmark = [pytest.mark.slow, pytest.mark.engine]

HELDOUT = {"chat": 8, "code": 6, "math": 6, "multilingual": 6}  # the demo prompts under the split's fraction 0.4
DRAFTERS_BY_NAME = ("on-policy", "off-policy", "random")
RIVALS = ("off-policy", "random")  # each A/B: the on-policy drafter (A) against one of them (B)
NUM_STEPS = 3  # the loop's drafters draft 3 tokens per verify step: at most 4 tokens per step


def _parts_or_skip() -> None:
    reason = missing_parts()
    if reason is None:
        return
    if os.environ.get("EAGLE_DATAGEN_REQUIRE_ENGINE") == "1":
        pytest.fail(f"the CPU loop: {reason} (make test builds it first)")
    pytest.skip(f"the CPU loop needs the engine and the speculators environment: {reason}")


def test_on_policy_data_trains_the_drafter_the_target_accepts(tmp_path):
    _parts_or_skip()
    result = run_loop(LoopSettings(work=tmp_path / "loop", heldout_fraction=0.4))
    print(format_table(result))
    out = tmp_path / "loop" / "out"
    heldout = {run: heldout_prompt_ids(out, run, ("data", "quarantine")) for run in ("onpolicy", "offpolicy")}
    assert heldout["onpolicy"] == heldout["offpolicy"]  # one split: the same prompts set aside in both runs
    assert {c: len(ids) for c, ids in heldout["onpolicy"].items()} == HELDOUT
    measured = heldout_prompt_ids(out, "onpolicy", ("data",))  # evaluate's prompt set: the run's held-out rows
    answers = heldout_answers(out, "onpolicy")
    assert len(set(answers)) >= len(answers) // 4, answers  # the target answers held-out prompts differently
    assert min(len(ids) for ids in measured.values()) >= 3, measured  # a few may be quarantined by the run
    for run in ("onpolicy", "offpolicy"):  # no export holds a held-out row: each is counted as left out
        info = yaml.safe_load((tmp_path / "loop" / f"{run}-speculators" / "export_info.yaml").read_text())
        stored = json.loads((out / "manifests" / f"run={run}.json").read_text())["heldout"]["by_category"]
        assert info["heldout"]["rows_by_category"] == {c: n["data"] for c, n in stored.items() if n["data"]}, run
    reports = result.reports
    categories = sorted(reports["on-policy"]["categories"])
    assert categories == ["chat", "code", "math", "multilingual"]
    for drafter in DRAFTERS:  # every held-out prompt sent to each drafter, two drafters side by side in each A/B
        overall = reports[drafter]["overall"]
        assert reports[drafter]["prompts"]["source"] == "heldout", drafter
        assert reports[drafter]["prompts"]["per_category"] == {c: len(ids) for c, ids in measured.items()}, drafter
        assert overall["requests"] == sum(len(ids) for ids in measured.values())
        # an answer that ends with the prefill's token has no verify step: evaluate counts it `unmeasured`
        assert overall["failed"] + overall["unmeasured"] <= 1, (drafter, overall)
        assert reports[drafter]["label"] == drafter
    for drafter in DRAFTERS:  # what must hold of any evaluation: intervals inside the possible range
        for name, block in [*reports[drafter]["categories"].items(), ("overall", reports[drafter]["overall"])]:
            headline, no_prefill = block["accept_length_total"], block["accept_length_no_prefill"]
            assert headline["n"] == block["prompts"] and headline["ci95"], (drafter, name)
            assert 1.0 <= headline["ci95"][0] <= headline["value"] <= headline["ci95"][1], (drafter, name, headline)
            assert 1.0 <= no_prefill["ci95"][0] <= no_prefill["ci95"][1] <= NUM_STEPS + 1, (drafter, name, no_prefill)
            assert (headline["warning"] is not None) == (headline["n"] < MIN_PROMPTS), (drafter, name)
    # What the data must show, measured prompt for prompt on the same requests (the paired A/B): the target accepts
    # the drafter trained on its own answers better than the one trained on another model's answers to the same
    # prompts, and better than an untrained one; and another model's text, in the target's shape and phrases,
    # teaches a drafter more than nothing.
    on, off, random = (reports[d]["overall"]["accept_length_total"]["value"] for d in DRAFTERS_BY_NAME)
    versus_off, versus_random = (result.comparisons[r]["overall"]["accept_length_total_diff"] for r in RIVALS)
    assert versus_off["ci95"][0] > 0 and on > off, format_table(result)
    assert versus_random["ci95"][0] > 0, format_table(result)
    assert random < off < on, format_table(result)

def heldout_prompt_ids(out: Path, run: str, kinds: tuple[str, ...]) -> dict[str, set[str]]:
    """The prompt ids of a run's held-out rows (of `kinds`: data, quarantine), per category."""
    found: dict[str, set[str]] = {}
    for part in (p for kind in kinds for p in (out / kind).glob(f"category=*/run={run}/*.parquet")):
        table = pq.read_table(part)
        if "heldout" not in table.column_names or "prompt_id" not in table.column_names:
            continue
        for row in table.select(["category", "prompt_id", "heldout"]).to_pylist():
            if row["heldout"]:
                found.setdefault(row["category"], set()).add(row["prompt_id"])
    return found



def heldout_answers(out: Path, run: str) -> list[tuple[int, ...]]:
    """The output ids of a run's held-out data rows."""
    rows = [row for part in (out / "data").glob(f"category=*/run={run}/*.parquet")
            for row in pq.read_table(part, columns=["heldout", "output_ids"]).to_pylist()]
    return [tuple(row["output_ids"]) for row in rows if row["heldout"]]
