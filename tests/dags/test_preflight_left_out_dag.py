"""A category DAG against two stand-in replicas, one with the echo bug on every answer: its preflight task
leaves the broken replica out with a warning and the run publishes from the other, the manifest listing it;
with min_endpoints 2 the preflight step fails, naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle_datagen_airflow.runs import run_id_for

pytestmark = pytest.mark.slow

DAGS = Path(__file__).resolve().parents[2] / "dags"
PROMPTS = 6


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    folder = tmp_path_factory.mktemp("leftout")
    lines = [json.dumps({"messages": [{"role": "user", "content": f"add {i} and {i * 3}"}]}) for i in range(PROMPTS)]
    (folder / "math.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "recipe.yaml").write_text(  # a category of its own: see test_sick_replica_dag.py
        "version: 1\nname: dagtest\ncategories:\n  leftoutmath:\n    sources: [math.jsonl]\n"
        "    sampling: {max_new_tokens: 256}\n",
        encoding="utf-8",
    )
    with (
        SimServerThread(SimConfig().with_profile("instant")) as good,
        SimServerThread(SimConfig(faults={"echo": 1.0}).with_profile("instant")) as broken,
        pytest.MonkeyPatch.context() as mp,
    ):
        mp.setenv("EAGLE_DATAGEN_RECIPE", str(folder / "recipe.yaml"))
        extra = {"urls": [good.url, broken.url], "tokenizer": "standin:kimi-k2.5", "trust_remote_code": True}
        mp.setenv("AIRFLOW_CONN_SGLANG_DEFAULT", json.dumps({"conn_type": "http", "extra": extra}))
        yield {"output": str(folder / "out"), "good": good, "broken": broken}


def states(run) -> dict[str, str]:
    return {ti.task_id: ti.state for ti in run.get_task_instances() if ti.map_index in (-1, 0)}


def test_a_replica_failing_preflight_is_left_out_of_the_dag_run(deployment, caplog):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    conf = {"draft_vocab_size": 16, "output": deployment["output"]}
    with caplog.at_level("WARNING", logger="eagle_datagen"):
        run = bag.get_dag("eagle_datagen__leftoutmath").test(run_conf=conf)
    found = states(run)
    assert set(found) == {"preflight", "plan", "generate_shard", "finalize"}, found  # an empty run passes any all()
    assert all(state == "success" for state in found.values()), found
    broken = deployment["broken"].url
    assert any("left out of this run" in r.getMessage() and broken in r.getMessage() for r in caplog.records)
    manifest_path = Path(deployment["output"]) / "manifests" / f"run={run_id_for('leftoutmath', run.run_id)}.json"
    manifest = json.loads(manifest_path.read_text())
    [left] = manifest["validation"]["endpoints_left_out"]
    assert left["url"] == broken and "prompt-echo bug" in left["reason"]
    assert manifest["counts"]["data"] == PROMPTS and list(manifest["counts"]["endpoints"]) == [deployment["good"].url]


def test_min_endpoints_two_in_the_run_conf_stops_the_dag_run_in_its_preflight_task(deployment, capfd):
    """Through the form's param and the run's conf, as a trigger would: the preflight task fails naming the
    replica left out, nothing downstream runs, nothing is published. (The task's retries, there for a server
    still starting, are made immediate here.)"""
    from datetime import timedelta

    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(DAGS)).get_dag("eagle_datagen__leftoutmath")
    preflight = dag.get_task("preflight")
    preflight.retry_delay, preflight.retry_exponential_backoff = timedelta(0), 0
    conf = {"draft_vocab_size": 16, "output": deployment["output"], "min_endpoints": 2}
    run = dag.test(run_conf=conf)
    captured = capfd.readouterr()
    logged = captured.out + captured.err  # the task's failure, as dag.test logs it
    found = states(run)
    assert run.state == "failed" and found["preflight"] == "failed", found
    assert found["plan"] == "upstream_failed" and found["finalize"] == "upstream_failed", found
    assert "1 of 2 SGLang endpoints passed preflight, fewer than the 2 required" in logged
    assert "required (the min_endpoints param)" in logged and "--min-endpoints" not in logged  # the form's word
    assert f"left out: {deployment['broken'].url}" in logged
    run_id = run_id_for("leftoutmath", run.run_id)
    assert not (Path(deployment["output"]) / "manifests" / f"run={run_id}.json").exists()
    assert not (Path(deployment["output"]) / "plans" / f"run={run_id}").exists()


def test_a_share_that_is_no_share_is_refused_by_the_form(deployment):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.definitions.param import ParamValidationError

    dag = DagBag(dag_folder=str(DAGS)).get_dag("eagle_datagen__leftoutmath")
    with pytest.raises(ParamValidationError, match="min_endpoints"):
        dag.test(run_conf={"draft_vocab_size": 16, "output": deployment["output"], "min_endpoints": "most"})
