"""The DAG files parse with the demo recipe, and every DAG follows the project's rules: tags, retries with
backoff, a thin shape (pool, mapped shards named by index, assets) and a trigger form that refuses bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

DAGS = Path(__file__).resolve().parents[2] / "dags"
CATEGORIES = ["chat", "code", "math", "multilingual", "reasoning", "tool_use", "writing"]


@pytest.fixture(scope="module")
def bag():
    from airflow.dag_processing.dagbag import DagBag

    with pytest.MonkeyPatch.context() as mp:  # the DAGs as a deployment with the defaults sees them
        mp.delenv("EAGLE_DATAGEN_RECIPE", raising=False)
        mp.delenv("EAGLE_DATAGEN_OUTPUT", raising=False)
        return DagBag(dag_folder=str(DAGS))


def test_dag_files_import_without_errors(bag):
    assert bag.import_errors == {}
    expected = [f"eagle_datagen__{c}" for c in CATEGORIES] + ["eagle_datagen_evaluate", "eagle_datagen_release"]
    assert sorted(bag.dag_ids) == expected


def test_each_dag_file_parses_alone_without_connection_lookups(monkeypatch):
    """As Airflow's own DAG tests demand: no connections (or other I/O but the recipe) at parse time."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk import BaseHook

    def refuse(cls, conn_id):
        raise AssertionError(f"connection {conn_id!r} looked up at parse time")

    monkeypatch.setattr(BaseHook, "get_connection", classmethod(refuse))
    monkeypatch.delenv("EAGLE_DATAGEN_RECIPE", raising=False)
    for path in sorted(DAGS.glob("*.py")):
        bag = DagBag(dag_folder=str(path))
        assert bag.import_errors == {} and bag.dags, path.name


def test_every_dag_has_tags_and_retries_with_backoff(bag):
    for dag_id, dag in bag.dags.items():
        assert "eagle-datagen" in dag.tags, dag_id
        assert dag.doc_md, dag_id
        for task in dag.tasks:
            assert task.retries >= 2, f"{dag_id}.{task.task_id}"
            assert task.retry_exponential_backoff > 0, f"{dag_id}.{task.task_id}"


def test_category_dag_shape(bag):
    from airflow.sdk import Asset

    dag = bag.get_dag("eagle_datagen__math")
    assert dag.schedule == "0 3 * * *"
    assert dag.catchup is False and dag.max_active_runs == 1
    assert [t.task_id for t in dag.topological_sort()] == ["preflight", "plan", "generate_shard", "finalize"]
    shards = dag.get_task("generate_shard")
    assert shards.pool == "sglang"
    assert shards.map_index_template == "shard {{ task.op_kwargs['shard'] }}"
    assert dag.get_task("finalize").outlets == [
        Asset(name="eagle_datagen__math", uri="eagle-datagen://demo/math", group="eagle-datagen")
    ]
    assert dag.get_task("preflight").retry_policy is None  # a server still loading heals with retries
    assert dag.get_task("plan").retry_policy is not None  # the package's terminal errors fail at once


def test_release_dag_is_scheduled_on_every_category_asset(bag):
    from airflow.sdk import AssetAny

    dag = bag.get_dag("eagle_datagen_release")
    assert isinstance(dag.schedule, AssetAny)  # any category publishing a run
    assert {asset.uri for asset in dag.schedule.objects} == {f"eagle-datagen://demo/{c}" for c in CATEGORIES}
    assert [a.uri for a in dag.get_task("assemble_release").outlets] == ["eagle-datagen://demo/release"]


def test_form_params_have_titles_descriptions_and_recipe_defaults(bag):
    dag = bag.get_dag("eagle_datagen__math")
    for name, param in dag.params.items():
        assert param.schema.get("title") and param.description, name
    values = dag.params.validate()
    assert values["max_new_tokens"] == 4096 and values["temperature"] == 1.0 and values["top_p"] == 0.95
    assert values["output"] == "s3://eagle/datagen" and values["limit"] is None
    assert values["dry_run"] is False and values["force_regenerate"] is False
    assert bag.get_dag("eagle_datagen__chat").params.validate()["max_new_tokens"] == 1024


def _validate(dag, conf: dict):
    """What Airflow does when a run is created (form, `dags trigger -c`, REST API): merge conf, validate."""
    from airflow.serialization.serialized_objects import DagSerialization

    DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag)).params.deep_merge(conf).validate()


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"top_p": 0}, "top_p: 0 is less than or equal to the minimum of 0"),
        ({"top_p": 1.5}, "top_p: 1.5 is greater than the maximum of 1"),
        ({"temperature": 5}, "temperature: 5 is greater than the maximum of 2"),
        ({"temperature": -0.1}, "temperature: -0.1 is less than the minimum of 0"),
        ({"samples_per_prompt": 0}, "samples_per_prompt: 0 is less than the minimum of 1"),
        ({"samples_per_prompt": 65}, "samples_per_prompt: 65 is greater than the maximum of 64"),
        ({"samples_per_prompt": 2.5}, "samples_per_prompt: 2.5 is not of type 'integer'"),
        ({"max_new_tokens": 0}, "max_new_tokens: 0 is less than the minimum of 1"),
        ({"shard_size": 0}, "shard_size: 0 is less than the minimum of 1"),
        ({"limit": 0}, "limit: 0 is less than the minimum of 1"),
        ({"output": "relative/folder"}, "output: 'relative/folder' does not match"),
        ({"dry_run": "yes"}, "dry_run: 'yes' is not of type 'boolean'"),
        ({"turns": "all"}, "turns: 'all' is not one of \\['last', 'each'\\]"),
        ({"sglang_conn_id": ""}, "sglang_conn_id: '' should be non-empty"),
        ({"max_rates": {"prompt_echo": 2}}, "max_rates: 2 is greater than the maximum of 1"),
        ({"max_rates": {"prompt_ecco": 0.1}}, "max_rates: Additional properties are not allowed"),
    ],
)
def test_bad_values_are_refused_with_the_field_named(bag, conf, message):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match=f"Invalid input for param {message}"):
        _validate(bag.get_dag("eagle_datagen__math"), conf)


def test_good_values_pass(bag):
    _validate(
        bag.get_dag("eagle_datagen__math"),
        {"top_p": 1, "temperature": 0, "limit": 5, "samples_per_prompt": 64, "output": "/data/eagle", "turns": "each"},
    )
    _validate(bag.get_dag("eagle_datagen__math"), {"limit": None, "output": "s3://eagle/datagen/v2"})
    _validate(bag.get_dag("eagle_datagen__math"), {"max_rates": {"prompt_echo": 0.05}})


def test_a_triggered_run_with_a_bad_value_is_refused_before_it_exists(bag):
    """The trigger path itself (here `dag.test(run_conf=...)`, which creates the run as the API does)."""
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match="Invalid input for param top_p"):
        bag.get_dag("eagle_datagen__math").test(run_conf={"top_p": 0})


def test_report_plugin_adds_a_tab_to_dag_runs():
    from airflow import plugins_manager

    info = {p["name"]: p for p in plugins_manager.get_plugin_info()}
    assert plugins_manager.get_import_errors() == {}
    plugin = info["eagle_datagen_report"]
    assert [app["url_prefix"] for app in plugin["fastapi_apps"]] == ["/eagle-datagen"]
    [view] = plugin["external_views"]
    assert view["destination"] == "dag_run" and view["href"] == "eagle-datagen/report/{DAG_ID}/{RUN_ID}"
