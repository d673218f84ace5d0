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
import sqlite3
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from eagle_datagen_stack.airflow_env import AirflowDeployment
from eagle_datagen_stack.processes import Component, free_port, tail, wait_until

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DEMO_PROMPTS = REPO / "include" / "data" / "demo_prompts"
CATEGORIES = ("math", "chat")
# Three nightly runs, 01-01, 01-02 and 01-03 at 03:00 UTC. Both ends are inclusive logical dates: a bare
# `--to-date 2026-01-03` means midnight and would leave out the run at 03:00 that day (two runs, not three).
DATES = ("2026-01-01", "2026-01-03T03:00:00+00:00")
CONF = {"limit": 2, "shard_size": 1, "samples_per_prompt": 1, "draft_vocab_size": 16}
DEADLINE_S = 360


def airflow_deployment(home: Path, recipe: Path, sglang_url: str) -> AirflowDeployment:
    """The deployment's environment: nothing inherited from the in-process Airflow of tests/dags/conftest.py."""
    host, port = sglang_url.removeprefix("http://").split(":")
    sglang = {
        "conn_type": "http",
        "host": host,
        "port": int(port),
        "extra": {"tokenizer": "standin:kimi-k2.5", "trust_remote_code": True},
    }
    return AirflowDeployment(
        home=home,
        api_port=free_port(),
        parallelism=2,
        connections={"sglang_default": sglang},
        settings={
            # Unpausing a DAG also schedules its latest nightly run (catchup is off): with the default output
            # and no AWS credentials it would fail and retry. Only the backfill's runs are under test here.
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
            "EAGLE_DATAGEN_RECIPE": str(recipe),
            # claims live 2 minutes: a run waiting for another's samples looks again every 30 s, not every minute
            "EAGLE_DATAGEN_CLAIM_TTL": "120",
        },
    )


def query(db: Path, sql: str, *args) -> list[tuple]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as con:
        return con.execute(sql, args).fetchall()


def dag_runs(db: Path) -> list[tuple]:
    return query(db, "SELECT dag_id, run_id, run_type, state, backfill_id FROM dag_run ORDER BY logical_date")


def wait_for(components: list[Component], logs: Path, what: str, condition) -> None:
    """Poll `condition()` (the DB) until it holds, while every component keeps running."""
    try:
        wait_until(condition, DEADLINE_S, what, components, every_s=1)  # a dead component fails with its log
    except TimeoutError as exc:
        pytest.fail(f"{exc}\n{tail(logs / 'scheduler.log')}")


def runs_done(db: Path) -> bool:
    runs = dag_runs(db)
    return len(runs) >= 3 and all(state in ("success", "failed") for _, _, _, state, _ in runs)


def plans_done(db: Path) -> bool:
    """Every run has planned once: the first to plan claimed the samples (success), the others wait for it
    (rescheduled: they end only once it has published)."""
    states = query(db, "SELECT state FROM task_instance WHERE task_id = 'plan'")
    assert ("failed",) not in states, states
    return len(states) == 3 and all(state in ("success", "up_for_reschedule") for (state,) in states)


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
            "airflow": airflow_deployment(home, recipe, sim.url),
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

    af, db, logs, output = deployment["airflow"], deployment["db"], deployment["logs"], deployment["output"]
    started = time.monotonic()
    af.cli("db", "migrate")
    # No slot until every run has planned: each plans while the others are in flight and none has published,
    # the race that duplicated samples before the plan lock and claims (the pool opens below).
    af.cli("pools", "set", "sglang", "0", "shards generating at once")
    af.cli("dags", "reserialize")  # the backfill needs the DAG in the DB; the dag-processor keeps it there
    af.cli("dags", "unpause", "eagle_datagen__math")  # every other DAG stays paused, as created
    conf = json.dumps(CONF | {"output": str(output)})
    # No --max-active-runs 1: the backfill's own default (10) lets all three runs start together.
    af.cli(
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
        components = []
        for name in ("api-server", "dag-processor", "scheduler"):  # each in its own process group
            component = af.component(name, logs).start()
            stack.callback(component.stop)  # stopped with its children, whatever happens
            components.append(component)
        wait_for(components, logs, "every run planned", lambda: plans_done(db))
        af.cli("pools", "set", "sglang", "2", "shards generating at once")
        wait_for(components, logs, "every run finished", lambda: runs_done(db))
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
        "eagle_datagen_evaluate": 1,  # triggered by hand (or after a release): never run here
    }
    # All three ran at once, and all three planned before any shard generated: nothing was published yet.
    spans = query(db, "SELECT start_date, end_date FROM dag_run")
    assert max(start for start, _ in spans) < min(end for _, end in spans), spans
    [(first_generation,)] = query(db, "SELECT min(start_date) FROM task_instance WHERE task_id = 'generate_shard'")
    first_looks = query(db, "SELECT min(start_date) FROM task_reschedule GROUP BY ti_id")
    assert len(first_looks) == 2 and all(start < first_generation for (start,) in first_looks), first_looks
    # The run that planned first claimed the category's samples; the others found them claimed by a live run,
    # waited for it (rescheduled, never green while it held them), then found them published: they ended after
    # `plan` and published nothing.
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
