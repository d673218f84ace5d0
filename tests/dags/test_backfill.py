"""A backfill of one category under a real scheduler: `airflow backfill create` only queues the runs, the
scheduler (LocalExecutor, SQLite) runs them, and the other categories are untouched.

Everything runs as its own processes in a temporary Airflow home, as a deployment would: `airflow db
migrate`, the `sglang` pool, the DAGs serialized by `airflow dags reserialize`, the connection in the
environment, and three components bound to 127.0.0.1 (the api-server, because Airflow 3 tasks report to its
execution API; the dag-processor, which a deployment runs although the scheduler also ran these runs
without it once `dags reserialize` had stored the DAGs; the scheduler with `--skip-serve-logs`). Every
process is started in its own process group and stopped by that group, whatever happens. The stand-in
SGLang server runs in the test process; the output root is a local folder.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
PLUGINS = REPO / "plugins"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
DEMO_PROMPTS = REPO / "include" / "data" / "demo_prompts"
CATEGORIES = ("math", "chat")
# Three nightly runs, 01-01, 01-02 and 01-03 at 03:00 UTC. Both ends are inclusive logical dates: a bare
# `--to-date 2026-01-03` means midnight and would leave out the run at 03:00 that day (two runs, not three).
DATES = ("2026-01-01", "2026-01-03T03:00:00+00:00")
CONF = {"limit": 2, "shard_size": 1, "samples_per_prompt": 1, "draft_vocab_size": 16}
DEADLINE_S = 360


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def airflow_env(home: Path, recipe: Path, sglang_url: str, api_port: int) -> dict[str, str]:
    """The deployment's environment: nothing inherited from the in-process Airflow of tests/dags/conftest.py."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "AWS_"))}
    host, port = sglang_url.removeprefix("http://").split(":")
    sglang = {"conn_type": "http", "host": host, "port": int(port), "extra": {"tokenizer": "standin:kimi-k2.5"}}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "2",
            # Unpausing a DAG also schedules its latest nightly run (catchup is off): with the default output
            # and no AWS credentials it would fail and retry. Only the backfill's runs are under test here.
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),  # shared by the api-server and workers
            "AIRFLOW_CONN_SGLANG_DEFAULT": json.dumps(sglang),
            "EAGLE_DATAGEN_RECIPE": str(recipe),
        }
    )
    return env


