"""The glue between Airflow and the package: run ids, connections, params as RunConfig."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.generation.stage import check_run_id
from eagle_datagen.generation.steps import RunConfig


def test_run_ids_are_stable_per_dag_run_and_valid_for_the_package():
    from eagle_datagen_airflow.runs import run_id_for

    scheduled = run_id_for("math", "scheduled__2026-11-29T03:00:00+00:00")
    assert scheduled.startswith("math-scheduled__2026-11-29T03-00-00-00-00-")  # + a hash: ':' and '+' replaced
    assert run_id_for("math", "scheduled__2026-11-29T03:00:00+00:00") == scheduled  # every try, every worker
    assert run_id_for("chat", "scheduled__2026-11-29T03:00:00+00:00") != scheduled
    long_a, long_b = run_id_for("math", "x" * 300 + "a"), run_id_for("math", "x" * 300 + "b")
    assert long_a != long_b and len(long_a) == 128
    for run_id in (scheduled, long_a, run_id_for("math", "manual__2026-11-29T17:11:11.814761+00:00")):
        check_run_id(run_id)
        assert "." not in run_id  # manifests/run=<id>.json: the manifest listing splits on the dot


def test_run_ids_that_differ_only_in_replaced_characters_stay_distinct():
    """`a.b` and `a:b` both become `a-b`: without the hash the second DAG run would continue the first's plan."""
    from eagle_datagen_airflow.runs import run_id_for, sanitize

    ids = {run_id_for("math", r) for r in ("my.run", "my:run", "my+run", "my-run", "..", ".", "_x", "x_")}
    assert len(ids) == 8
    for run_id in ids:
        check_run_id(run_id)
    assert sanitize("manual_run-1") == "manual_run-1"  # nothing replaced: unchanged
    hash_only = {sanitize(value) for value in ("..", ".", "-")}  # nothing is left after cleaning: the hash alone
    assert len(hash_only) == 3
    for run_id in hash_only:
        check_run_id(run_id)


@pytest.fixture
def connection(monkeypatch):
    def make(conn_id: str, **fields):
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))

    return make


def test_sglang_connection_host_and_port(connection):
    from eagle_datagen_airflow.deployment import sglang_deployment

    connection("sglang_one", conn_type="http", host="sglang-0", port=30000, extra={"tokenizer": "/models/K"})
    deployment = sglang_deployment("sglang_one")
    assert deployment.urls == ["http://sglang-0:30000"] and deployment.tokenizer == "/models/K"
    assert deployment.profile == "kimi-k2.5" and deployment.trust_remote_code is False


def test_sglang_connection_with_replicas_and_deployment_facts(connection):
    from eagle_datagen_airflow.deployment import sglang_deployment

    extra = {
        "urls": ["http://a:30000/", "https://b:443"],
        "tokenizer": "/models/Kimi-K2.5",
        "trust_remote_code": True,
        "model": "moonshotai/Kimi-K2.5",
        "concurrency": "64",
    }
    connection("sglang_many", conn_type="generic", extra=extra)
    deployment = sglang_deployment("sglang_many")
    assert deployment.urls == ["http://a:30000", "https://b:443"]
    assert deployment.trust_remote_code is True and deployment.concurrency == 64


def test_trust_remote_code_goes_with_the_tokenizer_from_the_workers_environment(connection, monkeypatch):
    from eagle_datagen_airflow.deployment import sglang_deployment

    monkeypatch.setenv("EAGLE_DATAGEN_TOKENIZER", "/models/Kimi-K2.5")
    monkeypatch.setenv("EAGLE_DATAGEN_TRUST_REMOTE_CODE", "true")
    connection("sglang_env", conn_type="http", host="sglang-0", port=30000)
    deployment = sglang_deployment("sglang_env")
    assert deployment.tokenizer == "/models/Kimi-K2.5" and deployment.trust_remote_code is True
    connection("sglang_env", conn_type="http", host="sglang-0", port=30000, extra={"trust_remote_code": False})
    assert sglang_deployment("sglang_env").trust_remote_code is False  # the connection's own word comes first


