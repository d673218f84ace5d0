"""A refresh costs what is new: an incremental run skips the records whose samples are published before it
tokenizes them (counted: the tokenizer sees only the new records), and plans exactly the new samples. When the
published run rendered its prompts with another chat template, the refresh is refused in one line before anything is
tokenized: one tokenizer per output root."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.generation.incremental import NothingToDo
from eagle_datagen.generation.plan import shard_requests
from eagle_datagen.generation.stage import RunOptions, prepare_plan
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.storage.output_root import open_output_root
from eagle_datagen.tokenization import tokenize as tokenize_module
from eagle_datagen.tokenization.stage import setup_tokenize
from generation_runs import run_options

pytestmark = pytest.mark.slow


def plan(opts: RunOptions, monkeypatch, template: str | None = None) -> tuple[int, set[str]]:
    """(records tokenized, sample ids planned) of an incremental plan step."""
    counted = []
    inner = tokenize_module.tokenize_batch

    def counting(tokenizer, profile, records, *args, **kwargs):
        counted.append(len(records))
        return inner(tokenizer, profile, records, *args, **kwargs)

    monkeypatch.setattr(tokenize_module, "tokenize_batch", counting)
    setup = setup_tokenize(dataclasses.replace(opts.prompts, processes=1))
    if template is not None:
        setup.loaded = dataclasses.replace(setup.loaded, chat_template_sha256=template)
    root = open_output_root(opts.prompts.output)
    try:
        planned = prepare_plan(setup, root, opts.run_id, opts, setup.loaded.provenance(), None)
    except NothingToDo:
        return sum(counted), set()
    return sum(counted), {r.sample_id for s in planned.shards for r in shard_requests(root, planned, s.index)}


def test_a_refresh_tokenizes_only_the_new_records(tmp_path: Path, monkeypatch, caplog):
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    output = str(tmp_path / "out")
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        first = run_generation(run_options(tmp_path / "a", [sim.url], run_id="first", prompts=20, output=output))
    assert first.published["data"] + first.published["quarantine"] == 20
    alone = run_options(tmp_path / "b", ["http://127.0.0.1:9"], run_id="alone", prompts=23, output=str(tmp_path / "x"))
    _, everything = plan(alone, monkeypatch)
    _, old = plan(
        run_options(tmp_path / "c", ["http://127.0.0.1:9"], run_id="old", prompts=20, output=str(tmp_path / "y")),
        monkeypatch,
    )
    new = everything - old
    assert len(new) == 3

    refresh = run_options(
        tmp_path / "d", ["http://127.0.0.1:9"], run_id="nightly", prompts=23, output=output, incremental=True
    )
    tokenized, planned = plan(refresh, monkeypatch)
    assert tokenized == 3  # the 20 published records were never tokenized
    assert planned == new

    # a refresh with another chat template is refused in one line before anything is tokenized (issue 21: one
    # tokenizer per output root), rather than tokenizing every record to compare
    changed = dataclasses.replace(refresh, run_id="changed")
    with pytest.raises(ConfigError, match="published run first was made with another tokenizer"):
        plan(changed, monkeypatch, template="another template")
