"""The deployment checklist as the first thing a category DAG run does (its preflight task): the same lines as
`eagle-datagen check` (eagle_datagen/generation/checklist.py), plus what only Airflow has: the `sglang` pool
and the connections. A refused line stops the run before any plan or generation."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from eagle_datagen.errors import ConfigError
from eagle_datagen.generation.checklist import CheckLine, refused, run_checklist

log = logging.getLogger(__name__)
POOL = "sglang"  # the pool generate_shard runs in (dags/eagle_datagen_categories.py)


def pool_line(name: str = POOL) -> CheckLine:
    item = f"airflow pool {name}"
    try:
        from airflow.models.pool import Pool

        pool = Pool.get_pool(name)
    except Exception as exc:  # noqa: BLE001 - Airflow 3 workers may not read the metadata DB: say so, do not fail
        return CheckLine(
            item,
            "warn",
            f"cannot be read from a task here ({type(exc).__name__}): check it with `airflow pools get {name}`",
        )
    if pool is None:
        return CheckLine(
            item,
            "refused",
            f"missing: shards would never be scheduled; create it with "
            f"`airflow pools set {name} SLOTS 'shards generating at once'`",
        )
    if pool.slots == 0:
        return CheckLine(
            item, "refused", f"has 0 slots: no shard would run; give it slots (`airflow pools set {name} N ...`)"
        )
    return CheckLine(item, "ok", f"{pool.slots} slot(s)")


def connection_lines(params: Mapping[str, Any], endpoints: int) -> list[CheckLine]:
    """The SGLang connection (read already: a missing or bad one stops the task before this) and the AWS one."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    lines = [CheckLine(f"airflow connection {params['sglang_conn_id']}", "ok", f"{endpoints} SGLang endpoint(s)")]
    aws = params["aws_conn_id"]
    try:
        BaseHook.get_connection(aws)
        lines.append(CheckLine(f"airflow connection {aws}", "ok", "the object store's credentials and endpoint"))
    except AirflowNotFoundException:
        lines.append(
            CheckLine(
                f"airflow connection {aws}",
                "warn",
                "missing: s3:// locations use the workers' own "
                "AWS environment; add the connection (or set aws_conn_id) to use another",
            )
        )
    return lines


def check_deployment(config: dict[str, Any], params: Mapping[str, Any]) -> list[CheckLine]:
    """Every line logged; ConfigError naming every refused one (the task's retries cover a server still loading).
    Sources are found, not counted: the plan reads them next."""
    from eagle_datagen.generation.steps import RunConfig

    lines = [pool_line(), *connection_lines(params, len(config["sglang_urls"]))]
    lines += run_checklist(RunConfig.from_dict(config).options(), count_records=False)
    for line in lines:
        log.log(logging.INFO if line.verdict == "ok" else logging.WARNING, "check: %s", line.text())
    bad = refused(lines)
    if bad:
        raise ConfigError(f"the deployment check refused {len(bad)} item(s): " + "; ".join(x.text() for x in bad))
    return lines
