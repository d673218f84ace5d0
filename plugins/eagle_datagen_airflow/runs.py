"""A DAG run as the package's `RunConfig`: run ids, params and connection mapped onto settings, retries."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from airflow.sdk import ExceptionRetryPolicy, RetryAction, RetryRule

from eagle_datagen.errors import ConfigError
from eagle_datagen_airflow.deployment import Deployment

UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
MAX_RUN_ID = 128

# The package's expected failures (bad config, a failed diagnosis, a collision on storage) are terminal:
# retrying cannot fix them, so the task fails at once with the package's one-line message. Everything
# else retries with exponential backoff; a shard whose samples ran out of attempts (RetryableShardError)
# resumes from its checkpoints, on any worker; a plan that could not get the output root's plan lock
# (PlanLockBusy) plans again.
RETRY_POLICY = ExceptionRetryPolicy(
    rules=[
        RetryRule(  # first: it is a DataGenError, but other planners' lock clears with time
            exception="eagle_datagen.generation.plan_lock.PlanLockBusy",
            action=RetryAction.RETRY,
            reason="other incremental runs held the plan lock of the output root: plan again later",
        ),
        RetryRule(
            exception="eagle_datagen.errors.DataGenError",
            action=RetryAction.FAIL,
            reason="an expected, terminal failure (see the message): retrying cannot fix it",
        ),
    ]
)

DEFAULT_ARGS: dict[str, Any] = {
    "owner": "eagle-datagen",
    "retries": 3,
    "retry_delay": timedelta(seconds=30),
    "retry_exponential_backoff": 2.0,
    "max_retry_delay": timedelta(minutes=15),
    "retry_policy": RETRY_POLICY,
}


def sanitize(value: str) -> str:
    """`value` as a run id of [A-Za-z0-9_-], at most 128 characters. When characters had to be replaced
    (or the value was too long) a hash of the original keeps it distinct: `a.b` and `a:b` must not become
    one run, or the second DAG run would continue the first one's plan."""
    cleaned = UNSAFE.sub("-", value).strip("-_")
    if cleaned == value and len(value) <= MAX_RUN_ID:
        return value
    digest = hashlib.sha256(value.encode("utf-8", errors="surrogatepass")).hexdigest()[:16]
    kept = cleaned[: MAX_RUN_ID - len(digest) - 1].rstrip("-_")
    return f"{kept}-{digest}" if kept else digest


def run_id_for(category: str, dag_run_id: str) -> str:
    """The pipeline's run id of a DAG run: the same for every try of every task of that DAG run, so a retry
    on any worker continues the same run; distinct across DAG runs and categories."""
    return sanitize(f"{category}-{dag_run_id}")


def refuse_unknown_conf(conf: Mapping[str, Any] | None, params: Mapping[str, Any]) -> None:
    """Airflow accepts conf keys that are not params; a misspelt setting must not be ignored silently."""
    unknown = sorted(set(conf or {}) - set(params))
    if unknown:
        raise ConfigError(f"unknown setting(s) {unknown} in the run's conf; the params are {sorted(params)}")


def claim_ttl_s() -> float:
    """`EAGLE_DATAGEN_CLAIM_TTL` (seconds) on the workers, for deployments whose shards can wait in the
    `sglang` pool longer than the package's default of an hour."""
    from eagle_datagen.generation.claims import DEFAULT_CLAIM_TTL_S  # not at parse time: it pulls in pyarrow

    value = os.environ.get("EAGLE_DATAGEN_CLAIM_TTL", "").strip()
    if not value:
        return DEFAULT_CLAIM_TTL_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ConfigError(f"EAGLE_DATAGEN_CLAIM_TTL={value!r} is not a positive number of seconds (unset it for 3600)")
    return seconds


def run_config(
    category: str, recipe: str, run_id: str, params: Mapping[str, Any], deployment: Deployment
) -> dict[str, Any]:
    """The run's settings as JSON (what the steps take); connection ids and credentials stay out. The params and
    the connection's extra map to settings by the one declaration (eagle_datagen.settings)."""
    import dataclasses

    from eagle_datagen import settings
    from eagle_datagen.generation.steps import RunConfig  # not at parse time: it pulls in pyarrow

    return RunConfig(
        **settings.from_form(dict(params)),
        **settings.from_connection(dataclasses.asdict(deployment)),
        run_id=run_id,
        recipe=recipe,
        categories=[category],
        per_weight_version=True,  # new weights make every sample new
        claim_ttl_s=claim_ttl_s(),
        benchmark_dir=os.environ.get("EAGLE_DATAGEN_BENCHMARK_DIR", "").strip() or None,  # the workers' folder
        front_end="airflow",
    ).to_dict()
