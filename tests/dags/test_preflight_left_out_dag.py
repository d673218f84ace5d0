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
    assert all(state == "success" for state in states(run).values()), states(run)
    broken = deployment["broken"].url
    assert any("left out of this run" in r.getMessage() and broken in r.getMessage() for r in caplog.records)
    manifest_path = Path(deployment["output"]) / "manifests" / f"run={run_id_for('leftoutmath', run.run_id)}.json"
    manifest = json.loads(manifest_path.read_text())
    [left] = manifest["validation"]["endpoints_left_out"]
    assert left["url"] == broken and "prompt-echo bug" in left["reason"]
    assert manifest["counts"]["data"] == PROMPTS and list(manifest["counts"]["endpoints"]) == [deployment["good"].url]



def test_min_endpoints_two_fails_the_preflight_step_naming_the_one_left_out(deployment):
    """The preflight task's body with the form's min_endpoints 2 (a DAG run would retry it first: a server
    still starting is worth the task's retries)."""
    from eagle_datagen.errors import ConfigError
    from eagle_datagen.generation.steps import preflight_step

    config = {
        "output": deployment["output"],
        "tokenizer": "standin:kimi-k2.5",
        "trust_remote_code": True,
        "sglang_urls": [deployment["good"].url, deployment["broken"].url],
        "run_id": "min2",
        "recipe": str(Path(deployment["output"]).parent / "recipe.yaml"),
        "categories": ["leftoutmath"],
        "min_endpoints": 2,
    }
    with pytest.raises(ConfigError) as info:
        preflight_step(config)
    message = str(info.value)
    assert "1 of 2 SGLang endpoints passed preflight, fewer than the 2 required" in message
    assert deployment["broken"].url in message and "\n" not in message
