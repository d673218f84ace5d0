"""End to end with SpecForge itself (0.2.0, in its own environment: `make specforge-env`): the reader `specforge
train` runs on `data.prompts_path` (`specforge.data.prompt_builder.prepare_prompt_tasks`, which takes a file whose
first record has `input_ids` and `loss_mask` as pre-tokenized) reads our `specforge` export and gets our rows' ids
and masks, in order; with its `data.max_length` it cuts and drops as our `--max-seq-len` does; `torch.load`, as
SpecForge's `load_vocab_mapping` calls it, reads our `vocab_mapping.pt`. Skipped when the side environment is not
there (SpecForge's training itself needs CUDA and its own SGLang: docs/internals/training.md)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from published_runs import REPO, publish, shard_rows

from eagle_datagen.export.rows import SeqLimit
from eagle_datagen.export.stage import ExportOptions, run_export
from eagle_datagen.storage.output_root import LocalOutputRoot

PYTHON = Path(os.environ.get("EAGLE_DATAGEN_SPECFORGE_PYTHON", REPO / ".venv-specforge" / "bin" / "python"))
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not PYTHON.exists(), reason=f"no SpecForge environment at {PYTHON} (make specforge-env)"),
]

READ = """
import json, sys, torch
from specforge.data.prompt_builder import prepare_prompt_tasks
path, max_length, mapping = sys.argv[1], int(sys.argv[2]), sys.argv[3]
tasks = prepare_prompt_tasks(path, None, chat_template=None, max_length=max_length, is_preformatted=False,
                             train_only_last_turn=False, cache_dir=None, cache_key=None, num_proc=None,
                             min_loss_tokens=1)  # EAGLE-3's minimum (its model provider's minimum_loss_tokens)
vocab = torch.load(mapping)  # as SpecForge's load_vocab_mapping: torch 2.13's weights-only default
assert vocab["d2t"].dtype == torch.int64 and vocab["t2d"].dtype == torch.bool
targets = (vocab["d2t"] + torch.arange(len(vocab["d2t"]))).tolist()
assert targets == vocab["t2d"].nonzero().flatten().tolist()
print(json.dumps({"rows": [[t["payload"]["input_ids"], t["payload"]["loss_mask"]] for t in tasks],
                  "draft_ids": targets}))
"""


def specforge_reads(path: Path, max_length: int, mapping: Path) -> dict:
    env = dict(os.environ, PYTHONPATH="")
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run([str(PYTHON), "-c", READ, str(path), str(max_length), str(mapping)], capture_output=True,
                          text=True, env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def our_rows(path: Path) -> list[list[list[int]]]:
    return [[row["input_ids"], row["loss_mask"]] for row in map(json.loads, path.read_text().splitlines())]


def test_specforges_own_reader_reads_our_export(tmp_path):
    root = LocalOutputRoot(str(tmp_path / "root"))
    shards = {"math": [shard_rows(0, 20, "math", "r1")], "code": [shard_rows(50, 10, "code", "r1")]}
    draft = publish(root, "r1", shards)
    assert draft is not None
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    run_export(root, ExportOptions("specforge", str(whole), "r1"))
    run_export(root, ExportOptions("specforge", str(cut), "r1", limit=SeqLimit(32)))
    ours = our_rows(whole / "train.jsonl")
    assert len(ours) == 30 and any(sum(mask) == 0 or len(ids) > 32 for ids, mask in ours)  # the cut has work to do

    read = specforge_reads(whole / "train.jsonl", 100_000, whole / "vocab_mapping.pt")
    assert read["rows"] == ours  # every row, in order, its ids and mask as we wrote them
    assert read["draft_ids"] == [int(t) for t in draft.target_ids()]

    ours_cut = our_rows(cut / "train.jsonl")
    assert len(ours_cut) < len(ours)  # rows left without a supervised token were dropped
    assert specforge_reads(whole / "train.jsonl", 32, whole / "vocab_mapping.pt")["rows"] == ours_cut
    assert specforge_reads(cut / "train.jsonl", 32, cut / "vocab_mapping.pt")["rows"] == ours_cut


LOAD = """
import json, sys
from specforge.config import load_config
config = load_config(sys.argv[1], sys.argv[2:])
print(json.dumps({"mode": config.mode, "strategy": config.training.strategy, "prompts": config.data.prompts_path,
                  "max_length": config.data.max_length, "vocab": config.model.vocab_mapping_path,
                  "target": config.model.target_model_path}))
"""


def documented_run(tmp_path: Path) -> tuple[Path, list[str]]:
    """docs/internals/training.md's run.yaml (the yaml block that begins `# run.yaml`) and its `specforge train`
    overrides."""
    text = (REPO / "docs" / "internals" / "training.md").read_text()
    block = text[text.index("```yaml\n# run.yaml") + len("```yaml\n") :]
    run = tmp_path / "run.yaml"
    run.write_text(block[: block.index("```")])
    command = next(line for line in text.splitlines() if line.startswith("specforge train --config run.yaml"))
    return run, command.split()[4:]


def specforge_loads(run: Path, overrides: list[str]) -> dict:
    done = subprocess.run([str(PYTHON), "-c", LOAD, str(run), *overrides], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=""), timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_specforges_config_loader_accepts_the_documented_run_and_the_exports_command(tmp_path):
    run, overrides = documented_run(tmp_path)
    loaded = specforge_loads(run, overrides)
    assert loaded["mode"] == "online" and loaded["strategy"] == "eagle3"
    assert (loaded["prompts"], loaded["vocab"], loaded["max_length"]) == ("sf/train.jsonl", "sf/vocab_mapping.pt", 8192)
    # the command export_info.yaml names, with the export's own paths, on the same run.yaml
    root = LocalOutputRoot(str(tmp_path / "root"))
    publish(root, "r1", {"math": [shard_rows(0, 5, "math", "r1")]}, k=8)
    run_export(root, ExportOptions("specforge", str(tmp_path / "sf"), "r1", limit=SeqLimit(4096)))
    info = (tmp_path / "sf" / "export_info.yaml").read_text()
    command = yaml.safe_load(info)["train_command"].split("  #")[0].split()
    assert command[:4] == ["specforge", "train", "--config", "run.yaml"]
    loaded = specforge_loads(run, command[4:])
    assert loaded["prompts"] == f"{tmp_path / 'sf'}/train.jsonl" and loaded["max_length"] == 4096
    assert loaded["target"] == "moonshotai/Kimi-K2.5"
