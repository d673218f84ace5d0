"""A DAG for tests/deploy/airflow_probe.py (copied into the probe's DAG folder): the retry rules (runs.RETRY_RULES) on
the Airflow under test, by its own means (compat.py). Its tasks are decorated as the DAG files decorate theirs and
have the category DAGs' default_args, but no delay between tries, so a wrong retry shows at once."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from airflow.sdk import dag

from eagle_datagen_airflow import runs
from eagle_datagen_airflow.runs import task

ARGS = runs.DEFAULT_ARGS | {"retries": 1, "retry_delay": timedelta(0), "max_retry_delay": timedelta(0)}


@dag(dag_id="probe_retry_rules", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC), default_args=ARGS)
def probe_retry_rules() -> None:
    @task
    def terminal() -> None:
        """A finalize task whose run was never planned: the package's DataGenError, terminal."""
        from eagle_datagen.generation.steps import RunConfig
        from eagle_datagen_airflow import tasks

        config = RunConfig(
            output=os.path.join(os.environ["AIRFLOW_HOME"], "never-planned"),
            tokenizer="standin:kimi-k2.5",
            sglang_urls=["http://127.0.0.1:9"],
            run_id="never-planned",
            prompts=["p.jsonl"],
            front_end="airflow",
        ).to_dict()
        tasks.finalize(config, {"aws_conn_id": "aws_default"}, SimpleNamespace(extra=None))

    @task(retry_policy=None)
    def healing(ti=None) -> None:
        """As preflight, which opts out of the rules: a terminal error on the first try, healed by the retry."""
        from eagle_datagen.errors import ConfigError

        if ti.try_number == 1:
            raise ConfigError("the server is still loading")

    terminal()
    healing()


probe_retry_rules()