def test_lost_after_is_a_deployment_fact_from_the_connection_that_reaches_the_run(connection):
    """How long a server may count fewer requests than the run has there before they are lost (liveness.py):
    a property of the deployment (its answer lengths, its load reporting), so the connection says it."""
    from eagle_datagen_airflow.deployment import sglang_deployment
    from eagle_datagen_airflow.runs import run_config

    connection("sglang_slow", conn_type="http", host="h", port=1, extra={"tokenizer": "t", "lost_after": "300"})
    deployment = sglang_deployment("sglang_slow")
    assert deployment.lost_after == 300.0
    config = RunConfig.from_dict(run_config("math", "/r.yaml", "m", {"output": "/o"}, deployment))
    assert config.lost_after_s == 300.0 and config.options().liveness.lost_after_s == 300.0
    connection("sglang_plain", conn_type="http", host="h", port=1, extra={"tokenizer": "t"})
    plain = RunConfig.from_dict(run_config("math", "/r.yaml", "m", {"output": "/o"}, sglang_deployment("sglang_plain")))
    assert plain.lost_after_s == 120.0  # settings.LOST_AFTER_S


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"conn_type": "http", "host": "h", "port": 1}, "names no tokenizer"),
        ({"conn_type": "http", "extra": {"tokenizer": "t"}}, "neither a host nor extra 'urls'"),
        ({"conn_type": "http", "host": "h", "extra": {"tokenizer": "t", "url": "x"}}, r"unknown extra key.*'url'"),
        (
            {"conn_type": "http", "host": "h", "extra": {"tokenizer": "t", "lost_after": "soon"}},
            "extra 'lost_after' is 'soon', not a positive number of seconds",
        ),
    ],
)
def test_sglang_connection_mistakes_are_one_line(connection, monkeypatch, fields, message):
    from eagle_datagen_airflow.deployment import sglang_deployment

    monkeypatch.delenv("EAGLE_DATAGEN_TOKENIZER", raising=False)
    connection("sglang_bad", **fields)
    with pytest.raises(ConfigError, match=message):
        sglang_deployment("sglang_bad")
    with pytest.raises(ConfigError, match="no Airflow connection 'sglang_missing'"):
        sglang_deployment("sglang_missing")


