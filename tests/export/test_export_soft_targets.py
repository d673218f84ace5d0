"""Soft targets in exports (`--logprobs`): jsonl lines carry the top-k logprobs of the kept output positions (cut
with the row), hf has the contract's columns, the other formats refuse with why, a run without them is an error."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from published_runs import publish, shard_rows
from readers import read_rows

from eagle_datagen.cli import main
from eagle_datagen.errors import ConfigError, DataGenError
from eagle_datagen.export.rows import SeqLimit
from eagle_datagen.export.stage import ExportOptions, run_export
from eagle_datagen.storage.output_root import LocalOutputRoot

K = 3


def with_soft_targets(rows: list[dict]) -> list[dict]:
    """The rows with top-k logprobs as a run with --top-logprobs K stores them (the first entry the sampled token)."""
    for r in rows:
        n = len(r["output_ids"])
        rng = np.random.default_rng(len(r["prompt_ids"]) + n)
        top = np.sort(-rng.exponential(2.0, (n, K)).astype(np.float32), axis=1)[:, ::-1]
        top[0, -1] = -np.inf  # a token the temperature left no probability
        ids = np.stack([np.asarray(r["output_ids"]), np.full(n, 7), np.full(n, 9)], axis=1)
        r |= {"top_logprob_ids": ids.reshape(-1).tolist(), "top_logprobs": top.reshape(-1).tolist(),
              "output_logprobs": top[:, 0].tolist()}  # fmt: skip
    return rows


@pytest.fixture
def soft(tmp_path):
    root = LocalOutputRoot(str(tmp_path / "root"))
    rows = with_soft_targets(shard_rows(0, 6, "math", "soft"))
    publish(root, "soft", {"math": [rows]}, k=None)
    publish(root, "plain", {"math": [shard_rows(50, 2, "math", "plain")]}, k=None)
    return root, rows


def test_jsonl_lines_carry_the_kept_positions_soft_targets(soft, tmp_path):
    root, rows = soft
    target = tmp_path / "soft.jsonl"
    run_export(root, ExportOptions("jsonl", str(target), run_id="soft", limit=SeqLimit(30), logprobs=True))
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    by_id = {r["sample_id"]: r for r in rows}
    assert len(lines) == len(read_rows("jsonl", target, tmp_path))
    for line in lines:
        row = by_id[line["sample_id"]]
        kept = sum(line["loss_mask"])  # the output positions the cut kept
        assert line["top_logprobs_k"] == K
        assert line["top_logprob_ids"] == row["top_logprob_ids"][: kept * K]
        # the float32 values in their shortest text, -inf as null (JSON has no -inf)
        got = np.array([-np.inf if v is None else v for v in line["top_logprobs"]], np.float32)
        assert np.array_equal(got, np.float32(row["top_logprobs"][: kept * K]))
        assert np.array_equal(np.float32(line["output_logprobs"]), np.float32(row["output_logprobs"][:kept]))
        assert line["top_logprob_ids"][::K] == line["input_ids"][len(line["input_ids"]) - kept :]
    info = yaml.safe_load((tmp_path / "soft.jsonl.export_info.yaml").read_text())
    assert info["logprobs"] is True


def test_hf_has_the_contract_columns_and_other_formats_refuse(soft, tmp_path):
    import datasets

    root, rows = soft
    run_export(root, ExportOptions("hf", str(tmp_path / "hf"), run_id="soft", logprobs=True))
    loaded = datasets.load_from_disk(str(tmp_path / "hf"))
    assert loaded.features["top_logprobs"].feature.dtype == "float32"
    assert loaded[0]["top_logprob_ids"] == rows[0]["top_logprob_ids"]
    for fmt in ("speculators", "specforge", "torchspec"):
        with pytest.raises(ConfigError, match=f"{fmt} does not carry soft targets .*computes the target's full"):
            run_export(root, ExportOptions(fmt, str(tmp_path / fmt), run_id="soft", logprobs=True, draft_vocab_size=4))
    with pytest.raises(DataGenError, match="has no top-k logprobs .*export without --logprobs"):
        run_export(root, ExportOptions("jsonl", str(tmp_path / "plain.jsonl"), run_id="plain", logprobs=True))
    assert not (tmp_path / "plain.jsonl").exists()


def test_the_command_line_flag(soft, tmp_path, capsys):
    root, _ = soft
    args = ["export", "--output", str(root.path), "--run-id", "soft", "--to", str(tmp_path / "x.jsonl"), "--logprobs"]
    assert main(args) == 0
    assert "top_logprobs_k" in (tmp_path / "x.jsonl").read_text().splitlines()[0]
    assert main([*args[:-3], "--format", "speculators", "--to", str(tmp_path / "s"), "--logprobs"]) == 1
    assert "export jsonl or hf" in capsys.readouterr().err
