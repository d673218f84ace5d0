"""The release DAG's export option: the task after assemble_release, its params, and what it stores under
exports/release=<id>/<format>/ (read back with the trainers' readers)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "export"))
from published_runs import VOCAB, assemble, publish, shard_rows  # noqa: E402
from readers import check_npy_maps, expected_rows, read_rows  # noqa: E402

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="module")
def release_dag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS / "eagle_datagen_release.py")).get_dag("eagle_datagen_release")


def test_export_runs_after_the_release_and_its_params_are_checked(release_dag):
    from airflow.sdk.exceptions import ParamValidationError
    from airflow.serialization.serialized_objects import DagSerialization

    assert release_dag.get_task("export_release").upstream_task_ids == {"assemble_release"}
    values = release_dag.params.validate()
    assert values["export_formats"] == [] and values["export_max_seq_len"] is None
    params = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(release_dag)).params
    params.deep_merge({"export_formats": ["speculators", "hf"], "export_max_seq_len": 4096}).validate()
    with pytest.raises(ParamValidationError, match="'axolotl' is not one of"):
        params.deep_merge({"export_formats": ["axolotl"]}).validate()


def test_export_release_stores_each_format_under_the_output_root(tmp_path):
    from eagle_datagen.storage.output_root import LocalOutputRoot
    from eagle_datagen_airflow.tasks import export_release

    root = LocalOutputRoot(str(tmp_path / "root"))
    shards = {"math": [shard_rows(0, 8, "math", "r1")], "code": [shard_rows(20, 4, "code", "r1")]}
    publish(root, "r1", shards, k=20)
    release = assemble(root, "rel", ["math", "code"], k=20)
    params = {"aws_conn_id": "no_such_conn", "output": str(root.path), "export_formats": ["speculators", "jsonl"]}
    stored = export_release({"release_id": "rel"}, params | {"export_max_seq_len": 30})
    assert [s["format"] for s in stored] == ["speculators", "jsonl"]
    folder = root.path / "exports/release=rel/speculators"
    samples = [s for tables in shards.values() for rows in tables for s in rows]
    assert sorted(read_rows("speculators", folder, tmp_path)) == sorted(expected_rows(samples, 30))
    published = np.load(folder / "t2d-20.npy")
    assert np.array_equal(check_npy_maps(folder, 20, VOCAB), np.flatnonzero(published))
    info = yaml.safe_load((folder / "export_info.yaml").read_text())
    assert info["location"] == str(folder) and f"--data-path {folder} " in info["train_command"]
    assert info["draft_vocab"]["k"] == release["draft_vocab"]["k"]
    assert (root.path / "exports/release=rel/jsonl/train.jsonl").exists()
    assert export_release({"release_id": "rel"}, params | {"export_max_seq_len": 30}) == stored  # a retry: no-op
