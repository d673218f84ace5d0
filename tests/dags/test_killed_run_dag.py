"""A category DAG run that died after planning (its shard tasks failed: a killed worker), then a new DAG run:
the new run's plan task finds the samples claimed, asks Airflow for the state of the DAG run that claimed
them (failed), releases its claims and generates the samples itself, never ending green and empty; a third
DAG run, with everything published, is a success with nothing to generate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle_datagen_airflow.runs import run_id_for

pytestmark = pytest.mark.slow

DAGS = Path(__file__).resolve().parents[2] / "dags"
PROMPTS = 6


@pytest.fixture
def deployment(tmp_path):
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    lines = [json.dumps({"messages": [{"role": "user", "content": f"add {i} and {i * 3}"}]}) for i in range(PROMPTS)]
    (tmp_path / "math.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "recipe.yaml").write_text(
        # a category of its own (eagle_datagen__<category>): Airflow keeps one asset per name
        "version: 1\nname: dagtest\ncategories:\n  killedmath:\n    sources: [math.jsonl]\n"
        "    sampling: {max_new_tokens: 64}\n",
        encoding="utf-8",
    )
    with SimServerThread(SimConfig().with_profile("instant")) as sim, pytest.MonkeyPatch.context() as mp:
        mp.setenv("EAGLE_DATAGEN_RECIPE", str(tmp_path / "recipe.yaml"))
        extra = {"urls": [sim.url], "tokenizer": "standin:kimi-k2.5", "trust_remote_code": True}
        mp.setenv("AIRFLOW_CONN_SGLANG_DEFAULT", json.dumps({"conn_type": "http", "extra": extra}))
        yield {"output": str(tmp_path / "out")}


def test_a_new_dag_run_takes_over_the_claims_of_a_failed_one(deployment, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.exceptions import AirflowFailException

    from eagle_datagen_airflow import tasks

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    dag = bag.get_dag("eagle_datagen__killedmath")
    conf = {"shard_size": 2, "draft_vocab_size": 16, "output": deployment["output"]}
    out = Path(deployment["output"])

    def killed(*args, **kwargs):
        raise AirflowFailException("worker killed")

    with monkeypatch.context() as mp:
        mp.setattr(tasks, "generate_shard", killed)
        dead = dag.test(run_conf=conf)
    states = {(ti.task_id, ti.map_index): ti.state for ti in dead.get_task_instances()}
    assert states[("plan", -1)] == "success" and states[("finalize", -1)] != "success", states
    dead_id = run_id_for("killedmath", dead.run_id)
    assert (out / "claims" / f"run={dead_id}.parquet").exists()  # it died holding its samples

    run = dag.test(run_conf=conf)
    states = {(ti.task_id, ti.map_index): ti.state for ti in run.get_task_instances()}
    assert all(state == "success" for state in states.values()), states
    manifest = json.loads((out / "manifests" / f"run={run_id_for('killedmath', run.run_id)}.json").read_text())
    assert manifest["counts"]["data"] + manifest["counts"]["quarantine"] == PROMPTS  # it took every sample over
    assert not (out / "claims" / f"run={dead_id}.parquet").exists()  # the dead run's claims were released

    rerun = dag.test(run_conf=conf)  # everything is published now: a success with nothing to generate
    states = {(ti.task_id, ti.map_index): ti.state for ti in rerun.get_task_instances()}
    assert rerun.state == "success" and states[("plan", -1)] == "success", states
    assert "failed" not in states.values()
    assert not (out / "manifests" / f"run={run_id_for('killedmath', rerun.run_id)}.json").exists()
