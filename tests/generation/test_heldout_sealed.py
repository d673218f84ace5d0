"""The held-out split stays sealed (heldout.py): a run's draft vocabulary (and so every export that uses it) counts
no held-out row, an older run's vocabulary that did is rebuilt by its export, and a dry run freezes no fraction."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from eagle_datagen.errors import ConfigError
from eagle_datagen.export.stage import ExportOptions, run_export
from eagle_datagen.generation.plan import load_plan
from eagle_datagen.generation.publish import PublishOptions, finalize_run
from eagle_datagen.generation.stage import prepare_plan
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.heldout import POLICY_KEY, read_policy
from eagle_datagen.profile import load_profile
from eagle_datagen.stats.draft_vocab import DraftVocab
from eagle_datagen.storage.manifest import manifest_key, read_manifest
from eagle_datagen.storage.output_root import LocalOutputRoot
from eagle_datagen.tokenization.stage import setup_tokenize
from generation_runs import run_options


def _tokens(rows: list[dict]) -> set[int]:
    return {t for row in rows for t in row["output_ids"]}


def _data_rows(root: LocalOutputRoot, run_id: str) -> list[dict]:
    return [row for part in sorted(root.path.glob(f"data/category=*/run={run_id}/*.parquet"))
            for row in pq.read_table(part).to_pylist()]  # fmt: skip


def _vocab_ids(root: LocalOutputRoot, run_id: str) -> set[int]:
    [entry] = [f for f in read_manifest(root, run_id)["files"] if f["kind"] == "draft_vocab"]
    return set(DraftVocab.from_safetensors_bytes(root.read_bytes(entry["key"])).target_ids().tolist())


@pytest.mark.slow
def test_a_token_only_heldout_rows_hold_is_in_no_draft_vocabulary_of_the_run_or_its_export(tmp_path):
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    output = tmp_path / "out"
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        options = run_options(tmp_path, [sim.url], run_id="r", prompts=30, output=str(output), heldout_fraction=0.3)
        summary = run_generation(options)
    assert summary.published is not None
    root = LocalOutputRoot(str(output))
    rows = _data_rows(root, "r")
    held, trained = [r for r in rows if r["heldout"]], [r for r in rows if not r["heldout"]]
    only_held = _tokens(held) - _tokens(trained)
    assert held and trained and only_held  # the check below can fail
    manifest = read_manifest(root, "r")
    assert manifest["counts"]["trained_tokens"] == sum(len(r["output_ids"]) for r in trained)
    assert manifest["heldout"]["in_draft_vocab"] is False

    # published again with a vocabulary of every distinct trained token: exactly those, none held out alone
    distinct = len(_tokens(trained))
    root.path.joinpath(manifest_key("r")).unlink()
    plan = load_plan(root, "r")
    finalize_run(root, plan, load_profile("kimi-k2.5"), PublishOptions(draft_vocab_size=distinct))
    assert _vocab_ids(root, "r") == _tokens(trained)

    # an export with the run's own vocabulary carries it; one that builds its own counts the exported rows only
    run_export(root, ExportOptions(format="speculators", to=str(tmp_path / "spec"), run_id="r"))
    t2d = np.load(tmp_path / "spec" / f"t2d-{distinct}.npy")
    assert set(np.flatnonzero(t2d).tolist()) == _tokens(trained)
    info = yaml.safe_load((tmp_path / "spec" / "export_info.yaml").read_text())
    assert info["draft_vocab"]["from"] == "the run's draft vocabulary"
    assert info["rows"]["heldout_rows_skipped"] == len(held)


def test_a_dry_run_freezes_no_fraction_and_a_later_run_chooses_its_own(tmp_path):
    output = str(tmp_path / "out")
    root = LocalOutputRoot(output)

    def plan(run_id: str, **changes):
        opts = run_options(tmp_path, ["http://127.0.0.1:9"], run_id=run_id, prompts=12, output=output, **changes)
        provenance = {"servers": [{"weight_version": "w1"}]}
        return prepare_plan(setup_tokenize(opts.prompts), root, run_id, opts, provenance, "w1"), opts

    dry, _ = plan("dry", dry_run=True, heldout_fraction=0.5)
    assert dry.heldout["fraction"] == 0.5  # planned as a run would be
    assert not root.list(POLICY_KEY) and read_policy(root) is None  # ... and nothing frozen
    real, _ = plan("real", heldout_fraction=0.1)
    assert real.heldout["fraction"] == 0.1 and read_policy(root).fraction == 0.1
    assert read_policy(root).created_by == "real"
    with pytest.raises(ConfigError, match="froze its held-out fraction at 0.1"):
        plan("dry2", dry_run=True, heldout_fraction=0.5)  # a dry run is refused as the run would be


def test_a_dry_runs_plan_generated_later_freezes_its_fraction_then(tmp_path):
    output = str(tmp_path / "out")
    root = LocalOutputRoot(output)
    opts = run_options(tmp_path, ["http://127.0.0.1:9"], run_id="d", prompts=12, output=output, dry_run=True,
                       heldout_fraction=0.4)  # fmt: skip
    provenance = {"servers": [{"weight_version": "w1"}]}
    setup = setup_tokenize(opts.prompts)
    first = prepare_plan(setup, root, "d", opts, provenance, "w1")
    assert read_policy(root) is None
    import dataclasses

    again = prepare_plan(setup, root, "d", dataclasses.replace(opts, dry_run=False), provenance, "w1")
    assert again.heldout == first.heldout and read_policy(root).fraction == 0.4
