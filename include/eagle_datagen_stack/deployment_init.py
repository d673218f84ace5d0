"""`python -m eagle_datagen_stack.deployment_init`: the one-shot init job of a deployment (docker-compose's
`airflow-init`), run with the deployment's environment before any other Airflow component starts.

1. `airflow db migrate` (waits for the metadata DB: a database container may still be starting);
2. the admin's password for Airflow's simple auth manager, written to the file that
   `AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE` names (the api-server reads it), from
   `AIRFLOW_ADMIN_PASSWORD`; the user name comes from `AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS`;
3. the connections `sglang_default` (from `SGLANG_URLS`, `SGLANG_TOKENIZER`, `SGLANG_TRUST_REMOTE_CODE`,
   `SGLANG_CONCURRENCY`, `SGLANG_REPLICAS_BEHIND_URL`; `SGLANG_API_KEY`, when set, is its password: the
   deployment's API key) and `aws_default` (from `S3_ENDPOINT_URL`, `S3_ACCESS_KEY`, `S3_SECRET_KEY`,
   `S3_REGION`), replaced if they exist, so that editing `.env` and starting again takes effect;
4. the `sglang` pool with `SGLANG_POOL_SLOTS` slots (shards generating at once).

Running it again changes nothing else: it is safe on every `docker compose up`. A missing or bad setting
stops it with one line that names the variable. Secrets are read from the environment and never printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eagle_datagen_stack.airflow_env import aws_connection, sglang_connection

POOL = "sglang"
POOL_DESCRIPTION = "shards generating at once"
REQUIRED = (
    "AIRFLOW_ADMIN_PASSWORD",
    "SGLANG_URLS",
    "SGLANG_TOKENIZER",
    "S3_ENDPOINT_URL",
    "S3_ACCESS_KEY",
    "S3_SECRET_KEY",
)


class InitError(RuntimeError):
    """A setting is missing or wrong: the message names it and says what to do."""


def _require(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise InitError(f"{name} is not set: copy .env.example to .env and fill it in")
    return value


def _flag(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "false").strip().lower()
    if value not in ("true", "false", "1", "0", "yes", "no", ""):
        raise InitError(f"{name}={value!r} is not true or false")
    return value in ("true", "1", "yes")


def _positive_int(env: Mapping[str, str], name: str, default: int | None) -> int | None:
    value = env.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise InitError(f"{name}={value!r} is not a positive integer")
    return int(value)


def connections(env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The deployment's connections, from its environment (the same shapes as the local stack's)."""
    urls = [u.strip() for u in _require(env, "SGLANG_URLS").replace(",", " ").split() if u.strip()]
    bad = [u for u in urls if not u.startswith(("http://", "https://"))]
    if bad:
        raise InitError(f"SGLANG_URLS has {bad}: give each endpoint as http://host:port, separated by commas")
    extra: dict[str, Any] = {}
    if _flag(env, "SGLANG_TRUST_REMOTE_CODE"):
        extra["trust_remote_code"] = True
    concurrency = _positive_int(env, "SGLANG_CONCURRENCY", None)
    if concurrency:
        extra["concurrency"] = concurrency
    replicas = _positive_int(env, "SGLANG_REPLICAS_BEHIND_URL", None)
    if replicas:
        extra["replicas_behind_url"] = replicas
    sglang = sglang_connection(urls, _require(env, "SGLANG_TOKENIZER"), **extra)
    if env.get("SGLANG_API_KEY", "").strip():  # the deployment's --api-key: the connection's password
        sglang["password"] = env["SGLANG_API_KEY"].strip()
    return {
        "sglang_default": sglang,
        "aws_default": aws_connection(
            _require(env, "S3_ENDPOINT_URL"),
            _require(env, "S3_ACCESS_KEY"),
            _require(env, "S3_SECRET_KEY"),
            env.get("S3_REGION", "").strip() or "us-east-1",
        ),
    }


def admin_user(env: Mapping[str, str]) -> str:
    users = env.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin")
    return users.split(",")[0].split(":")[0].strip() or "admin"


def write_password_file(env: Mapping[str, str]) -> Path:
    path = Path(_require(env, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({admin_user(env): _require(env, "AIRFLOW_ADMIN_PASSWORD")}))
    path.chmod(0o600)
    return path


def airflow(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["airflow", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        shown = " ".join(a if not a.startswith("{") else "<connection json>" for a in args)  # no secrets in logs
        raise InitError(f"airflow {shown} exited with {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done


def migrate(wait_s: float = 120.0) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        done = airflow("db", "migrate", check=False)
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise InitError(f"airflow db migrate kept failing for {wait_s:.0f} s: {done.stderr.strip()[-2000:]}")
        time.sleep(3)


def main(env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    try:
        missing = [name for name in REQUIRED if not env.get(name, "").strip()]
        if missing:
            raise InitError(f"{', '.join(missing)} not set: copy .env.example to .env and fill it in")
        conns = connections(env)
        slots = _positive_int(env, "SGLANG_POOL_SLOTS", 4)
        print("airflow db migrate ...", flush=True)
        migrate()
        print(f"admin password for {admin_user(env)!r} written to {write_password_file(env)}", flush=True)
        for conn_id, conn in conns.items():
            airflow("connections", "delete", conn_id, check=False)  # absent on the first start
            airflow("connections", "add", conn_id, "--conn-json", json.dumps(conn))
            print(f"connection {conn_id} ({conn['conn_type']}) set", flush=True)
        airflow("pools", "set", POOL, str(slots), POOL_DESCRIPTION)
        print(f"pool {POOL}: {slots} slots", flush=True)
    except InitError as exc:
        print(f"deployment init: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
