"""The compose deployment's init job (`python -m eagle_datagen_stack.deployment_init`): its settings, and a
real run against a fresh database on the machine's PostgreSQL with the project's Airflow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eagle_datagen_stack.deployment_init import InitError, connections, main

ENV = {
    "AIRFLOW_ADMIN_PASSWORD": "pw-123",
    "SGLANG_URLS": "http://sglang-router:30000",
    "SGLANG_TOKENIZER": "/models/Kimi-K2.5",
    "SGLANG_TRUST_REMOTE_CODE": "true",
    "S3_ENDPOINT_URL": "http://seaweedfs:8333",
    "S3_ACCESS_KEY": "key",
    "S3_SECRET_KEY": "s3-secret-value",
}


def test_connections_from_the_environment():
    more = {"SGLANG_CONCURRENCY": "40", "SGLANG_REPLICAS_BEHIND_URL": "8"}
    conns = connections(ENV | {"SGLANG_URLS": "http://a:30000, http://b:30000"} | more)
    assert conns["sglang_default"] == {
        "conn_type": "http",
        "extra": {
            "urls": ["http://a:30000", "http://b:30000"],
            "tokenizer": "/models/Kimi-K2.5",
            "trust_remote_code": True,
            "concurrency": 40,
            "replicas_behind_url": 8,
        },
    }
    aws = conns["aws_default"]
    assert aws["login"] == "key" and aws["password"] == "s3-secret-value"
    keyed = connections(ENV | {"SGLANG_API_KEY": " sk-deployment-key \n"})["sglang_default"]
    assert keyed["password"] == "sk-deployment-key"  # the API key every task sends (deployment.sglang_key)
    assert aws["extra"] == {"endpoint_url": "http://seaweedfs:8333", "region_name": "us-east-1"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"SGLANG_URLS": "sglang:30000"}, "SGLANG_URLS has ['sglang:30000']: give each endpoint as http://host:port"),
        ({"SGLANG_TRUST_REMOTE_CODE": "maybe"}, "SGLANG_TRUST_REMOTE_CODE='maybe' is not true or false"),
        ({"SGLANG_CONCURRENCY": "0"}, "SGLANG_CONCURRENCY='0' is not a positive integer"),
        ({"SGLANG_REPLICAS_BEHIND_URL": "two"}, "SGLANG_REPLICAS_BEHIND_URL='two' is not a positive integer"),
    ],
)
def test_bad_settings_name_the_variable(change, message):
    with pytest.raises(InitError, match=message.replace("[", r"\[").replace("]", r"\]")):
        connections(ENV | change)


def test_missing_settings_stop_before_touching_airflow(capsys):
    assert main({k: v for k, v in ENV.items() if k != "S3_SECRET_KEY"}) == 1
    err = capsys.readouterr().err
    assert err == "deployment init: error: S3_SECRET_KEY not set: copy .env.example to .env and fill it in\n"


@pytest.mark.slow
def test_init_migrates_writes_the_password_connections_and_pool_and_can_run_again(tmp_path):
    from eagle_datagen_stack.services import postgres_database

    home = tmp_path / "airflow"
    passwords = tmp_path / "auth" / "passwords.json"
    with postgres_database() as db_url:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "AWS_"))}
        env |= ENV | {
            "PATH": f"{Path(sys.executable).parent}:{env['PATH']}",  # `airflow` as on the image's PATH
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "ops:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "SGLANG_POOL_SLOTS": "6",
        }
        init = [sys.executable, "-m", "eagle_datagen_stack.deployment_init"]
        first = subprocess.run(init, env=env, capture_output=True, text=True, timeout=400)
        assert first.returncode == 0, first.stdout + first.stderr
        assert "s3-secret-value" not in first.stdout + first.stderr and "pw-123" not in first.stdout + first.stderr
        again = subprocess.run(
            init, env=env | {"SGLANG_URLS": "http://sglang-sim:30000"}, capture_output=True, text=True, timeout=400
        )
        assert again.returncode == 0, again.stdout + again.stderr

        def airflow(*args: str) -> str:
            done = subprocess.run(["airflow", *args], env=env, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            return done.stdout

        [sglang] = json.loads(airflow("connections", "get", "sglang_default", "-o", "json"))
        extra = sglang["extra_dejson"]
        assert extra["urls"] == ["http://sglang-sim:30000"]  # the second start's setting replaced the first
        assert (
            extra["tokenizer"] == "/models/Kimi-K2.5" and str(extra["trust_remote_code"]) == "True"
        )  # the CLI prints it as text
        [aws] = json.loads(airflow("connections", "get", "aws_default", "-o", "json"))
        assert aws["conn_type"] == "aws" and aws["extra_dejson"]["endpoint_url"] == "http://seaweedfs:8333"
        [pool] = json.loads(airflow("pools", "get", "sglang", "-o", "json"))
        assert int(pool["slots"]) == 6
    assert json.loads(passwords.read_text()) == {"ops": "pw-123"} and passwords.stat().st_mode & 0o777 == 0o600
