"""The distributed deployment on one machine: Airflow with the CeleryExecutor on the machine's PostgreSQL and
Redis, two Celery workers, two stand-in SGLang replicas and SeaweedFS, driven through the REST API.

1. A category run's shards run on both workers (each reports its own host name through `[core]
   hostname_callable`), both replicas serve requests, and the output is contract-valid: the manifest
   verifies and every planned sample is stored exactly once.
2. A worker is killed with SIGKILL while it runs a shard: the scheduler notices the missing heartbeats
   (the timeout is lowered to seconds here; 300 s by default), the shard is retried on the other worker,
   continues from its checkpoints, and the output still has every planned sample exactly once.

The database (a fresh, uniquely named one) and the Redis database (an empty numbered one, claimed) are
given back afterwards (`eagle_datagen_stack.services`).
"""

from __future__ import annotations

import io
import time
from collections import Counter

import pyarrow.parquet as pq
import pytest

from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen_stack.api import AirflowApi
from eagle_datagen_stack.processes import wait_until
from eagle_datagen_stack.services import postgres_database, redis_database
from eagle_datagen_stack.stack import LocalStack, StackOptions, celery_component

pytestmark = pytest.mark.slow

WORKERS = ("worker-a", "worker-b")
# Two slots per replica and about a second per request: a shard of a few samples takes seconds, so shards
# overlap across workers and a worker can be killed in the middle of one.
SIM = SimConfig(max_running_requests=2, decode_s_per_token=0.01, output_tokens_min=50, output_tokens_max=150)
HEARTBEAT_TIMEOUT_S = 20
DETECTION = {
    # A task whose supervisor stopped heartbeating is failed (and retried) after this long.
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT_S),
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
    "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "2",
    # A message the killed worker had taken but not started is handed out again after this long.
    "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "90",
}
RUN_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    home = tmp_path_factory.mktemp("celery")
    with postgres_database() as db_url, redis_database() as broker_url:
        options = StackOptions(
            home=home,
            sim=SIM,
            replicas=2,
            executor="CeleryExecutor",
            database_url=db_url,
            broker_url=broker_url,
            celery_workers=WORKERS,
            worker_concurrency=2,
            parallelism=8,
            pool_slots=4,
            draft_vocab_size=64,
            settings=DETECTION,
        )
        with LocalStack(options) as running:
            yield running


@pytest.fixture
def object_store(stack, monkeypatch):
    from eagle_datagen.objectstore.s3 import s3_client
    from eagle_datagen.storage.output_root import open_output_root

    for key, value in stack.s3.env.items():
        monkeypatch.setenv(key, value)
    s3_client.cache_clear()
    yield open_output_root(stack.output)
    s3_client.cache_clear()


def wait_for_run(stack: LocalStack, dag_id: str, run_id: str) -> str:
    alive = [c for c in stack.components.values() if c.process and c.process.poll() is None]  # not the killed one
    return stack.api.wait_for_run(dag_id, run_id, RUN_TIMEOUT_S, alive)


def shard_instances(api: AirflowApi, dag_id: str, run_id: str) -> list[dict]:
    return [ti for ti in api.task_instances(dag_id, run_id) if ti["task_id"] == "generate_shard"]


def assert_every_planned_sample_once(root, category: str) -> dict:
    """The category's manifest verifies, and its data and quarantine files hold each planned sample once."""
    from eagle_datagen.generation.plan import load_plan, shard_requests
    from eagle_datagen.storage.manifest import list_manifests, verify_manifest

    [manifest] = [m for m in list_manifests(root) if category in m["counts"]["by_category"]]
    assert verify_manifest(root, manifest) == []
    plan = load_plan(root, manifest["run_id"])
    planned = Counter(r.sample_id for i in range(len(plan.shards)) for r in shard_requests(root, plan, i))
    stored = Counter(
        row["sample_id"]
        for entry in manifest["files"]
        if entry["kind"] in ("data", "quarantine")
        for row in pq.read_table(io.BytesIO(root.read_bytes(entry["key"]))).to_pylist()
    )
    assert planned and set(planned.values()) == {1}
    assert stored == planned, (
        f"missing {sorted(planned - stored)[:5]}, extra or repeated {sorted(stored - planned)[:5]}"
    )
    assert manifest["counts"]["samples"] == len(planned)
    return manifest


def test_shards_run_on_both_workers_and_both_replicas_serve(stack, object_store):
    dag_id = "eagle_datagen__math"
    conf = {"limit": 12, "samples_per_prompt": 2, "shard_size": 2}  # 6 shards of 4 samples
    run_id = stack.api.trigger(dag_id, conf)
    assert wait_for_run(stack, dag_id, run_id) == "success"

    shards = shard_instances(stack.api, dag_id, run_id)
    assert len(shards) == 6 and {ti["state"] for ti in shards} == {"success"}
    assert {ti["hostname"] for ti in shards} == set(WORKERS), [ti["hostname"] for ti in shards]
    generations = [sim.stats()["generations"] for sim in stack.sims]
    assert all(g > 0 for g in generations), generations  # both replicas served (canaries aside: 2 each)
    assert sum(generations) >= 24
    assert_every_planned_sample_once(object_store, "math")


def test_a_killed_worker_s_shard_is_retried_on_the_other_worker(stack, object_store):
    dag_id = "eagle_datagen__chat"
    conf = {"limit": 16, "samples_per_prompt": 3, "shard_size": 2}  # 8 shards of 6 samples
    run_id = stack.api.trigger(dag_id, conf)
    victim, survivor = WORKERS[1], WORKERS[0]

    def running_on_victim() -> list[dict]:
        return [
            ti
            for ti in shard_instances(stack.api, dag_id, run_id)
            if ti["state"] == "running" and ti["hostname"] == victim
        ]

    killed = wait_until(running_on_victim, RUN_TIMEOUT_S, f"a shard running on {victim}", [], every_s=0.5)
    time.sleep(0.5)  # let it get going: requests in flight
    stack.components[celery_component(victim)].kill()

    assert wait_for_run(stack, dag_id, run_id) == "success"
    for ti in killed:
        tries = stack.api.task_instance_tries(dag_id, run_id, "generate_shard", ti["map_index"])
        assert [t["hostname"] for t in tries][0] == victim and tries[0]["state"] != "success", tries
        assert tries[-1]["hostname"] == survivor and tries[-1]["state"] == "success", tries
    shards = shard_instances(stack.api, dag_id, run_id)
    assert len(shards) == 8 and {ti["state"] for ti in shards} == {"success"}
    assert_every_planned_sample_once(object_store, "chat")
