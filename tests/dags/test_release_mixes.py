"""The release DAG stores several named training mixes (the recipe's `mixes:`, its `export_mixes` param): one
`dag.test()` run over published runs in a local output root, each mix read back from where it is stored."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "export"))
from published_runs import publish, shard_rows  # noqa: E402

DAGS = Path(__file__).resolve().parents[2] / "dags"
RECIPE = """\
name: mixtest
categories:
  math: {sources: [math.jsonl]}
  code: {sources: [code.jsonl]}
mixes:
  phase1: {weights: {math: 2}}
  phase2: {weights: {math: 0.5, code: 3}, modes: [thinking], seed: 4}
"""


@pytest.fixture
def release_dag(tmp_path, monkeypatch, assets_of_this_test):
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "recipe.yaml").write_text(RECIPE)
    monkeypatch.setenv("EAGLE_DATAGEN_RECIPE", str(tmp_path / "recipe.yaml"))
    bag = DagBag(dag_folder=str(DAGS / "eagle_datagen_release.py"))
    assert bag.import_errors == {}
    return bag.get_dag("eagle_datagen_release")


def test_the_form_offers_the_recipes_mixes(release_dag):
    from airflow.sdk.exceptions import ParamValidationError
    from airflow.serialization.serialized_objects import DagSerialization

    params = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(release_dag)).params
    assert params.validate()["export_mixes"] == ["all"]
    assert params["export_mixes"] == ["all"]
    params.deep_merge({"export_mixes": ["phase1", "phase2"]}).validate()
    with pytest.raises(ParamValidationError, match="'phase9' is not one of"):
        params.deep_merge({"export_mixes": ["phase9"]}).validate()


def test_a_release_run_stores_each_named_mix(release_dag, tmp_path):
    from eagle_datagen.storage.output_root import LocalOutputRoot
    from eagle_datagen_airflow.runs import sanitize

    root = LocalOutputRoot(str(tmp_path / "root"))
    shards = {"math": [shard_rows(0, 6, "math", "r1")], "code": [shard_rows(50, 4, "code", "r1")]}
    instant = {s["sample_id"] for s in shards["code"][0][:2]}
    modes = {s["sample_id"]: "instant" if s["sample_id"] in instant else "thinking" for s in shards["code"][0]}
    publish(root, "r1", shards, k=None, modes=modes)
    conf = {
        "output": str(root.path),
        "aws_conn_id": "no_such_conn",
        "draft_vocab_size": 20,
        "export_formats": ["jsonl"],
        "export_mixes": ["all", "phase1", "phase2"],
    }
    run = release_dag.test(run_conf=conf)
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert run.state == "success", states
    exports = root.path / f"exports/release={sanitize(run.run_id)}"

    def lines(mix: str) -> list[dict]:
        return [json.loads(line) for line in (exports / mix / "jsonl/train.jsonl").read_text().splitlines()]

    assert len(lines("")) == 10  # `all`: where the release's exports always were
    assert len(lines("mix=phase1")) == 6 * 2 + 4
    phase2 = lines("mix=phase2")
    assert sum(line["category"] == "math" for line in phase2) == 3 and len(phase2) == 3 + 2 * 3
    assert not {line["sample_id"] for line in phase2} & instant
    info = yaml.safe_load((exports / "mix=phase2/jsonl/train.jsonl.export_info.yaml").read_text())
    assert info["mix"]["name"] == "phase2" and info["mix"]["weights"] == {"code": 3.0, "math": 0.5}
    assert info["rows_by_category"]["code"] == {
        "instant": {"read": 2, "exported": 0},
        "thinking": {"read": 2, "exported": 6},
    }
    assert info["location"] == str(exports / "mix=phase2/jsonl/train.jsonl")
