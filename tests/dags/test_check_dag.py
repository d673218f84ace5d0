"""The deployment checklist (`eagle-datagen check`'s lines) is the first thing a category DAG run does: a healthy
deployment logs its lines and the run goes on; a refused item stops the run in its preflight task, before the
endpoints' own preflight, the plan or any generation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle_datagen_airflow.runs import run_id_for

pytestmark = pytest.mark.slow

DAGS = Path(__file__).resolve().parents[2] / "dags"
CATEGORY = "checkmath"  # a category of its own: see test_sick_replica_dag.py


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    folder = tmp_path_factory.mktemp("check")
    lines = [json.dumps({"messages": [{"role": "user", "content": f"add {i} and {i * 3}"}]}) for i in range(4)]
    (folder / "math.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "recipe.yaml").write_text(
        f"version: 1\nname: dagtest\ncategories:\n  {CATEGORY}:\n    sources: [math.jsonl]\n"
        "    sampling: {max_new_tokens: 256}\n",
        encoding="utf-8",
    )
    with SimServerThread(SimConfig().with_profile("instant")) as server, pytest.MonkeyPatch.context() as mp:
        mp.setenv("EAGLE_DATAGEN_RECIPE", str(folder / "recipe.yaml"))
        extra = {"urls": [server.url], "tokenizer": "standin:kimi-k2.5", "trust_remote_code": True}
        mp.setenv("AIRFLOW_CONN_SGLANG_DEFAULT", json.dumps({"conn_type": "http", "extra": extra}))
        yield {"folder": folder, "server": server}


def states(run) -> dict[str, str]:
    return {ti.task_id: ti.state for ti in run.get_task_instances() if ti.map_index in (-1, 0)}


def category_dag():
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(DAGS)).get_dag(f"eagle_datagen__{CATEGORY}")
    preflight = dag.get_task("preflight")
    preflight.retries = 0  # a refusal is final here; the task's retries are for a server still loading
    return dag


def test_a_refused_item_stops_the_dag_run_before_the_plan(deployment, capfd, caplog):
    output = deployment["folder"] / "not-a-folder"
    output.write_text("an output root cannot be a file")
    before = deployment["server"].stats()["generations"]
    with caplog.at_level("INFO", logger="eagle_datagen_airflow"):
        run = category_dag().test(run_conf={"draft_vocab_size": 16, "output": str(output)})
    logged = "".join(capfd.readouterr()) + caplog.text  # the task's failure as dag.test logs it; the task's log
    found = states(run)
    assert run.state == "failed" and found["preflight"] == "failed", found
    assert found["plan"] == "upstream_failed" and found["finalize"] == "upstream_failed", found
    assert "the deployment check refused 1 item(s): refused output root" in logged
    assert "check: ok      airflow pool sglang: 2 slot(s)" in logged
    assert f"check: ok      endpoint {deployment['server'].url}: serves moonshotai/Kimi-K2.5" in logged
    # the check's one canary, and nothing after it: the endpoints' preflight and the shards never ran
    assert deployment["server"].stats()["generations"] - before == 1


def test_a_healthy_deployment_is_checked_first_and_the_run_publishes(deployment, capfd, caplog):
    output = deployment["folder"] / "out"
    with caplog.at_level("INFO", logger="eagle_datagen_airflow"):
        run = category_dag().test(run_conf={"draft_vocab_size": 16, "output": str(output)})
    logged = "".join(capfd.readouterr()) + caplog.text  # the task's failure as dag.test logs it; the task's log
    found = states(run)
    assert all(state == "success" for state in found.values()) and set(found) >= {"preflight", "plan"}, found
    assert "check: ok      airflow connection sglang_default: 1 SGLang endpoint(s)" in logged
    assert "check: warn    airflow connection aws_default: missing" in logged
    assert f"check: ok      source {CATEGORY}: math.jsonl: 1 file(s)" in logged  # found, not counted, in a DAG
    assert (output / "checks" / "eagle-datagen-check-probe.json").exists()
    assert (output / "manifests" / f"run={run_id_for(CATEGORY, run.run_id)}.json").exists()
