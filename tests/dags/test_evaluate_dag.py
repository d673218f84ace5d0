"""The evaluate DAG: thin and typed like the others (tasks, pool, mapped categories, a form that refuses bad values),
and one real run with `dag.test()` against stand-in servers in speculative mode: the evaluation's JSON and report
under the output root, its report on the DAG run's Report tab, and an endpoint without a drafter refused at once."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

DAGS = Path(__file__).resolve().parents[2] / "dags"
DAG_ID = "eagle_datagen_evaluate"


def evaluate_dag(**env: str):
    from airflow.dag_processing.dagbag import DagBag

    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        bag = DagBag(dag_folder=str(DAGS / "eagle_datagen_evaluate.py"))
    assert bag.import_errors == {}
    return bag.get_dag(DAG_ID)


def test_shape_pool_and_schedule():
    dag = evaluate_dag()
    assert [t.task_id for t in dag.topological_sort()] == ["prepare", "measure", "finish"]
    measure = dag.get_task("measure")
    assert measure.pool == "sglang" and measure.map_index_template == "{{ task.op_kwargs['work']['category'] }}"
    assert dag.schedule is None and "evaluate" in dag.tags
    after = evaluate_dag(EAGLE_DATAGEN_EVALUATE_AFTER_RELEASE="1")
    assert [asset.uri for asset in after.schedule] == ["eagle-datagen://demo/release"]


def test_form_params_are_the_declared_evaluate_settings_and_refuse_bad_values():
    from airflow.sdk.exceptions import ParamValidationError
    from airflow.serialization.serialized_objects import DagSerialization

    from eagle_datagen import settings

    dag = evaluate_dag()
    assert set(dag.params) == {s.form for s in settings.EVALUATE_SETTINGS if s.form}
    values = dag.params.validate()
    assert values["sglang_urls"] == [] and values["compare_urls"] == [] and values["baseline"] is None
    assert values["requests_per_prompt"] == 1 and values["seed"] == 0 and values["temperature"] is None
    params = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag)).params
    params.deep_merge({"sglang_urls": ["http://a:30000"], "categories": ["math"], "max_prompts_per_category": 50})
    for conf, message in (
        ({"requests_per_prompt": 0}, "requests_per_prompt: 0 is less than the minimum of 1"),
        ({"temperature": 3}, "temperature: 3 is greater than the maximum of 2"),
        ({"output": "relative"}, "output: 'relative' does not match"),
        ({"sglang_urls": "http://a:30000"}, "sglang_urls: 'http://a:30000' is not of type 'array'"),
    ):
        with pytest.raises(ParamValidationError, match=f"Invalid input for param {message}"):
            DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag)).params.deep_merge(conf).validate()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """A published output root (local: 40% of 40 prompts held out), a stand-in for the connection's tokenizer,
    and two speculative stand-ins; the SGLang connection in the environment."""
    from eagle_datagen.generation.steps import run_generation
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread
    from eagle_datagen.standin.sglang.speculative import SpeculativeConfig
    from generation_runs import run_options

    from conftest import user_record, write_jsonl

    tmp = tmp_path_factory.mktemp("evaluate-dag")
    records = [user_record(f"question {i}: " + "w " * i, category="math" if i % 2 else "chat") for i in range(40)]
    src = write_jsonl(tmp / "prompts.jsonl", records)
    instant = SimConfig().with_profile("instant")
    with (
        SimServerThread(instant) as plain,
        SimServerThread(dataclasses.replace(instant, speculative=SpeculativeConfig(accept_rate=0.8))) as a,
        SimServerThread(
            dataclasses.replace(instant, speculative=SpeculativeConfig(accept_rate=0.5, draft_model_path="old"))
        ) as b,
        pytest.MonkeyPatch.context() as mp,
    ):
        options = run_options(tmp, [plain.url], run_id="r1", heldout_fraction=0.4)
        run_generation(dataclasses.replace(options, prompts=dataclasses.replace(options.prompts, prompts=[str(src)])))
        host, port = plain.url.removeprefix("http://").split(":")
        connection = {"conn_type": "http", "host": host, "port": int(port), "extra": {"tokenizer": "standin:kimi-k2.5"}}
        connection["extra"]["trust_remote_code"] = True
        mp.setenv("AIRFLOW_CONN_SGLANG_DEFAULT", json.dumps(connection))
        yield {"output": str(tmp / "out"), "plain": plain, "a": a, "b": b}


@pytest.fixture
def report_client():
    from fastapi.testclient import TestClient

    from eagle_datagen_airflow.report_view import app, can_read_runs

    app.dependency_overrides[can_read_runs] = lambda: None
    yield TestClient(app)
    app.dependency_overrides.clear()


@pytest.mark.slow
def test_a_triggered_evaluation_measures_each_category_and_its_report_is_on_the_run(deployment, report_client):
    from eagle_datagen_airflow.evaluation import eval_id_for

    conf = {
        "output": deployment["output"],
        "sglang_urls": [deployment["a"].url],
        "compare_urls": [deployment["b"].url],
        "max_new_tokens": 300,
        "label": "new drafter",
    }
    run = evaluate_dag().test(run_conf=conf)
    tasks = {(ti.task_id, ti.map_index): (ti.state, ti.rendered_map_index) for ti in run.get_task_instances()}
    assert run.state == "success", tasks
    assert {v for k, v in tasks.items() if k[0] == "measure"} == {("success", "chat"), ("success", "math")}
    path = Path(deployment["output"]) / f"evaluations/eval={eval_id_for(run.run_id)}.json"
    results = json.loads(path.read_text())
    assert results["label"] == "new drafter" and set(results["categories"]) == {"chat", "math"}
    assert results["prompts"]["source"] == "heldout"
    for category, block in results["comparison"]["categories"].items():
        assert block["paired_prompts"] == results["categories"][category]["prompts"] > 0
        assert block["accept_length_diff"]["mean"] > 0 and block["accept_length_total_diff"]["value"] > 0
    page = report_client.get(f"/report/{DAG_ID}/{run.run_id}")
    assert page.status_code == 200 and "new drafter" in page.text and "<img" in page.text
    assert report_client.get(f"/report/{DAG_ID}/manual__nope").status_code == 404


@pytest.mark.slow
def test_an_endpoint_without_a_drafter_fails_prepare_at_once(deployment, capfd):
    before = deployment["plain"].stats()["requests"]["total"]  # the run that published the root's data
    run = evaluate_dag().test(run_conf={"output": deployment["output"], "sglang_urls": [deployment["plain"].url]})
    assert run.state == "failed"
    [prepare] = [ti for ti in run.get_task_instances() if ti.task_id == "prepare"]
    assert prepare.state == "failed" and prepare.try_number == 1
    assert "not a speculative server (speculative_algorithm is None in /server_info)" in capfd.readouterr().out
    assert deployment["plain"].stats()["requests"]["total"] == before  # no /generate
