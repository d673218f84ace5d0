"""A category DAG run that died after planning (its shard tasks failed: a killed worker), then a new DAG run:
the new run's plan task finds the samples claimed, asks Airflow for the state of the DAG run that claimed
them (failed), releases its claims and generates the samples itself, never ending green and empty; a third
DAG run, with everything published, is a success with nothing to generate.

Killed moments ago: Airflow still shows the dead DAG run running (its worker's death not noticed yet) and its
claim is live. The new run's plan task waits, rescheduled, and takes over once the dead DAG run is marked
failed; the dead run, cleared and resumed after that, generates nothing. Never marked failed: once the dead
run's claim has gone silent the new run's plan task fails, naming it."""

from __future__ import annotations

import json
import os
import threading
import time
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


def states_of(run) -> dict[tuple[str, int], str]:
    """Every task instance of the DAG run (there must be some: an empty run would pass any all())."""
    found = {(ti.task_id, ti.map_index): ti.state for ti in run.get_task_instances()}
    assert {"preflight", "plan", "finalize"} <= {task for task, _ in found}, found
    return found


def set_dag_run_state(dag_id: str, run_id: str, state: str) -> None:
    """What Airflow's metadata says of a DAG run: as the scheduler (or a user marking it) would set it."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    for attempt in range(20):  # the DAG run under test commits too (SQLite): try again while it is locked
        try:
            with create_session() as session:
                run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
                run.state = state
            return
        except Exception:  # sqlite3.OperationalError: database is locked
            if attempt == 19:
                raise
            time.sleep(0.5)


def reschedules(dag_id: str, run_id: str, task_id: str) -> int:
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        query = (
            select(func.count())
            .select_from(TaskReschedule)
            .join(TaskInstance, TaskInstance.id == TaskReschedule.ti_id)
            .where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id, TaskInstance.task_id == task_id)
        )
        return session.scalar(query)


def killed_run(dag, conf: dict, monkeypatch):
    """A DAG run whose shard tasks died after its plan claimed the samples."""
    from airflow.sdk.exceptions import AirflowFailException

    from eagle_datagen_airflow import tasks

    def killed(*args, **kwargs):
        raise AirflowFailException("worker killed")

    with monkeypatch.context() as mp:
        mp.setattr(tasks, "generate_shard", killed)
        return dag.test(run_conf=conf)


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
    states = states_of(run)
    assert all(state == "success" for state in states.values()), states
    assert sum(task == "generate_shard" for task, _ in states) == PROMPTS // conf["shard_size"]
    manifest = json.loads((out / "manifests" / f"run={run_id_for('killedmath', run.run_id)}.json").read_text())
    assert manifest["counts"]["data"] + manifest["counts"]["quarantine"] == PROMPTS  # it took every sample over
    assert not (out / "claims" / f"run={dead_id}.parquet").exists()  # the dead run's claims were released

    rerun = dag.test(run_conf=conf)  # everything is published now: a success with nothing to generate
    states = {(ti.task_id, ti.map_index): ti.state for ti in rerun.get_task_instances()}
    assert rerun.state == "success" and states[("plan", -1)] == "success", states
    assert "failed" not in states.values()
    assert not (out / "manifests" / f"run={run_id_for('killedmath', rerun.run_id)}.json").exists()


def test_a_holder_killed_moments_ago_is_waited_for_and_taken_over_once_its_dag_run_is_marked_failed(
    deployment, monkeypatch
):
    from airflow.dag_processing.dagbag import DagBag

    from eagle_datagen.errors import DataGenError
    from eagle_datagen.generation.steps import generate_shard_step
    from eagle_datagen.storage.output_root import LocalOutputRoot

    monkeypatch.setenv("EAGLE_DATAGEN_CLAIM_TTL", "60")  # heartbeats 15 s apart: the plan task looks every 15 s
    dag = DagBag(dag_folder=str(DAGS)).get_dag("eagle_datagen__killedmath")
    conf = {"shard_size": 2, "draft_vocab_size": 16, "output": deployment["output"]}
    out = Path(deployment["output"])
    dead = killed_run(dag, conf, monkeypatch)
    dead_id = run_id_for("killedmath", dead.run_id)
    # killed moments ago: Airflow has not noticed yet (its DAG run still running), its claim is fresh
    set_dag_run_state(dag.dag_id, dead.run_id, "running")
    marked = threading.Timer(5.0, set_dag_run_state, (dag.dag_id, dead.run_id, "failed"))  # a user marks it
    marked.start()
    try:
        run = dag.test(run_conf=conf)
    finally:
        marked.cancel()
    states = states_of(run)
    assert run.state == "success" and all(state == "success" for state in states.values()), states
    assert reschedules(dag.dag_id, run.run_id, "plan") >= 1  # it waited, rescheduled, before taking over
    run_id = run_id_for("killedmath", run.run_id)
    manifest = json.loads((out / "manifests" / f"run={run_id}.json").read_text())
    assert manifest["counts"]["data"] + manifest["counts"]["quarantine"] == PROMPTS  # every sample, by the new run
    note = json.loads((out / "claims" / "taken-over" / f"run={dead_id}.json").read_text())
    assert note["by"] == run_id and "had ended: failed" in note["why"]

    # the dead DAG run, cleared and resumed: its shard task generates nothing, naming the run that took over
    config = {
        "output": deployment["output"],
        "tokenizer": "standin:kimi-k2.5",
        "trust_remote_code": True,
        "sglang_urls": ["http://127.0.0.1:9"],
        "run_id": dead_id,
        "recipe": os.environ["EAGLE_DATAGEN_RECIPE"],
        "categories": ["killedmath"],
    }
    servers = [{"url": "http://127.0.0.1:9", "model_path": "moonshotai/Kimi-K2.5", "weight_version": "default",
                "version": None, "max_running_requests": None}]  # fmt: skip
    with pytest.raises(DataGenError) as resumed:
        generate_shard_step(config, servers, 0)
    assert f"run {dead_id} generates nothing: run {run_id} took its samples over" in str(resumed.value)
    stored = [k for k in LocalOutputRoot(deployment["output"]).list("data/") if f"run={dead_id}" in k]
    assert stored == []  # the dead run published nothing


def test_a_holder_killed_and_never_marked_fails_the_new_run_naming_it_once_it_is_silent(
    deployment, monkeypatch, caplog
):
    from airflow.dag_processing.dagbag import DagBag

    from eagle_datagen.storage.output_root import LocalOutputRoot

    monkeypatch.setenv("EAGLE_DATAGEN_CLAIM_TTL", "60")  # live for 45 s after its last sign of life, expired at 60
    dag = DagBag(dag_folder=str(DAGS)).get_dag("eagle_datagen__killedmath")
    conf = {"shard_size": 2, "draft_vocab_size": 16, "output": deployment["output"]}
    dead = killed_run(dag, conf, monkeypatch)
    dead_id = run_id_for("killedmath", dead.run_id)
    set_dag_run_state(dag.dag_id, dead.run_id, "running")  # never noticed, never marked
    root = LocalOutputRoot(deployment["output"])
    shown = time.time() - 20  # it last showed life 20 s ago: live for 25 s more, silent 15 s after that
    for key in root.list():
        if f"run={dead_id}" in key:
            os.utime(root.location(key), (shown, shown))
    with caplog.at_level("INFO"):
        run = dag.test(run_conf=conf)
    states = states_of(run)
    assert run.state == "failed" and states[("plan", -1)] == "failed", states  # never green
    logged = caplog.text
    assert "waiting for live runs that hold this run's samples" in logged
    assert f"run {dead_id} holds {PROMPTS} samples (last showed life" in logged
    assert "silent; its claim expires" in logged
    assert reschedules(dag.dag_id, run.run_id, "plan") >= 1  # it waited while the holder was live
    assert not (Path(deployment["output"]) / "manifests" / f"run={run_id_for('killedmath', run.run_id)}.json").exists()
    assert (Path(deployment["output"]) / "claims" / f"run={dead_id}.parquet").exists()  # not taken without proof
