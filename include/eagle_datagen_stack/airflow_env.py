"""The environment that configures an Airflow deployment of the project, and Airflow's command line.

Airflow reads its whole configuration from `AIRFLOW__SECTION__KEY` variables and its connections from
`AIRFLOW_CONN_<ID>`, so a deployment here is one environment shared by every component (as in Airflow's
own docker-compose file). Nothing is inherited from the caller's `AIRFLOW*` or `AWS_*` variables: a test
process that imported Airflow with other settings must not leak them into the deployment.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle_datagen_stack.hostname import HOSTNAME_CALLABLE
from eagle_datagen_stack.processes import Component

PROJECT = Path(__file__).resolve().parents[2]
DAGS = PROJECT / "dags"
PLUGINS = PROJECT / "plugins"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
ADMIN = "admin"


class AirflowCommandFailed(RuntimeError):
    pass


@dataclass
class AirflowDeployment:
    """One Airflow deployment: where it lives, its metadata DB, executor, API port and connections."""

    home: Path
    api_port: int
    executor: str = "LocalExecutor"
    database_url: str | None = None  # default: SQLite inside `home`
    broker_url: str | None = None  # CeleryExecutor: the Celery broker (results go to the metadata DB)
    parallelism: int = 4  # the default 32 pre-forks workers a 2-core machine cannot feed (about 1.5 GB)
    dags: Path = DAGS
    plugins: Path = PLUGINS
    connections: dict[str, dict[str, Any]] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)  # further variables (EAGLE_DATAGEN_*, AIRFLOW__*)
    paused_at_creation: bool = True
    jwt_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def password_file(self) -> Path:
        return self.home / "simple_auth_manager_passwords.json.generated"

    def admin_password(self) -> str:
        """The admin's password of Airflow's simple auth manager: kept in the home, made on first use."""
        if self.password_file.exists():
            return json.loads(self.password_file.read_text())[ADMIN]
        self.home.mkdir(parents=True, exist_ok=True)
        password = secrets.token_urlsafe(12)
        self.password_file.write_text(json.dumps({ADMIN: password}))
        self.password_file.chmod(0o600)
        return password

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "AWS_"))}
        env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags),
                "AIRFLOW__CORE__PLUGINS_FOLDER": str(self.plugins),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__EXECUTOR": self.executor,
                "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": str(self.paused_at_creation),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN}:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.password_file),
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.api_url}/execution/",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.database_url or f"sqlite:///{self.home / 'airflow.db'}",
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.api_port),
                "AIRFLOW__API__BASE_URL": self.api_url,
                "AIRFLOW__API_AUTH__JWT_SECRET": self.jwt_secret,  # shared by the api-server and the workers
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.home / "logs"),
            }
        )
        if self.broker_url:
            env["AIRFLOW__CELERY__BROKER_URL"] = self.broker_url
            # Several workers on one machine: each reports its own host name (eagle_datagen_stack.hostname).
            env["AIRFLOW__CORE__HOSTNAME_CALLABLE"] = HOSTNAME_CALLABLE
        for conn_id, conn in self.connections.items():
            env[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(conn)
        env.update(self.settings)
        return env

    def component_args(self, name: str) -> list[str]:
        """The command line of an Airflow component of this deployment, everything bound to 127.0.0.1."""
        if name == "api-server":
            return [AIRFLOW, "api-server", "-H", "127.0.0.1", "-p", str(self.api_port), "-w", "1"]
        if name in ("scheduler", "triggerer"):
            return [AIRFLOW, name, "--skip-serve-logs"]  # their log servers would bind every interface
        if name == "dag-processor":
            return [AIRFLOW, name]
        raise ValueError(f"unknown component {name!r}")

    def component(
        self, name: str, log_dir: Path, args: list[str] | None = None, env: dict[str, str] | None = None
    ) -> Component:
        """An Airflow component (or any command given as `args`) with this deployment's environment (plus
        `env`), not started yet."""
        return Component(name, args or self.component_args(name), self.environment() | (env or {}), log_dir)

    def cli(self, *args: str, timeout_s: float = 300) -> str:
        """Run `airflow ARGS` against this deployment; its stdout, or an error with what it printed."""
        done = subprocess.run(
            [AIRFLOW, *args], env=self.environment(), capture_output=True, text=True, timeout=timeout_s
        )
        if done.returncode != 0:
            raise AirflowCommandFailed(
                f"airflow {' '.join(args)} exited with {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done.stdout


def sglang_connection(urls: list[str], tokenizer: str = "standin:kimi-k2.5", **extra: Any) -> dict[str, Any]:
    """The SGLang deployment as an Airflow connection (see plugins/eagle_datagen_airflow/deployment.py)."""
    return {"conn_type": "http", "extra": {"urls": urls, "tokenizer": tokenizer, **extra}}


def aws_connection(endpoint_url: str, access_key: str, secret_key: str, region: str = "us-east-1") -> dict[str, Any]:
    """An Amazon provider connection to an S3-compatible store (its endpoint in the extra)."""
    return {
        "conn_type": "aws",
        "login": access_key,
        "password": secret_key,
        "extra": {"endpoint_url": endpoint_url, "region_name": region},
    }
