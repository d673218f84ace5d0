"""Category and release DAGs run end to end with `dag.test()`: the stand-in SGLang server, SeaweedFS through
the Airflow AWS connection, the SGLang deployment as an Airflow connection given in the environment."""

from __future__ import annotations

import io
import json
import uuid
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from eagle_datagen.stats.draft_vocab import DraftVocab
from eagle_datagen.storage.manifest import list_manifests, verify_manifest
from eagle_datagen.storage.objects import sha256_hex
from eagle_datagen.storage.output_root import open_output_root
from eagle_datagen.storage.parquet import decode_shard
from eagle_datagen.storage.releases import release_key
from eagle_datagen_airflow.runs import run_id_for, sanitize

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
DEMO_PROMPTS = REPO / "include" / "data" / "demo_prompts"
PROMPTS = {"math": 6, "chat": 4}  # a few of the demo prompts per category keeps each run to seconds
RUN_CONF = {"shard_size": 2, "samples_per_prompt": 1, "draft_vocab_size": 16}


def _lines(category: str, start: int, stop: int) -> list[str]:
    return (DEMO_PROMPTS / f"{category}.jsonl").read_text(encoding="utf-8").splitlines()[start:stop]


@pytest.fixture(scope="module")
def stack(tmp_path_factory, seaweedfs):
    """Recipe, stand-in server and object store as a deployment sees them: connections in the environment,
    no AWS variables (the AWS connection must be what reaches the store)."""
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    folder = tmp_path_factory.mktemp("recipe")
    for category, count in PROMPTS.items():
        (folder / f"{category}.jsonl").write_text("\n".join(_lines(category, 0, count)) + "\n", encoding="utf-8")
    recipe = folder / "recipe.yaml"
    recipe.write_text(
        "version: 1\nname: dagtest\nseed: 7\ncategories:\n"
        + "".join(f"  {c}:\n    sources: [{c}.jsonl]\n    sampling: {{max_new_tokens: 256}}\n" for c in PROMPTS),
        encoding="utf-8",
    )
    with SimServerThread(SimConfig().with_profile("instant")) as sim, pytest.MonkeyPatch.context() as mp:
        for key in seaweedfs.env:
            mp.delenv(key, raising=False)
        mp.setenv("EAGLE_DATAGEN_RECIPE", str(recipe))
        host, port = sim.url.removeprefix("http://").split(":")
        sglang = {
            "conn_type": "http",
            "host": host,
            "port": int(port),
            "extra": {"tokenizer": "standin:kimi-k2.5", "trust_remote_code": True},
        }
        mp.setenv("AIRFLOW_CONN_SGLANG_DEFAULT", json.dumps(sglang))
        aws = {
            "conn_type": "aws",
            "login": seaweedfs.access_key,
            "password": seaweedfs.secret_key,
            "extra": {"endpoint_url": seaweedfs.endpoint_url, "region_name": "us-east-1"},
        }
        mp.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(aws))
        yield {"folder": folder, "output": f"s3://eagle/dagtest-{uuid.uuid4().hex[:8]}", "seaweedfs": seaweedfs}


@contextmanager
def reading(stack):
    """The test's own view of the store (the tasks get theirs from the AWS connection)."""
    from eagle_datagen.objectstore.s3 import s3_client

    with pytest.MonkeyPatch.context() as mp:
        for key, value in stack["seaweedfs"].env.items():
            mp.setenv(key, value)
        s3_client.cache_clear()
        try:
            yield open_output_root(stack["output"])
        finally:
            s3_client.cache_clear()


