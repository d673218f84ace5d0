"""The held-out split through real runs against the stand-in server: the plan marks each prompt by its key, the
rows carry the mark, the manifest records the policy and the counts, and a prompt held out by one run stays held
out in a later run with more data; a run asking for another fraction is refused before any request."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.heldout import heldout_key, is_heldout
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from generation_runs import run_options

from conftest import user_record, write_jsonl

pytestmark = pytest.mark.slow
FRACTION = 0.3


def rows_of(root: Path, run_id: str) -> list[dict]:
    rows = []
    for kind in ("data", "quarantine"):
        for part in sorted(root.glob(f"{kind}/category=*/run={run_id}/part-*.parquet")):
            rows += pq.read_table(part, columns=["prompt_id", "category", "heldout"]).to_pylist()
    return rows


def test_heldout_prompts_stay_heldout_as_data_is_added_and_the_manifest_counts_them(tmp_path):
    old = [user_record(f"old question {i} " + "w " * i, category="math" if i % 2 else "chat") for i in range(40)]
    new = [user_record(f"new question {i} " + "w " * i, category="chat") for i in range(30)]
    first_src = write_jsonl(tmp_path / "first.jsonl", old)
    second_src = write_jsonl(tmp_path / "second.jsonl", old + new)
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        base = run_options(tmp_path, [sim.url], run_id="first", heldout_fraction=FRACTION)
        run_generation(dataclasses.replace(base, prompts=dataclasses.replace(base.prompts, prompts=[str(first_src)])))
        second = dataclasses.replace(
            base,
            run_id="second",
            heldout_fraction=None,
            prompts=dataclasses.replace(base.prompts, prompts=[str(second_src)]),
        )
        run_generation(second)
        with pytest.raises(ConfigError, match="froze its held-out fraction at 0.3"):
            run_generation(dataclasses.replace(second, run_id="third", heldout_fraction=0.1))
        assert sim.stats()["generations"] == 40 + 70  # the refused run sent nothing
    root = tmp_path / "out"
    expected = {}
    for record in old + new:
        messages = record["messages"]
        expected[heldout_key(messages, None)] = is_heldout(heldout_key(messages, None), FRACTION)
    first, second_rows = rows_of(root, "first"), rows_of(root, "second")
    assert all(r["heldout"] == expected[r["prompt_id"]] for r in first + second_rows)  # one user message: key = id
    held_first = {r["prompt_id"] for r in first if r["heldout"]}
    held_second = {r["prompt_id"] for r in second_rows if r["heldout"]}
    assert held_first and held_first == {p for p in held_second if p in {r["prompt_id"] for r in first}}
    assert held_second - held_first  # the new data holds out its own share too
    manifest = json.loads((root / "manifests/run=second.json").read_text())
    assert manifest["heldout"]["policy"]["fraction"] == FRACTION
    assert manifest["heldout"]["policy"]["created_by"] == "first"
    for category, counts in manifest["heldout"]["by_category"].items():
        held = sum(1 for r in second_rows if r["category"] == category and r["heldout"])
        assert counts["data"] + counts["quarantine"] == held
    plan = json.loads((root / "plans/run=second/plan.json").read_text())
    assert plan["heldout"]["fraction"] == FRACTION
