"""An incremental run recognises published samples by prompt and sampling, not by ids: under an output root
whose published runs used another tokenizer, it is refused in one line instead of mixing two tokenizations. A
rerun of a run (the same --run-id) with an edited chat template is refused the same way, end to end."""

from __future__ import annotations

import dataclasses

import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.generation.stage import prepare_plan
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from eagle_datagen.storage.output_root import open_output_root
from eagle_datagen.tokenization.stage import setup_tokenize
from generation_runs import run_cli, run_options
from standin_variants import copy_standin, swap_byte_ranks

from conftest import user_record, write_jsonl

pytestmark = pytest.mark.slow


def test_an_incremental_run_with_another_tokenizer_is_refused(tmp_path, standin_dir):
    output = str(tmp_path / "out")
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        published = run_generation(
            run_options(tmp_path, [sim.url], run_id="first", prompts=4, output=output, incremental=True)
        )
    assert published.published["data"] + published.published["quarantine"] == 4

    folder = copy_standin(standin_dir, tmp_path / "tok")
    swap_byte_ranks(folder)
    opts = run_options(tmp_path, ["http://127.0.0.1:9"], run_id="second", prompts=6, output=output, incremental=True)
    opts = dataclasses.replace(opts, prompts=dataclasses.replace(opts.prompts, tokenizer=str(folder)))
    setup = setup_tokenize(opts.prompts)
    provenance = setup.loaded.provenance() | {"servers": [{"weight_version": "default"}]}
    with pytest.raises(ConfigError) as info:
        prepare_plan(setup, open_output_root(output), "second", opts, provenance, "default")
    line = str(info.value)
    assert "\n" not in line
    assert "published run first was made with another tokenizer" in line and "tiktoken.model" in line

    same = run_options(tmp_path, ["http://127.0.0.1:9"], run_id="third", prompts=6, output=output, incremental=True)
    setup = setup_tokenize(same.prompts)
    plan = prepare_plan(setup, open_output_root(output), "third", same, setup.loaded.provenance(), "default")
    assert plan.total_samples == 2  # the same tokenizer: only the two new prompts


def test_a_rerun_with_an_edited_chat_template_is_refused(tmp_path, standin_dir):
    folder = copy_standin(standin_dir, tmp_path / "tok")
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"question {i}?") for i in range(3)])
    out = tmp_path / "out"
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        args = ["--prompts", str(src), "--output", str(out), "--run-id", "r1", "--sglang-url", sim.url,
                "--draft-vocab-size", "16", "--tokenizer", str(folder)]  # fmt: skip
        first = run_cli(args)
        assert first.returncode == 0, first.stderr[-3000:]
        template = folder / "chat_template.jinja"
        template.write_text(template.read_text().replace("{{ tools_ts_str }}", "{{ tools_ts_str }}\n"))
        rerun = run_cli(args)
    assert rerun.returncode == 1, rerun.stderr[-3000:]
    [line] = [line for line in rerun.stderr.splitlines() if "error:" in line]
    assert "run r1 was made with another tokenizer than this one (chat_template_sha256 " in line, line


def test_a_rerun_with_the_other_encode_path_is_refused_and_the_manifest_records_the_path(tmp_path):
    """The tokenizer's own call makes the ids unless the user opts in to the tiktoken fast path; a run records which
    in its manifest, and continuing it with the other one is refused in one line naming the setting."""
    import json

    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"question {i}?") for i in range(3)])
    out = tmp_path / "out"
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        args = ["--prompts", str(src), "--output", str(out), "--run-id", "r1", "--sglang-url", sim.url,
                "--draft-vocab-size", "16", "--tokenizer", "standin:kimi-k2.5", "--trust-remote-code"]  # fmt: skip
        first = run_cli(args)
        assert first.returncode == 0, first.stderr[-3000:]
        rerun = run_cli([*args, "--tiktoken-fast-path"])
    manifest = json.loads((out / "manifests" / "run=r1.json").read_text())
    assert manifest["provenance"]["encode_path"] == "own_call"
    assert rerun.returncode == 1, rerun.stderr[-3000:]
    [line] = [line for line in rerun.stderr.splitlines() if "error:" in line]
    assert "run r1's prompt ids were made by own_call, this run would encode them by tiktoken_fast_path" in line, line
    assert "turn off --tiktoken-fast-path as it was" in line
