"""A claim written from the planner's arrays (16-byte digests turned back into text) is, byte for byte, the file
that the same ids as Python strings give (what the planner wrote before the arrays), in the planner's order:
category by category, each category's prompts in source order, each prompt's samples by index. Claims already
stored stay readable, and a rewritten claim is the same object."""

from __future__ import annotations

from dataclasses import replace

import pytest

from eagle_datagen.generation.claims import Claim, claim_key, read_claim, write_claim
from eagle_datagen.generation.plan import read_shard_rows
from eagle_datagen.generation.stage import SamplingOverrides, prepare_plan
from eagle_datagen.inference.samples import make_sample_id
from eagle_datagen.storage.output_root import LocalOutputRoot, open_output_root
from eagle_datagen.tokenization.stage import setup_tokenize
from generation_runs import run_options

from conftest import user_record, write_jsonl

CATEGORIES = ["math", "chat", "code"]  # not in sorted order in the source


def plan(tmp_path, run_id: str, prompts: int, incremental: bool):
    records = [
        user_record(f"question {i}: " + "word " * (i % 7), category=CATEGORIES[i % 3], id=f"r{i}")
        for i in range(prompts)
    ]
    source = write_jsonl(tmp_path / f"{run_id}.jsonl", records)
    options = run_options(
        tmp_path,
        ["http://127.0.0.1:9"],
        run_id=run_id,
        output=str(tmp_path / "out"),
        sampling=SamplingOverrides(max_new_tokens=1000, samples_per_prompt=3),
        shard_size=4,
        incremental=incremental,
    )
    options = replace(options, prompts=replace(options.prompts, prompts=[str(source)]))
    root = open_output_root(options.prompts.output)
    made = prepare_plan(setup_tokenize(options.prompts), root, run_id, options, {"servers": [{}]}, "w1")
    return root, made


def claimed_in_order(root, made) -> list[str]:
    """The plan's sample ids in the planner's order, from its shards (which hold them in plan order)."""
    rows = [row for info in made.shards for row in read_shard_rows(root, made, info.index)]
    rows.sort(key=lambda row: (row["category"], int(row["record_id"][1:])))
    return [
        make_sample_id(row["prompt_id"], k, made.model, made.categories[row["category"]].sampling)
        for row in rows
        for k in row["sample_indices"]
    ]


@pytest.mark.parametrize("incremental", [False, True])
def test_a_claim_from_arrays_is_the_file_python_strings_give(tmp_path, incremental):
    root, first = plan(tmp_path, "a", 30, incremental=False)
    run_id, made = "a", first
    if incremental:  # a second run while the first is in flight: it claims the 15 new prompts' samples only
        run_id = "b"
        root, made = plan(tmp_path, "b", 45, incremental=True)
    stored = root.read_bytes(claim_key(run_id))
    claim = read_claim(root, run_id)
    expected = claimed_in_order(root, made)
    assert claim.sample_ids == expected and len(expected) == (15 if incremental else 30) * 3
    again = LocalOutputRoot(str(tmp_path / "again"))
    write_claim(again, Claim(run_id, claim.model, claim.weight_version, claim.categories, expected))
    assert again.read_bytes(claim_key(run_id)) == stored