def run_dag(dag_id: str, conf: dict):
    """One DAG run in-process, as `airflow dags test` does (the bundle is parsed again, with the test recipe)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    run = bag.get_dag(dag_id).test(run_conf=conf)
    tasks = {(ti.task_id, ti.map_index): (ti.state, ti.rendered_map_index) for ti in run.get_task_instances()}
    return run, tasks


def asset_events(uri: str) -> list:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(AssetEvent).join(AssetModel, AssetModel.id == AssetEvent.asset_id).where(AssetModel.uri == uri)
        return [(e.source_dag_id, e.source_run_id, e.extra) for e in session.scalars(query)]


def queued_consumers(uri: str) -> set[str]:
    """DAGs the scheduler will run because the asset was updated (what makes the release DAG fire)."""
    from airflow.models.asset import AssetDagRunQueue, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(AssetDagRunQueue.target_dag_id).join(AssetModel).where(AssetModel.uri == uri)
        return set(session.scalars(query))


@pytest.fixture(scope="module")
def first_run(stack):
    run, tasks = run_dag("eagle_datagen__math", RUN_CONF | {"output": stack["output"]})
    return {"run": run, "tasks": tasks}


def test_category_dag_publishes_a_contract_valid_run(stack, first_run, capfd):
    run, tasks = first_run["run"], first_run["tasks"]
    assert run.state == "success", tasks
    assert tasks[("generate_shard", 0)] == ("success", "shard 0")
    assert {k for k in tasks if k[0] == "generate_shard"} == {("generate_shard", i) for i in range(3)}  # 6 prompts / 2
    run_id = run_id_for("math", run.run_id)
    with reading(stack) as root:
        [manifest] = list_manifests(root)
        assert manifest["run_id"] == run_id
        assert manifest["counts"]["data"] + manifest["counts"]["quarantine"] == PROMPTS["math"]
        assert manifest["counts"]["data"] > 0 and verify_manifest(root, manifest) == []
        data = [f for f in manifest["files"] if f["kind"] == "data"]
        assert {f["key"].rsplit("/", 1)[0] for f in data} == {f"data/category=math/run={run_id}"}
        table = decode_shard(root.read_bytes(data[0]["key"]))
        assert table.schema.metadata[b"eagle_datagen.contract"] == b"1"
        assert all(ids[-1] == 163586 for ids in table.column("output_ids").to_pylist())  # ends in <|im_end|>
    [(dag_id, source_run, extra)] = asset_events("eagle-datagen://dagtest/math")
    assert (dag_id, source_run) == ("eagle_datagen__math", run.run_id)
    assert extra == {
        "output": stack["output"],
        "run_id": run_id,
        "manifest": f"manifests/run={run_id}.json",
        "data": manifest["counts"]["data"],
        "quarantine": manifest["counts"]["quarantine"],
    }
    assert "eagle_datagen_release" in queued_consumers("eagle-datagen://dagtest/math")
    assert stack["seaweedfs"].secret_key not in capfd.readouterr().out  # credentials never in logs


def test_nightly_rerun_with_the_same_prompts_generates_nothing(stack, first_run):
    with reading(stack) as root:
        before = len(list_manifests(root))
    run, tasks = run_dag("eagle_datagen__math", RUN_CONF | {"output": stack["output"]})
    assert run.state == "success"
    assert tasks[("plan", -1)][0] == "success"
    assert tasks[("generate_shard", -1)][0] == "skipped" and tasks[("finalize", -1)][0] == "skipped"
    with reading(stack) as root:
        assert len(list_manifests(root)) == before
        assert not root.list(f"data/category=math/run={run_id_for('math', run.run_id)}")


def test_added_prompts_are_exactly_what_the_next_run_generates(stack, first_run):
    source = stack["folder"] / "math.jsonl"
    with source.open("a", encoding="utf-8") as handle:
        handle.write("\n".join(_lines("math", PROMPTS["math"], PROMPTS["math"] + 2)) + "\n")
    run, tasks = run_dag("eagle_datagen__math", RUN_CONF | {"output": stack["output"]})
    assert run.state == "success", tasks
    with reading(stack) as root:
        newest = max(list_manifests(root), key=lambda m: m["created_at"])
    assert newest["run_id"].startswith("math-") and newest["counts"]["samples"] == 2


def test_a_misspelt_setting_fails_the_run_at_once(stack, capfd):
    """Airflow accepts conf keys that are not params; the first task refuses them, without retrying."""
    run, tasks = run_dag("eagle_datagen__chat", {"output": stack["output"], "temprature": 0.6})
    assert run.state == "failed"
    assert tasks[("preflight", -1)][0] == "failed"
    [preflight] = [ti for ti in run.get_task_instances() if ti.task_id == "preflight"]
    assert preflight.try_number == 1
    assert "unknown setting(s) ['temprature'] in the run's conf" in capfd.readouterr().out


def test_dry_run_plans_and_generates_nothing(stack):
    run, tasks = run_dag("eagle_datagen__chat", RUN_CONF | {"output": stack["output"], "dry_run": True})
    assert run.state == "success"
    assert tasks[("generate_shard", -1)][0] == "skipped"
    with reading(stack) as root:
        run_id = run_id_for("chat", run.run_id)
        assert f"plans/run={run_id}/plan.json" in root.list(f"plans/run={run_id}/")
        assert not root.list(f"data/category=chat/run={run_id}/")
        assert run_id not in {m["run_id"] for m in list_manifests(root)}
        assert not root.list(f"claims/run={run_id}.")  # a plan never generated holds no samples
        policy = json.loads(root.read_bytes("heldout/policy.json")) if root.list("heldout/policy.json") else None
        assert policy is None or policy["created_by"] != run_id  # ... and freezes no held-out fraction


def test_release_dag_assembles_every_published_run_of_each_category(stack, first_run):
    conf = {"output": stack["output"], "draft_vocab_size": 16, "export_formats": ["speculators"]}
    run, tasks = run_dag("eagle_datagen_release", conf)
    assert run.state == "success", tasks
    release_id = sanitize(run.run_id)
    with reading(stack) as root:
        manifests = list_manifests(root)
        release = json.loads(root.read_bytes(release_key(release_id)))
        vocab = root.read_bytes(release["draft_vocab"]["key"])
        exported = root.list(f"exports/release={release_id}/speculators/")
        t2d = root.read_bytes(f"exports/release={release_id}/speculators/t2d-16.npy")
    # the export task stored the release for speculators, with the release's own draft vocabulary
    assert {k.rsplit("/", 1)[1] for k in exported} >= {"state.json", "d2t-16.npy", "t2d-16.npy", "sample_ids.txt"}
    assert np.array_equal(np.load(io.BytesIO(t2d)), DraftVocab.from_safetensors_bytes(vocab).t2d)
    math_runs = sorted(m["run_id"] for m in manifests if m["run_id"].startswith("math-"))
    assert sorted(release["categories"]["math"]["runs"]) == math_runs
    assert sorted(r["run_id"] for r in release["runs"]) == math_runs
    assert release["categories"]["math"]["samples"] == sum(m["counts"]["data"] for m in manifests)
    assert release["missing_categories"] == ["chat"]
    assert release["draft_vocab"]["sha256"] == sha256_hex(vocab) and release["draft_vocab"]["k"] == 16
    assert DraftVocab.from_safetensors_bytes(vocab).k == 16
    [(_, _, extra)] = asset_events("eagle-datagen://dagtest/release")
    assert extra == {"output": stack["output"], "release_id": release_id, "release": release_key(release_id)}


@pytest.fixture
def report_client():
    from fastapi.testclient import TestClient

    from eagle_datagen_airflow.report_view import app, can_read_runs

    app.dependency_overrides[can_read_runs] = lambda: None  # a user allowed to read the DAG's runs
    yield TestClient(app)
    app.dependency_overrides.clear()


def test_report_of_a_run_is_served_for_the_ui(stack, first_run, report_client):
    run = first_run["run"]
    page = report_client.get(f"/report/eagle_datagen__math/{run.run_id}")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<html" in page.text and run_id_for("math", run.run_id) in page.text
    assert report_client.get("/report/eagle_datagen__math/manual__nope").status_code == 404
    assert report_client.get(f"/report/eagle_datagen_release/{run.run_id}").status_code == 404


def test_report_needs_a_logged_in_user(first_run):
    from fastapi.testclient import TestClient

    from eagle_datagen_airflow.report_view import app

    assert TestClient(app).get(f"/report/eagle_datagen__math/{first_run['run'].run_id}").status_code == 401


def test_turns_each_from_the_trigger_form_gives_one_row_per_user_turn(stack):
    """The form's `turns` reaches the plan; each shard task generates its conversations step by step."""
    output = stack["output"] + "-turns"
    run, tasks = run_dag("eagle_datagen__chat", RUN_CONF | {"output": output, "turns": "each"})
    assert run.state == "success", tasks
    sources = [json.loads(line) for line in _lines("chat", 0, PROMPTS["chat"])]
    user_turns = sum(m["role"] == "user" for r in sources for m in r["messages"])
    with reading(stack | {"output": output}) as root:
        [manifest] = list_manifests(root)
        rows = [
            row
            for f in manifest["files"]
            if f["kind"] in ("data", "quarantine")
            for row in decode_shard(root.read_bytes(f["key"])).to_pylist()
        ]
    assert len(rows) == user_turns and len({r["conversation_id"] for r in rows}) == PROMPTS["chat"]
    assert {(r["turn_index"], r["step_kind"], r["trajectory_end"]) for r in rows} == {(0, "user_turn", "complete")}