def airflow(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([AIRFLOW, *args], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"airflow {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@contextmanager
def component(env: dict[str, str], logs: Path, *args: str):
    """An Airflow component in its own process group, stopped with its children on the way out."""
    log = logs / f"{args[0]}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([AIRFLOW, *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        stop_group(proc)


def stop_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)  # the group this test created for the component (same id as its leader)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; workers it forked may still be stopping
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


def query(db: Path, sql: str, *args) -> list[tuple]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as con:
        return con.execute(sql, args).fetchall()


def dag_runs(db: Path) -> list[tuple]:
    return query(db, "SELECT dag_id, run_id, run_type, state, backfill_id FROM dag_run ORDER BY logical_date")


def wait_for(procs: dict[str, subprocess.Popen], logs: Path, what: str, condition) -> None:
    """Poll `condition()` (the DB) until it holds, while every component keeps running."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        for name, proc in procs.items():
            assert proc.poll() is None, f"airflow {name} exited with {proc.returncode}:\n{tail(logs / f'{name}.log')}"
        if condition():
            return
        time.sleep(1)
    pytest.fail(f"{what}: not after {DEADLINE_S} s\n{tail(logs / 'scheduler.log')}")


def runs_done(db: Path) -> bool:
    runs = dag_runs(db)
    return len(runs) >= 3 and all(state in ("success", "failed") for _, _, _, state, _ in runs)


def plans_done(db: Path) -> bool:
    states = query(db, "SELECT state FROM task_instance WHERE task_id = 'plan'")
    assert ("failed",) not in states, states
    return len(states) == 3 and all(state == "success" for (state,) in states)


def tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def task_states(db: Path, run_id: str) -> dict[tuple[str, int], str]:
    rows = query(db, "SELECT task_id, map_index, state FROM task_instance WHERE run_id = ?", run_id)
    return {(task, index): state for task, index, state in rows}


@pytest.fixture
def deployment(tmp_path):
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    recipe = tmp_path / "recipe" / "recipe.yaml"
    recipe.parent.mkdir()
    for category in CATEGORIES:
        lines = (DEMO_PROMPTS / f"{category}.jsonl").read_text(encoding="utf-8").splitlines()[:4]
        (recipe.parent / f"{category}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    recipe.write_text(
        "version: 1\nname: backfilltest\nseed: 7\ncategories:\n"
        + "".join(f"  {c}:\n    sources: [{c}.jsonl]\n" for c in CATEGORIES),
        encoding="utf-8",
    )
    home, logs, output = tmp_path / "airflow", tmp_path / "logs", tmp_path / "output"
    for folder in (home, logs, output):
        folder.mkdir()
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        yield {
            "env": airflow_env(home, recipe, sim.url, free_port()),
            "db": home / "airflow.db",
            "logs": logs,
            "output": output,
        }


def test_a_backfill_whose_runs_plan_at_once_generates_each_sample_once_and_leaves_other_categories_alone(
    deployment,
):
    from eagle_datagen.storage.manifest import list_manifests, verify_manifest
    from eagle_datagen.storage.output_root import open_output_root
    from eagle_datagen.storage.parquet import decode_shard
    from eagle_datagen_airflow.runs import run_id_for

    env, db, logs, output = deployment["env"], deployment["db"], deployment["logs"], deployment["output"]
    started = time.monotonic()
    airflow(env, "db", "migrate")
    # No slot until every run has planned: each plans while the others are in flight and none has published,
    # the race that duplicated samples before the plan lock and claims (the pool opens below).
    airflow(env, "pools", "set", "sglang", "0", "shards generating at once")
    airflow(env, "dags", "reserialize")  # the backfill needs the DAG in the DB; the dag-processor keeps it there
    airflow(env, "dags", "unpause", "eagle_datagen__math")  # every other DAG stays paused, as created
    conf = json.dumps(CONF | {"output": str(output)})
    # No --max-active-runs 1: the backfill's own default (10) lets all three runs start together.
    airflow(
        env,
        "backfill",
        "create",
        "--dag-id",
        "eagle_datagen__math",
        "--from-date",
        DATES[0],
        "--to-date",
        DATES[1],
        "--dag-run-conf",
        conf,
    )
    queued = dag_runs(db)
    assert [(dag, run_type, state) for dag, _, run_type, state, _ in queued] == [
        ("eagle_datagen__math", "backfill", "queued")
    ] * 3, queued  # queued only: nothing runs them yet
    setup_s = time.monotonic() - started

    with ExitStack() as stack:
        procs = {
            "api-server": stack.enter_context(
                component(env, logs, "api-server", "-H", "127.0.0.1", "-p", env["AIRFLOW__API__PORT"], "-w", "1")
            ),
            "dag-processor": stack.enter_context(component(env, logs, "dag-processor")),
            "scheduler": stack.enter_context(component(env, logs, "scheduler", "--skip-serve-logs")),
        }
        wait_for(procs, logs, "every run planned", lambda: plans_done(db))
        airflow(env, "pools", "set", "sglang", "2", "shards generating at once")
        wait_for(procs, logs, "every run finished", lambda: runs_done(db))
        runs = dag_runs(db)
    run_s = time.monotonic() - started - setup_s
    print(f"setup {setup_s:.0f} s, backfill under the scheduler {run_s:.0f} s")

    # three backfill runs of math, all successful, and no run of any other DAG
    assert [(dag, run_type, state) for dag, _, run_type, state, _ in runs] == [
        ("eagle_datagen__math", "backfill", "success")
    ] * 3, [(r, task_states(db, r[1])) for r in runs]
    assert len({backfill for *_, backfill in runs}) == 1
    assert dict(query(db, "SELECT dag_id, is_paused FROM dag")) == {
        "eagle_datagen__math": 0,
        "eagle_datagen__chat": 1,  # parsed and present, never run
        "eagle_datagen_release": 1,  # scheduled on the category assets; paused, so the math asset queues it only
    }
    # All three ran at once, and all three planned before any shard generated: nothing was published yet.
    spans = query(db, "SELECT start_date, end_date FROM dag_run")
    assert max(start for start, _ in spans) < min(end for _, end in spans), spans
    [(first_generation,)] = query(db, "SELECT min(start_date) FROM task_instance WHERE task_id = 'generate_shard'")
    [(last_plan,)] = query(db, "SELECT max(end_date) FROM task_instance WHERE task_id = 'plan'")
    assert last_plan < first_generation
    # The run that planned first claimed the category's samples; the others found them claimed by a run in
    # flight, ended after `plan` and published nothing.
    states = {run_id: task_states(db, run_id) for _, run_id, *_ in runs}
    generating = [run_id for run_id, s in states.items() if s.get(("generate_shard", -1)) != "skipped"]
    assert len(generating) == 1, states
    [producer] = generating
    assert states[producer] == {
        ("preflight", -1): "success",
        ("plan", -1): "success",
        ("generate_shard", 0): "success",
        ("generate_shard", 1): "success",
        ("finalize", -1): "success",
    }
    for run_id, s in states.items():
        if run_id != producer:
            assert s[("plan", -1)] == "success" and s[("finalize", -1)] == "skipped", s

    root = open_output_root(str(output))
    [manifest] = list_manifests(root)
    assert manifest["run_id"] == run_id_for("math", producer)
    assert manifest["counts"]["data"] + manifest["counts"]["quarantine"] == CONF["limit"]
    assert manifest["counts"]["data"] > 0 and verify_manifest(root, manifest) == []
    stored = [
        sample_id
        for key in root.list("data/") + root.list("quarantine/")
        for sample_id in decode_shard(root.read_bytes(key)).column("sample_id").to_pylist()
    ]
    assert len(stored) == len(set(stored)) == CONF["limit"]  # each sample generated and stored once
    assert {f["key"].split("/")[1] for f in manifest["files"] if f["kind"] == "data"} == {"category=math"}
    assert not root.list("data/category=chat/") and not root.list("releases/")  # the others are untouched
    assert root.list("locks/") == []  # every planner released the plan lock
