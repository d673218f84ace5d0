"""A category DAG run whose connections hold secrets (the AWS connection's key id and secret, the SGLang
connection's password, which is the API key of a stand-in started with --api-key: the run passes only if every
request carries it) leaves them in no task log, no XCom, nothing in Airflow's home (its metadata DB included) and no
stored object. Also: trust_remote_code is off unless the connection says so."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import uuid
from pathlib import Path

import pytest

from secret_scan import files_under, leaks, random_credentials, stored_objects

from conftest import DEMO_PROMPTS, REPO

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """Connections as a deployment gives them (in the environment), with secrets unique to this run; no AWS
    variables, so the AWS connection is what reaches the store."""
    from eagle_datagen.objectstore.seaweedfs import SeaweedFS
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    credentials = random_credentials()
    sglang_password = "sglang-" + random_credentials()["secret_key"]
    folder = tmp_path_factory.mktemp("secret-recipe")
    lines = (DEMO_PROMPTS / "chat.jsonl").read_text(encoding="utf-8").splitlines()[:4]
    (folder / "chat.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    recipe = folder / "recipe.yaml"
    # A category of its own: an asset is named by its category (eagle_datagen__<category>), and Airflow does not
    # activate an asset whose name another test's recipe already gave to another URI.
    recipe.write_text(
        "version: 1\nname: secrettest\ncategories:\n  secretcheck:\n    sources: [chat.jsonl]\n"
        "    sampling: {max_new_tokens: 256}\n",
        encoding="utf-8",
    )
    store = SeaweedFS(tmp_path_factory.mktemp("secret-store"), buckets=["vault"], **credentials)
    keyed = dataclasses.replace(SimConfig().with_profile("instant"), api_key=sglang_password)
    with store, SimServerThread(keyed) as sim, pytest.MonkeyPatch.context() as mp:
        for key in store.env:
            mp.delenv(key, raising=False)
        mp.setenv("EAGLE_DATAGEN_RECIPE", str(recipe))
        host, port = sim.url.removeprefix("http://").split(":")
        sglang = {
            "conn_type": "http",
            "host": host,
            "port": int(port),
            "login": "eagle",
            "password": sglang_password,
            "extra": {"tokenizer": "standin:kimi-k2.5", "trust_remote_code": True},
        }
        mp.setenv("AIRFLOW_CONN_SGLANG_DEFAULT", json.dumps(sglang))
        aws = {
            "conn_type": "aws",
            "login": credentials["access_key"],
            "password": credentials["secret_key"],
            "extra": {"endpoint_url": store.endpoint_url, "region_name": "us-east-1"},
        }
        mp.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(aws))
        yield {
            "store": store,
            "secrets": [credentials["access_key"], credentials["secret_key"], sglang_password],
            "output": f"s3://vault/secrets-{uuid.uuid4().hex[:8]}",
            "sim": sim,
        }


def xcom_values(dag_id: str, run_id: str) -> dict[str, bytes]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(select(XComModel).where(XComModel.dag_id == dag_id, XComModel.run_id == run_id))
        return {f"xcom {x.task_id}[{x.map_index}].{x.key}": json.dumps(x.value, default=str).encode() for x in rows}


def test_a_dag_run_with_secret_connections_leaks_them_nowhere(deployment, capfd, caplog):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.log import redact

    caplog.set_level(logging.DEBUG)  # every library's debug lines too (botocore logs each request's headers)

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    run = bag.get_dag("eagle_datagen__secretcheck").test(
        run_conf={"output": deployment["output"], "shard_size": 2, "draft_vocab_size": 16}
    )
    assert run.state == "success", [(ti.task_id, ti.state) for ti in run.get_task_instances()]
    polls = deployment["sim"].stats()["polls"]
    assert not [p for p in polls if p.startswith("unauthorized")], polls  # the password went with every request
    assert deployment["sim"].stats()["generations"] > 0
    output = capfd.readouterr()
    raw = "\n".join(caplog.handler.format(record) for record in caplog.records)
    assert "object store from connection 'aws_default'" in raw  # the tasks' log lines are all here
    assert re.search(r"DEBUG +botocore", raw)
    # dag.test() hands log records to pytest as they are; Airflow's task-log writer passes every line through
    # its secrets masker first (airflow.sdk.log.mask_logs). The secret key and the SGLang password are never
    # logged at all; botocore's debug lines carry the access key id, which the task masks.
    secret_key, sglang_password = deployment["secrets"][1:]
    assert leaks([secret_key, sglang_password], {"raw task logs": raw.encode()}) == []
    task_logs = redact(raw)
    assert deployment["secrets"][0] in raw and "***" in task_logs
    xcoms = xcom_values("eagle_datagen__secretcheck", run.run_id)
    assert any(key.startswith("xcom preflight") for key in xcoms)
    texts = {"stdout": output.out.encode(), "stderr": output.err.encode(), "task logs": task_logs.encode(), **xcoms}
    texts |= files_under(Path(os.environ["AIRFLOW_HOME"]))  # logs, the metadata DB: all that Airflow wrote
    assert leaks(deployment["secrets"], texts) == []
    stored = stored_objects(deployment["store"].client(), "vault")
    assert any(key.endswith(".json") and "/manifests/" in key for key in stored)
    assert leaks(deployment["secrets"], stored) == []


@pytest.mark.parametrize("value", [None, False, "false", "no", "0", ""])
def test_trust_remote_code_is_off_unless_the_connection_opts_in(value, monkeypatch):
    from eagle_datagen_airflow.deployment import sglang_deployment

    extra = {"tokenizer": "/models/K"} | ({} if value is None else {"trust_remote_code": value})
    monkeypatch.setenv("AIRFLOW_CONN_SGLANG_TRC", json.dumps({"conn_type": "http", "host": "h", "extra": extra}))
    assert sglang_deployment("sglang_trc").trust_remote_code is False
