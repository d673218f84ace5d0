"""Exact by construction: with default settings, `eagle-datagen tokenize` writes each Kimi-shaped folder's own ids,
whatever its `tokenization_kimi.py` adds to plain tiktoken (own_code_variants.py: sixteen such changes), on prompts
that exercise the change anywhere in the run. Each variant is first shown to matter: plain tiktoken encoding (the
opt-in fast path's encoder) gives other ids for its prompt, so a test of it could fail."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from own_code_variants import VARIANTS

from standin_variants import copy_standin

from conftest import REPO, user_record, write_jsonl

pytestmark = pytest.mark.slow
ORDINARY = 150  # ordinary prompts; the variant's trigger goes in at three places among them, none fixed


def prompt_set(trigger: str, seed: int) -> list[dict]:
    rows = [user_record(f"question {i}: what is {i} times {i + 1}?", id=f"plain-{i}") for i in range(ORDINARY)]
    for k, at in enumerate(sorted({(seed * 37 + 11) % ORDINARY, (seed * 53 + 70) % ORDINARY, ORDINARY - 1 - seed})):
        text = [trigger, f"before it. {trigger}", f"{trigger} and after it"][k]
        rows.insert(at, user_record(text, id=f"trigger-{k}"))
    rows.append({**user_record(trigger, id="trigger-system"), "messages": [
        {"role": "system", "content": f"system: {trigger}"}, {"role": "user", "content": "and?"}]})
    return rows


def own_ids(tokenizer, row: dict) -> list[int]:
    """What the folder's own code makes of the prompt, as SGLang's chat path asks it."""
    ids = tokenizer.apply_chat_template(row["messages"], add_generation_prompt=True, tokenize=True, return_dict=False)
    return list(ids)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_default_run_writes_the_folders_own_ids(name, standin_dir, tmp_path):
    from transformers import AutoTokenizer

    change, trigger = VARIANTS[name]
    folder = copy_standin(standin_dir, tmp_path / f"tok-{name}")
    change(folder)
    tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=True)
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": trigger}], tokenize=False)
    plain = tokenizer.model.encode(rendered, allowed_special="all")
    assert own_ids(tokenizer, user_record(trigger)) != plain, f"{name}: the change makes no difference to test"

    rows = prompt_set(trigger, seed=sorted(VARIANTS).index(name))
    src = write_jsonl(tmp_path / "p.jsonl", rows)
    out = tmp_path / "out"
    args = ["tokenize", "--prompts", str(src), "--tokenizer", str(folder), "--trust-remote-code",
            "--output", str(out), "--allow-special-token-text"]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "eagle_datagen.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    written = {}
    for part in out.rglob("*.parquet"):
        for row in pq.read_table(part, columns=["record_id", "prompt_ids"]).to_pylist():
            written[row["record_id"]] = row["prompt_ids"]
    assert set(written) == {row["id"] for row in rows}, "every prompt is written, none rejected"
    wrong = [row["id"] for row in rows if written[row["id"]] != own_ids(tokenizer, row)]
    assert not wrong, f"{name}: {len(wrong)} prompt(s) with other ids than the folder's own code: {wrong[:5]}"
    summary = json.loads((out / "tokenized" / "_summary.json").read_text())
    assert summary["tokenizer"]["encode_path"] == "own_call"


def test_there_are_a_dozen_or_more_variants():
    assert len(VARIANTS) >= 12
