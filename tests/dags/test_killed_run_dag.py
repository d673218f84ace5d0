"""A category DAG run that died after planning (its shard tasks failed: a killed worker), then a new DAG run:
the new run's plan task finds the samples claimed, asks Airflow whether the DAG run that claimed them still runs
(its DAG run, every task instance of it, its processes' heartbeats), finds it ended, takes its samples over and
generates them, whatever else it plans, never ending green and empty; a third DAG run, with everything published,
is a success with nothing to generate.

Killed moments ago: Airflow still shows the dead DAG run running (its worker's death not noticed yet). The new
run's plan task waits, rescheduled, and takes over once the dead DAG run is marked failed; the dead run, cleared
and resumed after that, generates nothing. Never marked: Airflow shows it running however old its claim, so it
is never taken over, and the waiting run fails naming it after the claim TTL. Shards waiting in the pool past
the claim TTL keep their claims while a new run generates the rest; a DAG run marked failed whose shard task
still runs (its process not stopped yet) is not taken over until that process has ended."""

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

    write_prompts(tmp_path / "math.jsonl", PROMPTS)
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
        yield {"output": str(tmp_path / "out"), "prompts": tmp_path / "math.jsonl", "sim_url": sim.url}


def write_prompts(path: Path, count: int) -> None:
    """`count` prompts; the first ones are always the same (a prompt set that grows)."""
    lines = [json.dumps({"messages": [{"role": "user", "content": f"add {i} and {i * 3}"}]}) for i in range(count)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


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


def set_task_states(dag_id: str, run_id: str, states: dict[tuple[str, int], str | None]) -> None:
    """Task instances' states as the scheduler sets them (a shard waiting for a pool slot: scheduled)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        for ti in session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
        ):
            if (ti.task_id, ti.map_index) in states:
                ti.state = states[(ti.task_id, ti.map_index)]


def mark_failed(dag_id: str, run_id: str) -> None:
    """What a user's "mark failed" does (the REST API's, the UI's): its running tasks failed, the rest skipped."""
    from airflow.api.common.mark_tasks import set_dag_run_state_to_failed
    from airflow.models.dagbag import DBDagBag
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        dag = DBDagBag().get_dag_for_run(run, session=session)
        set_dag_run_state_to_failed(dag=dag, run_id=run_id, commit=True, session=session)


def age(root, run_id: str, seconds: float) -> None:
    """Every object of the run `seconds` old: it last showed life then."""
    shown = time.time() - seconds
    for key in root.list():
        if f"run={run_id}" in key:
            os.utime(root.location(key), (shown, shown))


def published_samples(output: str, run_id: str) -> int:
    manifest = json.loads((Path(output) / "manifests" / f"run={run_id}.json").read_text())
    return manifest["counts"]["data"] + manifest["counts"]["quarantine"]


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


def test_a_holder_airflow_still_shows_running_is_never_taken_over_however_old_and_the_new_run_fails_after_the_ttl(
    deployment, monkeypatch, caplog
):
    from airflow.dag_processing.dagbag import DagBag

    from eagle_datagen.storage.output_root import LocalOutputRoot

    monkeypatch.setenv("EAGLE_DATAGEN_CLAIM_TTL", "10")  # the new run looks every 2.5 s, gives up after 10 s
    dag = DagBag(dag_folder=str(DAGS)).get_dag("eagle_datagen__killedmath")
    conf = {"shard_size": 2, "draft_vocab_size": 16, "output": deployment["output"]}
    dead = killed_run(dag, conf, monkeypatch)
    dead_id = run_id_for("killedmath", dead.run_id)
    set_dag_run_state(dag.dag_id, dead.run_id, "running")  # never noticed, never marked
    age(LocalOutputRoot(deployment["output"]), dead_id, 20)  # its claim older than the TTL: still no proof
    with caplog.at_level("INFO"):
        run = dag.test(run_conf=conf)
    states = states_of(run)
    assert run.state == "failed" and states[("plan", -1)] == "failed", states  # never green
    logged = caplog.text
    assert "waiting for live runs that hold this run's samples" in logged
    assert f"run {dead_id} holds {PROMPTS} samples (last showed life" in logged
    assert f"still running: its DAG run {dead.run_id} of {dag.dag_id} is running" in logged
    assert reschedules(dag.dag_id, run.run_id, "plan") >= 1  # it waited while the holder ran
    assert not (Path(deployment["output"]) / "manifests" / f"run={run_id_for('killedmath', run.run_id)}.json").exists()
    assert (Path(deployment["output"]) / "claims" / f"run={dead_id}.parquet").exists()  # not taken without proof


def test_shards_waiting_in_the_pool_past_the_claim_ttl_keep_their_claims_while_a_new_run_generates_the_rest(
    deployment, monkeypatch
):
    """A DAG run whose shards wait for a slot of the `sglang` pool (scheduled) has no process and writes nothing;
    long past the claim TTL its samples are still its own: a new run with more prompts generates only the new
    ones (before: the quiet run's samples were free after the TTL, and both generated them)."""
    from airflow.dag_processing.dagbag import DagBag

    from eagle_datagen.storage.output_root import LocalOutputRoot

    monkeypatch.setenv("EAGLE_DATAGEN_CLAIM_TTL", "8")
    dag = DagBag(dag_folder=str(DAGS)).get_dag("eagle_datagen__killedmath")
    conf = {"shard_size": 2, "draft_vocab_size": 16, "output": deployment["output"]}
    queued = killed_run(dag, conf, monkeypatch)
    queued_id = run_id_for("killedmath", queued.run_id)
    shards = {("generate_shard", i): "scheduled" for i in range(PROMPTS // 2)}  # each waiting for a pool slot
    set_task_states(dag.dag_id, queued.run_id, shards | {("finalize", -1): None})
    set_dag_run_state(dag.dag_id, queued.run_id, "running")
    age(LocalOutputRoot(deployment["output"]), queued_id, 60)  # quiet for far longer than the claim TTL
    write_prompts(deployment["prompts"], PROMPTS + 4)

    run = dag.test(run_conf=conf)
    states = states_of(run)
    assert run.state == "success" and all(state == "success" for state in states.values()), states
    assert published_samples(deployment["output"], run_id_for("killedmath", run.run_id)) == 4  # the new ones only
    claims = Path(deployment["output"]) / "claims"
    assert (claims / f"run={queued_id}.parquet").exists() and not (claims / "taken-over").exists()


def test_a_dead_runs_part_of_a_plan_is_taken_over_while_the_rest_of_the_new_run_generates(deployment, monkeypatch):
    """The new run has new prompts of its own too: it takes the dead run's samples over in the same plan (before:
    only a run with nothing else to do took over, so the dead run's part waited out the claim TTL)."""
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(DAGS)).get_dag("eagle_datagen__killedmath")
    conf = {"shard_size": 2, "draft_vocab_size": 16, "output": deployment["output"]}
    dead = killed_run(dag, conf, monkeypatch)
    dead_id = run_id_for("killedmath", dead.run_id)
    write_prompts(deployment["prompts"], PROMPTS + 4)

    run = dag.test(run_conf=conf)
    states = states_of(run)
    assert run.state == "success" and all(state == "success" for state in states.values()), states
    assert sum(task == "generate_shard" for task, _ in states) == (PROMPTS + 4) // 2
    run_id = run_id_for("killedmath", run.run_id)
    assert published_samples(deployment["output"], run_id) == PROMPTS + 4  # its own 4 and the dead run's 6
    claims = Path(deployment["output"]) / "claims"
    assert not (claims / f"run={dead_id}.parquet").exists()
    note = json.loads((claims / "taken-over" / f"run={dead_id}.json").read_text())
    assert note["by"] == run_id and "had ended: failed, and no task or process of it runs" in note["why"]


def test_a_dag_run_marked_failed_whose_shard_task_still_runs_is_not_taken_over(deployment, monkeypatch):
    """Its shard task's process (the real step, generating) outlives the user's "mark failed" (a worker stops
    it only at its next heartbeat, or not at all when it is unreachable): the new run's plan task waits while
    that process beats, and takes over only once it has ended; nothing is generated by both at once."""
    from airflow.dag_processing.dagbag import DagBag

    from eagle_datagen.generation import steps
    from eagle_datagen.generation.endpoint_journal import endpoints_prefix
    from eagle_datagen.storage.output_root import LocalOutputRoot

    monkeypatch.setenv("EAGLE_DATAGEN_CLAIM_TTL", "8")  # beats 2 s apart; the waiting plan task looks as often
    dag = DagBag(dag_folder=str(DAGS)).get_dag("eagle_datagen__killedmath")
    conf = {"shard_size": 2, "draft_vocab_size": 16, "output": deployment["output"]}
    root = LocalOutputRoot(deployment["output"])
    dead = killed_run(dag, conf, monkeypatch)
    dead_id = run_id_for("killedmath", dead.run_id)
    set_task_states(dag.dag_id, dead.run_id, {("generate_shard", 0): "running"})  # its worker generates shard 0
    set_dag_run_state(dag.dag_id, dead.run_id, "running")

    # the shard task's process: the package's step, held before it publishes until the new run has decided
    reached, release, ended_at = threading.Event(), threading.Event(), []
    real_publish = steps.publish_shard

    def held_publish(root_, plan, index, *args):
        if plan.run_id == dead_id:
            reached.set()
            release.wait(120)
        return real_publish(root_, plan, index, *args)

    monkeypatch.setattr(steps, "publish_shard", held_publish)
    config = {
        "output": deployment["output"],
        "tokenizer": "standin:kimi-k2.5",
        "trust_remote_code": True,
        "sglang_urls": [deployment["sim_url"]],
        "run_id": dead_id,
        "recipe": os.environ["EAGLE_DATAGEN_RECIPE"],
        "categories": ["killedmath"],
        "claim_ttl_s": 8.0,
        "per_weight_version": True,
    }
    servers = [{"url": deployment["sim_url"], "model_path": "moonshotai/Kimi-K2.5", "weight_version": "default",
                "version": None, "max_running_requests": None}]  # fmt: skip

    def shard_process() -> None:
        try:
            steps.generate_shard_step(config, servers, 0)
        finally:
            ended_at.append(time.time())

    def release_once_waited() -> None:  # the new run's plan task noted what it waits for: let the process end
        deadline = time.monotonic() + 120
        while not any(k.endswith(".waiting.json") for k in root.list("claims/")) and time.monotonic() < deadline:
            time.sleep(0.1)
        release.set()

    worker = threading.Thread(target=shard_process)
    worker.start()
    watcher = threading.Thread(target=release_once_waited)
    try:
        assert reached.wait(120), "the shard process never got to publishing"
        mark_failed(dag.dag_id, dead.run_id)
        watcher.start()
        run = dag.test(run_conf=conf)
    finally:
        release.set()
        worker.join(timeout=120)
        if watcher.ident is not None:
            watcher.join(timeout=120)
    assert {(ti.task_id, ti.map_index): ti.state for ti in dead.get_task_instances()}[("generate_shard", 0)] == "failed"
    states = states_of(run)
    assert run.state == "success" and all(state == "success" for state in states.values()), states
    assert reschedules(dag.dag_id, run.run_id, "plan") >= 1  # it waited while the marked-failed process ran
    run_id = run_id_for("killedmath", run.run_id)
    note = json.loads(root.read_bytes(f"claims/taken-over/run={dead_id}.json"))
    assert note["by"] == run_id and note["at"] >= ended_at[0]  # taken over only once the process had ended
    assert "had ended: failed, and no task or process of it runs" in note["why"]
    samples = {key: at for key, at in root.list_modified(f"checkpoints/run={run_id}/").items()
               if not key.startswith(endpoints_prefix(run_id))}  # its preflight's endpoint journal comes first
    assert samples and min(samples.values()) >= ended_at[0]  # the new run generated nothing while the old one did
    assert root.list(f"data/category=killedmath/run={dead_id}/")  # the process published its shard (no manifest)
    assert published_samples(deployment["output"], run_id) == PROMPTS