def test_aws_connection_sets_the_environment_for_the_task_only(connection, monkeypatch):
    import os

    from eagle_datagen_airflow.deployment import object_store

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    extra = {"endpoint_url": "http://127.0.0.1:9", "region_name": "eu-west-1"}
    connection("aws_store", conn_type="aws", login="KEY", password="SECRET", extra=extra)
    with object_store("aws_store"):
        assert os.environ["AWS_ACCESS_KEY_ID"] == "KEY" and os.environ["AWS_SECRET_ACCESS_KEY"] == "SECRET"
        assert os.environ["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9"
        assert os.environ["AWS_DEFAULT_REGION"] == "eu-west-1"
    assert os.environ["AWS_ACCESS_KEY_ID"] == "from-env" and "AWS_ENDPOINT_URL" not in os.environ
    with object_store("aws_missing"):  # no connection: the worker's environment as it is
        assert os.environ["AWS_ACCESS_KEY_ID"] == "from-env"


def test_params_become_a_run_config(monkeypatch):
    from eagle_datagen_airflow.deployment import Deployment
    from eagle_datagen_airflow.runs import refuse_unknown_conf, run_config

    params = {
        "output": "s3://eagle/datagen",
        "limit": None,
        "samples_per_prompt": 2,
        "temperature": 0.6,
        "top_p": 0.95,
        "max_new_tokens": 4096,
        "shard_size": 500,
        "draft_vocab_size": 32000,
        "force_regenerate": False,
        "dry_run": False,
        "max_rates": {"prompt_echo": 0.05},
    }
    config = run_config("math", "/r.yaml", "math-x", params, Deployment(urls=["http://a:1"], tokenizer="tok"))
    parsed = RunConfig.from_dict(json.loads(json.dumps(config)))
    assert parsed.max_rates == {"prompt_echo": 0.05}
    assert parsed.options().max_rates == {"prompt_echo": 0.05}
    assert parsed.categories == ["math"] and parsed.incremental and parsed.per_weight_version
    assert (parsed.temperature, parsed.samples_per_prompt, parsed.shard_size) == (0.6, 2, 500)
    assert not run_config("math", "/r.yaml", "m", params | {"force_regenerate": True}, Deployment(["u"], "t"))[
        "incremental"
    ]
    assert parsed.claim_ttl_s == 3600
    monkeypatch.setenv("EAGLE_DATAGEN_CLAIM_TTL", "7200")  # a deployment whose shards queue for longer
    assert run_config("math", "/r.yaml", "m", params, Deployment(["u"], "t"))["claim_ttl_s"] == 7200
    monkeypatch.setenv("EAGLE_DATAGEN_CLAIM_TTL", "an hour")
    with pytest.raises(ConfigError, match="EAGLE_DATAGEN_CLAIM_TTL='an hour' is not a positive number of seconds"):
        run_config("math", "/r.yaml", "m", params, Deployment(["u"], "t"))
    refuse_unknown_conf({"temperature": 1}, params)
    with pytest.raises(ConfigError, match=r"unknown setting\(s\) \['temprature'\]"):
        refuse_unknown_conf({"temprature": 1}, params)


def test_retry_policy_retries_transient_failures_and_fails_terminal_ones_at_once():
    from airflow.sdk import RetryAction

    from eagle_datagen.generation.plan_lock import PlanLockBusy
    from eagle_datagen.generation.steps import RetryableShardError
    from eagle_datagen.validation.diagnosis import ValidationFailed
    from eagle_datagen_airflow.runs import RETRY_POLICY

    def action(exc: BaseException) -> RetryAction:
        return RETRY_POLICY.evaluate(exc, try_number=1, max_tries=4).action

    assert action(RetryableShardError("3 samples ran out of attempts")) is RetryAction.DEFAULT  # retried
    assert action(PlanLockBusy("other planners held the lock")) is RetryAction.RETRY  # a DataGenError, retried
    assert action(ConfigError("bad recipe")) is RetryAction.FAIL
    assert action(ValidationFailed(["73% of samples have no </think>"])) is RetryAction.FAIL
    assert action(ConnectionResetError()) is RetryAction.DEFAULT


def test_deployment_settings_schedule_and_draft_vocab_size(monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    from eagle_datagen_airflow.recipe import NIGHTLY, default_draft_vocab_size, schedule

    assert schedule() == NIGHTLY and default_draft_vocab_size() == 32000
    monkeypatch.setenv("EAGLE_DATAGEN_SCHEDULE", "none")  # a deployment that only triggers and backfills by hand
    monkeypatch.setenv("EAGLE_DATAGEN_DRAFT_VOCAB_SIZE", "256")
    bag = DagBag(dag_folder=str(Path(__file__).resolve().parents[2] / "dags"))
    math, release = bag.get_dag("eagle_datagen__math"), bag.get_dag("eagle_datagen_release")
    assert math.schedule is None and math.params["draft_vocab_size"] == 256
    assert release.params["draft_vocab_size"] == 256
    monkeypatch.setenv("EAGLE_DATAGEN_SCHEDULE", "30 1 * * *")
    assert schedule() == "30 1 * * *"
    monkeypatch.setenv("EAGLE_DATAGEN_DRAFT_VOCAB_SIZE", "lots")
    with pytest.raises(ValueError, match="EAGLE_DATAGEN_DRAFT_VOCAB_SIZE='lots' is not a positive integer"):
        default_draft_vocab_size()


def test_a_plan_with_more_shards_than_airflow_can_map_fails_with_the_fix(monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from eagle_datagen_airflow.tasks import check_mappable

    monkeypatch.setenv("AIRFLOW__CORE__MAX_MAP_LENGTH", "10")
    check_mappable(10, 100, 10)
    with pytest.raises(AirflowFailException, match=r"plans 11 shards .* at most 10 tasks .* shard_size of at least 11"):
        check_mappable(11, 105, 10)


def test_a_plan_airflow_cannot_map_withdraws_its_claim_so_the_next_run_generates_the_samples(tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from eagle_datagen.storage.output_root import LocalOutputRoot
    from eagle_datagen_airflow import tasks

    from conftest import write_jsonl

    src = write_jsonl(
        tmp_path / "p.jsonl",
        [{"category": "chat", "messages": [{"role": "user", "content": f"q{i}"}]} for i in range(3)],
    )
    server = {"url": "http://127.0.0.1:9", "model_path": "moonshotai/Kimi-K2.5", "weight_version": None}
    servers = [server | {"version": None, "max_running_requests": None}]
    params = {"aws_conn_id": "aws_missing", "dry_run": False}

    def config(run_id: str) -> dict:
        return RunConfig(
            output=str(tmp_path / "out"),
            tokenizer="standin:kimi-k2.5",
            trust_remote_code=True,
            sglang_urls=[server["url"]],
            run_id=run_id,
            prompts=[str(src)],
            shard_size=1,
            incremental=True,
        ).to_dict()

    monkeypatch.setenv("AIRFLOW__CORE__MAX_MAP_LENGTH", "2")
    with pytest.raises(AirflowFailException, match="plans 3 shards"):
        tasks.plan(config("too-wide"), servers, params)
    assert LocalOutputRoot(str(tmp_path / "out")).list("claims/") == []
    monkeypatch.setenv("AIRFLOW__CORE__MAX_MAP_LENGTH", "10")
    assert tasks.plan(config("fits"), servers, params) == [0, 1, 2]  # nothing held by the refused run


def test_near_duplicate_threshold_reaches_the_form_and_the_run(tmp_path):
    from eagle_datagen.sources.recipe import parse_recipe
    from eagle_datagen_airflow.deployment import Deployment
    from eagle_datagen_airflow.form import category_params
    from eagle_datagen_airflow.runs import run_config

    plain = parse_recipe({"categories": {"math": {"sources": ["m.jsonl"]}}})
    assert category_params(plain, "math", "s3://b/p", 100)["near_duplicate_threshold"].value is None  # off
    recipe = parse_recipe({"near_duplicates": {"threshold": 0.8}, "categories": {"math": {"sources": ["m.jsonl"]}}})
    params = {name: param.value for name, param in category_params(recipe, "math", "s3://b/p", 100).items()}
    assert params["near_duplicate_threshold"] == 0.8
    config = RunConfig.from_dict(run_config("math", "/r.yaml", "m", params, Deployment(["http://a:1"], "tok")))
    assert config.options().prompts.near_duplicate_threshold == 0.8


def test_a_plan_held_by_another_dag_run_waits_while_it_runs_and_takes_over_once_no_task_or_process_of_it_runs(
    tmp_path, monkeypatch
):
    """Never green and empty: while a holder's DAG run runs (a backfill's other run, or one killed moments ago that
    Airflow has not noticed), or any task of it may still run, or a process of it still beats (a task marked failed,
    its process not stopped yet), the plan task waits, rescheduled, and looks again without planning, however
    quiet the holder has been; after the claim TTL it fails naming it. A silent holder with no DAG run to ask fails
    the plan task at once, naming it, its last sign of life and its expiry. Once its DAG run has ended and nothing
    of it runs, the plan task takes the samples over, and the run that held them, resumed, generates nothing."""
    import os
    import time
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException, AirflowRescheduleException

    from eagle_datagen.errors import DataGenError
    from eagle_datagen.generation.heartbeat import write_heartbeat
    from eagle_datagen.generation.steps import generate_step, plan_step
    from eagle_datagen.storage.output_root import LocalOutputRoot
    from eagle_datagen_airflow import claim_owners, tasks
    from eagle_datagen_airflow.claim_owners import AirflowHolders, owner_key, waiting_key

    from conftest import write_jsonl

    src = write_jsonl(
        tmp_path / "p.jsonl",
        [{"category": "chat", "messages": [{"role": "user", "content": f"q{i}"}]} for i in range(3)],
    )
    server = {"url": "http://127.0.0.1:9", "model_path": "moonshotai/Kimi-K2.5", "weight_version": None}
    servers = [server | {"version": None, "max_running_requests": None}]
    params = {"aws_conn_id": "aws_missing", "dry_run": False}
    output = str(tmp_path / "out")
    root = LocalOutputRoot(output)

    def config(run_id: str) -> dict:
        return RunConfig(
            output=output,
            tokenizer="standin:kimi-k2.5",
            trust_remote_code=True,
            sglang_urls=[server["url"]],
            run_id=run_id,
            prompts=[str(src)],
            shard_size=1,
            incremental=True,
        ).to_dict()

    # the DAG runs' and task instances' states, as Airflow's execution API would tell them
    states: dict[tuple[str, str], str] = {}
    task_states: dict[tuple[str, str], dict[str, str]] = {}
    airflow = AirflowHolders(lambda d, r: states[(d, r)], lambda d, r: task_states.get((d, r), {}))
    killed = SimpleNamespace(dag_id="eagle_datagen__chat", run_id="scheduled__killed")
    assert tasks.plan(config("chat-killed"), servers, params, killed, airflow) == [0, 1, 2]
    assert owner_key("chat-killed") in root.list("claims/")  # who to ask whether it has ended

    states[(killed.dag_id, killed.run_id)] = "running"  # killed moments ago: Airflow has not noticed
    with pytest.raises(AirflowRescheduleException) as waited:
        tasks.plan(config("chat-next"), servers, params, None, airflow)
    assert waited.value.reschedule_date.timestamp() > time.time()  # looks again later, no slot held meanwhile
    assert waiting_key("chat-next") in root.list("claims/")  # the holders it waits for
    started = datetime.now(UTC)
    planned: list = []
    with monkeypatch.context() as mp:  # nothing changed: it waits again, without planning (no tokenizing)
        mp.setattr("eagle_datagen.generation.steps.plan_step", lambda *a: planned.append(a) or plan_step(*a))
        with pytest.raises(AirflowRescheduleException):
            tasks.plan(config("chat-next"), servers, params, None, airflow, waiting_since=started)
        stamp = time.time() - 2 * 3600  # quiet for twice the claim TTL: shards waiting in a full pool ...
        for key in root.list():
            if "run=chat-killed" in key:
                os.utime(root.location(key), (stamp, stamp))
        with pytest.raises(AirflowRescheduleException):  # ... its DAG run still runs: its claims hold
            tasks.plan(config("chat-next"), servers, params, None, airflow, waiting_since=started)
        long_ago = datetime.fromtimestamp(time.time() - 7200, UTC)  # waited longer than the claim TTL (an hour)
        with pytest.raises(AirflowFailException) as gave_up:
            tasks.plan(config("chat-next"), servers, params, None, airflow, waiting_since=long_ago)
    assert planned == []
    message = str(gave_up.value)
    assert "run chat-killed holds 3 samples (last showed life" in message
    assert "still running: its DAG run scheduled__killed of eagle_datagen__chat is running" in message
    assert "waited 120 min for the holding runs, which are still live: this run published nothing" in message
    assert "\n" not in message
    assert not [k for k in root.list() if "run=chat-next/" in k or k.startswith("manifests/")]  # nothing made

    # marked failed, but not every task of it has ended (a shard backing off before its retry): still waited for
    states[(killed.dag_id, killed.run_id)] = "failed"
    task_states[(killed.dag_id, killed.run_id)] = {"plan": "success", "generate_shard_0": "up_for_retry"}
    with pytest.raises(AirflowRescheduleException):
        tasks.plan(config("chat-next2"), servers, params, None, airflow)
    # every task ended, but a process of it still beats (marked failed, its worker not stopped yet): waited for
    task_states[(killed.dag_id, killed.run_id)] = {"plan": "success", "generate_shard_0": "failed"}
    write_heartbeat(root, "chat-killed", "p1", by="shard 0")
    with pytest.raises(AirflowRescheduleException):
        tasks.plan(config("chat-next2"), servers, params, None, airflow, waiting_since=started)
    assert root.list(owner_key("chat-killed"))  # nothing taken over
    write_heartbeat(root, "chat-killed", "p1", by="shard 0", stopped=True)  # the process ended
    assert tasks.plan(config("chat-next2"), servers, params, None, airflow, waiting_since=started) == [0, 1, 2]
    assert [k for k in root.list("claims/") if "chat-killed" in k] == ["claims/taken-over/run=chat-killed.json"]

    # the dead run, cleared and resumed: its claim is gone, so it generates nothing (chat-next2's samples now)
    with pytest.raises(DataGenError) as resumed:
        generate_step(config("chat-killed"), servers, [0])
    message = str(resumed.value)
    assert "run chat-killed generates nothing: run chat-next2 took its samples over" in message
    assert "DAG run scheduled__killed of eagle_datagen__chat had ended: failed" in message and "\n" not in message
    assert not root.list("checkpoints/run=chat-killed/shard=")  # nothing generated

    # a silent holder with no DAG run to ask (a command-line run killed minutes ago): fails at once, naming it
    root.delete(owner_key("chat-next2"))
    stamp = time.time() - 600
    for key in root.list():
        if "run=chat-next2" in key:
            os.utime(root.location(key), (stamp, stamp))
    with pytest.raises(AirflowFailException) as failed:
        tasks.plan(config("chat-next3"), servers, params, None, airflow)
    message = str(failed.value)
    assert "run chat-next2 holds 3 samples (last showed life" in message and "silent; its claim expires" in message
    assert "rerun after" in message and "\n" not in message
    assert claim_owners.RUNNING == ("queued", "running")
    assert "scheduled" in claim_owners.LIVE_TASK_STATES and "up_for_retry" in claim_owners.LIVE_TASK_STATES


def test_a_remote_code_tokenizer_without_trust_remote_code_fails_the_preflight_task_in_one_line(
    connection, tmp_path, standin_dir
):
    """The connection names the remote-code stand-in without "trust_remote_code": the preflight task stops before
    any server is asked (none listens at its URL), naming the folder, the class and the connection extra."""
    from types import SimpleNamespace

    from eagle_datagen.generation.checklist import PROBE_KEY
    from eagle_datagen_airflow.tasks import preflight

    from conftest import DEMO_RECIPE

    extra = {"urls": ["http://127.0.0.1:9"], "tokenizer": str(standin_dir)}
    connection("sglang_untrusted", conn_type="http", extra=extra)
    params = {"sglang_conn_id": "sglang_untrusted", "aws_conn_id": "aws_none", "output": str(tmp_path / "out")}
    with pytest.raises(ConfigError) as info:
        preflight("math", str(DEMO_RECIPE), params, SimpleNamespace(params={}), SimpleNamespace(conf={}, run_id="m1"))
    line = str(info.value)
    assert (
        "\n" not in line and f"tokenizer {standin_dir} ships its own code (tokenization_kimi.TikTokenTokenizer)" in line
    )
    assert "set the SGLang connection's extra 'trust_remote_code' to true" in line and "--trust" not in line
    # nothing but the deployment check's probe of the output root was written
    written = [p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert written == [PROBE_KEY]
