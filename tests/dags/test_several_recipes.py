"""Several recipes in one Airflow (`EAGLE_DATAGEN_RECIPE` naming files, a folder, or both): each recipe's DAGs carry
its name in their ids and assets, use its own connection, output root and pool, and a single recipe keeps today's
ids. Recipes that would collide are refused when the DAG files are parsed, in one line that names the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
DEMO_PROMPTS = REPO / "include" / "data" / "demo_prompts"
DAG_FILES = ("eagle_datagen_categories.py", "eagle_datagen_evaluate.py", "eagle_datagen_release.py")


def write_recipe(folder: Path, name: str, categories: dict[str, int], airflow: str = "") -> Path:
    """A recipe of a few demo prompts per category (`airflow`: its airflow: block, as YAML lines)."""
    folder.mkdir(parents=True, exist_ok=True)
    for category, count in categories.items():
        lines = (DEMO_PROMPTS / "math.jsonl").read_text(encoding="utf-8").splitlines()[:count]
        (folder / f"{category}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    path = folder / f"{name}.yaml"
    path.write_text(
        f"version: 1\nname: {name}\nseed: 7\n{airflow}categories:\n"
        + "".join(f"  {c}:\n    sources: [{c}.jsonl]\n    sampling: {{max_new_tokens: 128}}\n" for c in categories),
        encoding="utf-8",
    )
    return path


def parse(monkeypatch, recipes: str, output: str = "s3://eagle/datagen", **env: str):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("EAGLE_DATAGEN_RECIPE", recipes)
    monkeypatch.setenv("EAGLE_DATAGEN_OUTPUT", output)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return DagBag(dag_folder=str(DAGS))


@pytest.fixture
def two(tmp_path):
    """Two recipes with a category of the same name, in folders of their own."""
    alpha = write_recipe(tmp_path / "a", "alpha", {"math": 2})
    beta = write_recipe(tmp_path / "b", "beta-v2.1", {"math": 2, "chat": 2})
    return alpha, beta


def test_two_recipes_parse_side_by_side_each_with_its_own_names(monkeypatch, two):
    from airflow.sdk import Asset, AssetAny

    alpha, beta = two
    bag = parse(monkeypatch, f"{alpha}, {beta}", EAGLE_DATAGEN_EVALUATE_AFTER_RELEASE="1")
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == [
        "eagle_datagen__alpha__math",
        "eagle_datagen__beta_v2_1__chat",  # the recipe's name as Airflow ids take it
        "eagle_datagen__beta_v2_1__math",
        "eagle_datagen_evaluate__alpha",
        "eagle_datagen_evaluate__beta_v2_1",
        "eagle_datagen_release__alpha",
        "eagle_datagen_release__beta_v2_1",
    ]
    for name, recipe, categories in (("alpha", "alpha", ["math"]), ("beta_v2_1", "beta-v2.1", ["math", "chat"])):
        math = bag.get_dag(f"eagle_datagen__{name}__math")
        assert math.get_task("generate_shard").pool == f"sglang_{name}"
        values = math.params.validate()
        assert values["output"] == f"s3://eagle/datagen/{name}"
        assert (values["sglang_conn_id"], values["aws_conn_id"]) == (f"sglang_{name}", "aws_default")
        assert set(math.tags) == {"eagle-datagen", f"recipe:{recipe}", "category:math"}
        asset = Asset(name=f"eagle_datagen__{name}__math", uri=f"eagle-datagen://{recipe}/math", group="eagle-datagen")
        assert math.get_task("finalize").outlets == [asset]

        release = bag.get_dag(f"eagle_datagen_release__{name}")
        assert isinstance(release.schedule, AssetAny)
        # its own categories' assets only: another recipe publishing its math starts no release of this one
        assert {(a.name, a.uri) for a in release.schedule.objects} == {
            (f"eagle_datagen__{name}__{c}", f"eagle-datagen://{recipe}/{c}") for c in categories
        }
        [outlet] = release.get_task("assemble_release").outlets
        assert (outlet.name, outlet.uri) == (f"eagle_datagen_release__{name}", f"eagle-datagen://{recipe}/release")
        assert release.params.validate()["output"] == f"s3://eagle/datagen/{name}"
        assert release.params.validate()["aws_conn_id"] == "aws_default"

        evaluate = bag.get_dag(f"eagle_datagen_evaluate__{name}")
        assert [a.uri for a in evaluate.schedule] == [f"eagle-datagen://{recipe}/release"]
        assert evaluate.get_task("measure").pool == f"sglang_{name}"
        assert evaluate.params.validate()["sglang_conn_id"] == f"sglang_{name}"
        assert set(evaluate.tags) == {"eagle-datagen", f"recipe:{recipe}", "evaluate"}


def test_a_folder_of_recipes_and_their_airflow_keys(monkeypatch, tmp_path):
    """A folder names every recipe in it; a recipe's airflow: block overrides what would be derived: two recipes may
    share a server, its pool and connection, but each writes under its own output root."""
    folder = tmp_path / "recipes"
    write_recipe(folder, "alpha", {"math": 2})
    shared = "airflow:\n  name: b\n  sglang_conn_id: sglang_shared\n  pool: sglang\n  output: /data/b\n"
    write_recipe(folder, "beta", {"math": 2}, airflow=shared)
    (folder / "notes.txt").write_text("not a recipe", encoding="utf-8")
    bag = parse(monkeypatch, str(folder))
    assert bag.import_errors == {}
    assert {"eagle_datagen__alpha__math", "eagle_datagen__b__math", "eagle_datagen_release__b"} <= set(bag.dag_ids)
    b = bag.get_dag("eagle_datagen__b__math")
    assert b.get_task("generate_shard").pool == "sglang"
    assert (b.params["sglang_conn_id"], b.params["output"]) == ("sglang_shared", "/data/b")
    assert bag.get_dag("eagle_datagen__alpha__math").params["sglang_conn_id"] == "sglang_alpha"


def test_a_single_recipe_keeps_todays_ids_and_names(monkeypatch, two):
    alpha, _ = two
    bag = parse(monkeypatch, str(alpha), "/data/eagle")
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == ["eagle_datagen__math", "eagle_datagen_evaluate", "eagle_datagen_release"]
    math = bag.get_dag("eagle_datagen__math")
    assert math.get_task("generate_shard").pool == "sglang"
    assert [a.name for a in math.get_task("finalize").outlets] == ["eagle_datagen__math"]
    assert [a.name for a in bag.get_dag("eagle_datagen_release").get_task("assemble_release").outlets] == [
        "eagle_datagen_release"
    ]
    values = math.params.validate()
    assert (values["output"], values["sglang_conn_id"], values["aws_conn_id"]) == (
        "/data/eagle",
        "sglang_default",
        "aws_default",
    )


def test_one_of_several_recipes_may_keep_todays_ids(monkeypatch, tmp_path):
    """The recipe a deployment already runs keeps its DAGs (history, schedules) when a second one joins it, with
    `airflow: {name: ""}`; the newcomer's output root must then lie outside the first one's."""
    first = write_recipe(tmp_path / "a", "alpha", {"math": 2}, airflow='airflow:\n  name: ""\n')
    second = write_recipe(tmp_path / "b", "beta", {"math": 2}, airflow="airflow:\n  output: /data/beta\n")
    bag = parse(monkeypatch, f"{first},{second}", "/data/eagle")
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == [
        "eagle_datagen__beta__math",
        "eagle_datagen__math",
        "eagle_datagen_evaluate",
        "eagle_datagen_evaluate__beta",
        "eagle_datagen_release",
        "eagle_datagen_release__beta",
    ]
    math = bag.get_dag("eagle_datagen__math")
    assert (math.params["output"], math.params["sglang_conn_id"]) == ("/data/eagle", "sglang_default")
    assert math.get_task("generate_shard").pool == "sglang"


def misconfigured(tmp_path: Path, case: str) -> tuple[str, str]:
    """EAGLE_DATAGEN_RECIPE for each misconfiguration, and the one line that refuses it."""
    alpha = write_recipe(tmp_path / "a", "alpha", {"math": 2})
    if case == "same name":
        other = write_recipe(tmp_path / "b", "alpha", {"chat": 2})
        return f"{alpha},{other}", "are both named 'alpha': change the name: of one of them"
    if case == "same airflow name":
        other = write_recipe(tmp_path / "b", "beta", {"chat": 2}, airflow="airflow:\n  name: alpha\n")
        return f"{alpha},{other}", "both name their DAGs 'alpha': set airflow.name in one of them to another name"
    if case == "both keep today's ids":
        kept = 'airflow:\n  name: ""\n  output: /data/out/{}\n'
        first = write_recipe(tmp_path / "c", "gamma", {"math": 2}, airflow=kept.format("gamma"))
        other = write_recipe(tmp_path / "b", "beta", {"chat": 2}, airflow=kept.format("beta"))
        return f"{first},{other}", 'both keep the DAG ids of a single recipe (name: ""): set airflow.name in one'
    if case == "same DAG id":
        other = write_recipe(tmp_path / "b", "beta", {"x": 2}, airflow="airflow:\n  name: alpha__math\n")
        clash = write_recipe(tmp_path / "c", "gamma", {"math__x": 2}, airflow="airflow:\n  name: alpha\n")
        return f"{other},{clash}", "both make the DAG eagle_datagen__alpha__math__x: set airflow.name in one"
    if case == "same output root":
        other = write_recipe(tmp_path / "b", "beta", {"math": 2}, airflow="airflow:\n  output: /data/out/alpha/\n")
        return f"{alpha},{other}", "write to the output roots /data/out/alpha and /data/out/alpha/, one the same as"
    if case == "root inside another":
        other = write_recipe(tmp_path / "b", "beta", {"math": 2}, airflow="airflow:\n  output: /data/out/alpha/b\n")
        return f"{alpha},{other}", "give each its own root (airflow.output), or their runs and releases would mix"
    if case == "kept ids under another's root":
        first = write_recipe(tmp_path / "c", "gamma", {"math": 2}, airflow='airflow:\n  name: ""\n')
        return f"{first},{alpha}", "write to the output roots /data/out and /data/out/alpha, one the same as"
    if case == "same file twice":
        return f"{alpha},{tmp_path / 'a' / '..' / 'a' / 'alpha.yaml'}", f"names the recipe {alpha} twice: name it once"
    if case == "missing file":
        return f"{alpha},{tmp_path / 'nope.yaml'}", "which is neither a recipe file nor a folder: fix the path"
    assert case == "empty folder"
    (tmp_path / "empty").mkdir()
    return str(tmp_path / "empty"), "which holds no *.yaml recipe: add one"


CASES = [
    "same name",
    "same airflow name",
    "both keep today's ids",
    "same DAG id",
    "same output root",
    "root inside another",
    "kept ids under another's root",
    "same file twice",
    "missing file",
    "empty folder",
]


@pytest.mark.parametrize("case", CASES)
def test_recipes_that_would_collide_are_refused_in_one_line(monkeypatch, tmp_path, case):
    from eagle_datagen.errors import ConfigError
    from eagle_datagen_airflow.recipe_set import configured

    recipes, message = misconfigured(tmp_path, case)
    monkeypatch.setenv("EAGLE_DATAGEN_RECIPE", recipes)
    monkeypatch.setenv("EAGLE_DATAGEN_OUTPUT", "/data/out")
    with pytest.raises(ConfigError, match="EAGLE_DATAGEN_RECIPE|recipes") as raised:
        configured()
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_collision_is_an_import_error_of_every_dag_file(monkeypatch, tmp_path):
    """What the user sees in the UI: each DAG file fails to import with the line that names the fix, and no DAG of
    either recipe is half made."""
    recipes, message = misconfigured(tmp_path, "same output root")
    bag = parse(monkeypatch, recipes, "/data/out")
    assert bag.dag_ids == []
    assert sorted(Path(f).name for f in bag.import_errors) == sorted(DAG_FILES)
    for error in bag.import_errors.values():
        assert f"ConfigError: recipes {tmp_path}" in error and message in error


def test_the_report_tab_says_why_while_the_recipes_collide(monkeypatch, tmp_path):
    from fastapi.testclient import TestClient

    from eagle_datagen_airflow.report_view import app, can_read_runs

    recipes, message = misconfigured(tmp_path, "same airflow name")
    monkeypatch.setenv("EAGLE_DATAGEN_RECIPE", recipes)
    app.dependency_overrides[can_read_runs] = lambda: None
    try:
        page = TestClient(app).get("/report/eagle_datagen__alpha__math/manual__1")
    finally:
        app.dependency_overrides.clear()
    assert page.status_code == 409 and message in page.json()["detail"]


# --- a run of each recipe, side by side: its own server, pool and output root; its own release asset


def asset_event_sources(uri: str) -> list[str]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(AssetEvent).join(AssetModel, AssetModel.id == AssetEvent.asset_id).where(AssetModel.uri == uri)
        return [e.source_dag_id for e in session.scalars(query)]


def queued_consumers(uri: str) -> set[str]:
    from airflow.models.asset import AssetDagRunQueue, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(AssetDagRunQueue.target_dag_id).join(AssetModel).where(AssetModel.uri == uri)
        return set(session.scalars(query))


def requests_served(sim) -> int:
    return sim.stats()["requests"]["total"]


@pytest.mark.slow
def test_a_run_of_each_recipe_uses_its_own_server_pool_and_output_root(tmp_path, monkeypatch, assets_of_this_test):
    from airflow.models.pool import Pool
    from fastapi.testclient import TestClient

    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread
    from eagle_datagen.storage.manifest import list_manifests
    from eagle_datagen.storage.output_root import open_output_root
    from eagle_datagen.storage.releases import release_key
    from eagle_datagen_airflow.report_view import app, can_read_runs
    from eagle_datagen_airflow.runs import run_id_for, sanitize

    # recipe names of this test alone: Airflow keeps one asset per name and URI (conftest.assets_of_this_test)
    twin_a = write_recipe(tmp_path / "a", "twin-a", {"math": 4})
    twin_b = write_recipe(tmp_path / "b", "twin-b", {"math": 4, "chat": 2})
    out = tmp_path / "out"
    for pool in ("sglang_twin_a", "sglang_twin_b"):  # what docs/internals/airflow.md asks a deployment to create
        Pool.create_or_update_pool(pool, slots=1, description="shards generating at once", include_deferred=False)
    instant = SimConfig().with_profile("instant")
    with SimServerThread(instant) as sim_a, SimServerThread(instant) as sim_b:
        for name, sim in (("TWIN_A", sim_a), ("TWIN_B", sim_b)):
            extra = {"tokenizer": "standin:kimi-k2.5", "trust_remote_code": True}
            conn = {"conn_type": "http", "host": "127.0.0.1", "port": int(sim.url.rsplit(":", 1)[1]), "extra": extra}
            monkeypatch.setenv(f"AIRFLOW_CONN_SGLANG_{name}", json.dumps(conn))
        monkeypatch.delenv("AIRFLOW_CONN_SGLANG_DEFAULT", raising=False)  # neither recipe may fall back to it
        bag = parse(monkeypatch, f"{twin_a},{twin_b}", str(out))
        assert bag.import_errors == {}

        conf = {"shard_size": 2, "samples_per_prompt": 1, "draft_vocab_size": 16}  # no output: the recipe's own
        runs, served = {}, {}
        for name, sim, other in (("twin_a", sim_a, sim_b), ("twin_b", sim_b, sim_a)):
            before = requests_served(other)
            run = bag.get_dag(f"eagle_datagen__{name}__math").test(run_conf=conf)
            tis = run.get_task_instances()
            assert {ti.state for ti in tis} == {"success"}, [(ti.task_id, ti.map_index, ti.state) for ti in tis]
            assert {ti.pool for ti in tis if ti.task_id == "generate_shard"} == {f"sglang_{name}"}
            assert requests_served(other) == before, f"{name}'s run sent requests to the other recipe's server"
            runs[name], served[name] = run, requests_served(sim)
        assert served["twin_a"] > 0 and served["twin_b"] > 0

        for name in runs:
            root = open_output_root(str(out / name))
            [manifest] = list_manifests(root)
            assert manifest["run_id"] == run_id_for("math", runs[name].run_id)
            assert sum(f["kind"] == "data" for f in manifest["files"]) >= 1
        assert sorted(p.name for p in out.iterdir()) == ["twin_a", "twin_b"]  # nothing written beside the roots

        for name, recipe in (("twin_a", "twin-a"), ("twin_b", "twin-b")):
            # each category asset queued its own recipe's release, not the other's
            assert queued_consumers(f"eagle-datagen://{recipe}/math") == {f"eagle_datagen_release__{name}"}
            release = bag.get_dag(f"eagle_datagen_release__{name}").test(run_conf={"draft_vocab_size": 16})
            assert release.state == "success"
            assert asset_event_sources(f"eagle-datagen://{recipe}/release") == [f"eagle_datagen_release__{name}"]
            stored = json.loads((out / name / release_key(sanitize(release.run_id))).read_text())
            assert stored["categories"]["math"]["runs"] == [run_id_for("math", runs[name].run_id)]

        # the Report tab finds a named DAG's recipe, its category and its output root (the run's conf has none)
        app.dependency_overrides[can_read_runs] = lambda: None
        try:
            page = TestClient(app).get(f"/report/eagle_datagen__twin_b__math/{runs['twin_b'].run_id}")
            assert page.status_code == 200 and "<html" in page.text.lower()
            assert TestClient(app).get("/report/eagle_datagen__math/nope").status_code == 404
        finally:
            app.dependency_overrides.clear()