def test_the_mode_from_the_trigger_form_reaches_every_row(stack):
    """The form's `mode` and `instant_fraction` reach the plan: a mix of thinking and instant rows, each instant
    prompt rendered with thinking=False (ending in <think></think>), counted per mode in the manifest."""
    output = stack["output"] + "-modes"
    conf = RUN_CONF | {"output": output, "mode": "mix", "instant_fraction": 0.5}
    run, tasks = run_dag("eagle_datagen__math", conf)
    assert run.state == "success", tasks
    with reading(stack | {"output": output}) as root:
        [manifest] = list_manifests(root)
        rows = [
            row
            for f in manifest["files"]
            if f["kind"] in ("data", "quarantine")
            for row in decode_shard(root.read_bytes(f["key"])).to_pylist()
        ]
    prompts = len((stack["folder"] / "math.jsonl").read_text(encoding="utf-8").splitlines())  # an earlier test adds
    assert len(rows) == prompts and {r["mode"] for r in rows} == {"thinking", "instant"}
    for row in rows:
        assert row["prompt_ids"][-1] == (163607 if row["mode"] == "instant" else 163606)
        assert (163607 in row["output_ids"]) == (row["mode"] == "thinking")
    counts = manifest["counts"]["modes"]
    assert {m: c["samples"] for m, c in counts.items()} == dict(Counter(r["mode"] for r in rows))
    assert manifest["sampling"]["math"]["mode"] == "mix" and manifest["sampling"]["math"]["instant_fraction"] == 0.5
    instant = manifest["sampling"]["math"]["sampling_by_mode"]["instant"]
    assert instant["temperature"] == 0.6  # the recipe sets none: the profile's instant recommendation
