"""The frozen held-out split (heldout.py): which prompts, the output root's write-once policy, and exports that never
hold a held-out row (rows written before the column included, by their prompt id)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from published_runs import assemble, publish, shard_rows
from readers import read_rows

from eagle_datagen.errors import ConfigError
from eagle_datagen.export import FORMATS
from eagle_datagen.export.stage import ExportOptions, run_export
from eagle_datagen.heldout import (
    POLICY_KEY,
    check_policy,
    first_prompt,
    freeze_policy,
    heldout_key,
    is_heldout,
    position,
    read_policy,
    record_key,
)
from eagle_datagen.records import compute_prompt_id, validate_record
from eagle_datagen.storage.output_root import LocalOutputRoot


def test_a_prompts_place_is_a_fixed_function_of_its_key():
    # pinned: a change of the hash would move prompts between training and evaluation in existing roots
    assert position("0" * 64) == pytest.approx(0.4310001333782603, abs=1e-15)
    keys = [f"{i:064x}" for i in range(4000)]
    share = sum(is_heldout(k, 0.1) for k in keys) / len(keys)
    assert 0.085 < share < 0.115  # a uniform hash: about the fraction asked
    assert all(is_heldout(k, 0.2) for k in keys if is_heldout(k, 0.1))  # a larger fraction holds out a superset


def test_the_key_is_the_first_prompt_so_a_conversation_goes_with_its_opening():
    u1 = {"role": "user", "content": "first question"}
    system = {"role": "system", "content": "be brief"}
    conversation = [system, u1, {"role": "assistant", "content": "an answer"}, {"role": "user", "content": "more"}]
    assert first_prompt(conversation) == [system, u1]
    assert heldout_key([system, u1], None) == compute_prompt_id([system, u1], None)  # a single prompt: its own id
    assert heldout_key(conversation, None) == heldout_key([system, u1], None)
    tools = [{"type": "function", "function": {"name": "f", "description": "", "parameters": {}}}]
    assert heldout_key([u1], tools) != heldout_key([u1], None)
    for messages in ([system, u1], conversation):  # a record's key as the spool computes it
        record = validate_record({"category": "chat", "messages": messages}, "x:1")
        assert record_key(record) == heldout_key(messages, None)


def test_the_policy_is_frozen_by_the_first_run_and_another_fraction_is_refused(tmp_path):
    root = LocalOutputRoot(str(tmp_path / "root"))
    publish(root, "before", {"math": [shard_rows(0, 3, "math", "before")]}, k=None)
    assert check_policy(root, 0.3) is None and read_policy(root) is None  # checking writes nothing
    first = freeze_policy(root, None, "r1")
    assert (first.fraction, first.created_by, first.published_before) == (0.02, "r1", ["before"])
    assert freeze_policy(root, None, "r2") == first and freeze_policy(root, 0.02, "r3") == first
    with pytest.raises(ConfigError) as refused:
        freeze_policy(root, 0.05, "r4")
    message = str(refused.value)
    assert "\n" not in message and "0.02" in message and "--heldout-fraction" in message and "r1" in message
    with pytest.raises(ConfigError, match="the heldout_fraction param"):
        check_policy(root, 0.05, "airflow")
    assert json.loads((root.path / POLICY_KEY).read_text())["fraction"] == 0.02


def _marked(rows: list[dict], held: set[int]) -> list[dict]:
    return [row | {"heldout": i in held} for i, row in enumerate(rows)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_export_format_holds_a_heldout_row_and_export_info_counts_them(tmp_path, fmt):
    root = LocalOutputRoot(str(tmp_path / "root"))
    freeze_policy(root, 0.3, "marked")
    marked = _marked(shard_rows(0, 10, "math", "marked"), {1, 4, 7})
    # a run published before the column: its held-out rows are those the policy holds out by prompt id
    unmarked = shard_rows(100, 30, "math", "old", seed=1)
    publish(root, "marked", {"math": [marked]})
    publish(root, "old", {"math": [unmarked]})
    old_held = {r["sample_id"] for r in unmarked if is_heldout(r["prompt_id"], 0.3)}
    assert 0 < len(old_held) < len(unmarked)
    for run_id, rows, held in (
        ("marked", marked, {r["sample_id"] for r in marked if r["heldout"]}),
        ("old", unmarked, old_held),
    ):
        out = tmp_path / (f"{run_id}.jsonl" if fmt == "jsonl" else f"{run_id}-{fmt}")
        summary = run_export(root, ExportOptions(format=fmt, to=str(out), run_id=run_id))
        exported = {sample_id for sample_id, _, _ in read_rows(fmt, out, tmp_path)}
        assert exported == {r["sample_id"] for r in rows} - held and summary.rows == len(rows) - len(held)
        info_file = out.with_name(out.name + ".export_info.yaml") if fmt == "jsonl" else out / "export_info.yaml"
        info = yaml.safe_load(info_file.read_text())
        assert info["rows"]["heldout_rows_skipped"] == len(held)
        assert info["heldout"] == {"fraction": 0.3, "rows_by_category": {"math": len(held)}}


def test_a_release_counts_heldout_rows_trains_none_and_its_export_holds_none(tmp_path):
    root = LocalOutputRoot(str(tmp_path / "root"))
    freeze_policy(root, 0.25, "a")
    rows = _marked(shard_rows(0, 12, "code", "a"), {0, 5})
    publish(root, "a", {"code": [rows]})
    release = assemble(root, "rel", ["code"], k=20)
    assert release["categories"]["code"]["heldout_rows"] == 2 and release["counts"]["heldout_rows"] == 2
    assert release["heldout"]["fraction"] == 0.25
    trained = sum(len(r["output_ids"]) for r in rows if not r["heldout"])
    assert release["categories"]["code"]["trained_tokens"] == trained
    out = tmp_path / "rel.jsonl"
    run_export(root, ExportOptions(format="jsonl", to=str(out), release_id="rel"))
    exported = [json.loads(line)["sample_id"] for line in out.read_text().splitlines()]
    assert sorted(exported) == sorted(r["sample_id"] for r in rows if not r["heldout"])


def test_an_older_runs_vocabulary_that_counted_heldout_rows_is_rebuilt_by_its_export(tmp_path):
    """A run published before the vocabulary left held-out rows out (its manifest does not say so): its export
    counts the exported rows and builds the vocabulary again, at the run's K; when they are too few, one line."""
    root = LocalOutputRoot(str(tmp_path / "root"))
    freeze_policy(root, 0.3, "old")
    rows = shard_rows(0, 40, "math", "old")
    for i, row in enumerate(rows):
        row["heldout"] = i % 3 == 0
    rows[0]["output_ids"] = [150_001] * 500 + rows[0]["output_ids"]  # frequent, and only in a held-out row
    published = publish(root, "old", {"math": [rows]}, k=8)  # as older code published: every row counted
    assert published is not None and 150_001 in published.target_ids().tolist()
    run_export(root, ExportOptions(format="speculators", to=str(tmp_path / "spec"), run_id="old"))
    info = yaml.safe_load((tmp_path / "spec" / "export_info.yaml").read_text())
    assert "counts held-out rows" in info["draft_vocab"]["from"] and info["draft_vocab"]["k"] == 8
    t2d = np.load(tmp_path / "spec" / "t2d-8.npy")
    assert not t2d[150_001]

    every = len({t for r in rows for t in r["output_ids"]})  # more than the rows left after the held-out ones hold
    big = publish(root, "old2", {"math": [[dict(r, run_id="old2", sample_id="f" + r["sample_id"][1:]) for r in rows]]},
                  k=every)  # fmt: skip
    assert big is not None
    with pytest.raises(ConfigError) as refused:
        run_export(root, ExportOptions(format="speculators", to=str(tmp_path / "spec2"), run_id="old2"))
    assert "\n" not in str(refused.value) and "--draft-vocab-size" in str(refused.value)
