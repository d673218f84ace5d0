"""plugins/eagle_datagen_airflow/compat.py: the retry rules by older means, for Airflow before 3.3.

This environment runs Airflow 3.3, where the DAGs use the retry policy itself; the clean venv of the lowest supported
Airflow (tests/deploy/test_airflow_versions.py) runs the older path for real.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.generation.plan_lock import PlanLockBusy
from eagle_datagen.generation.steps import RetryableShardError
from eagle_datagen.validation.diagnosis import ValidationFailed

SAMPLES = [
    RetryableShardError("3 samples ran out of attempts"),
    PlanLockBusy("other planners held the lock"),
    ConfigError("bad recipe"),
    ValidationFailed(["73% of samples have no </think>"]),
    ConnectionResetError("reset"),
]


def _raising(exc: BaseException):
    def body(params=None):
        raise exc

    return body


def test_fail_terminal_fails_at_once_exactly_what_the_retry_policy_fails():
    """The older path and Airflow 3.3's policy come from one list of rules and decide alike on every sample."""
    from airflow.sdk import RetryAction

    from eagle_datagen_airflow.compat import AirflowFailException, fail_terminal
    from eagle_datagen_airflow.runs import RETRY_POLICY, RETRY_RULES

    for exc in SAMPLES:
        fails_at_once = RETRY_POLICY.evaluate(exc, try_number=1, max_tries=4).action is RetryAction.FAIL
        wrapped = fail_terminal(_raising(exc), RETRY_RULES)
        if fails_at_once:
            with pytest.raises(AirflowFailException, match="^" + str(exc).replace("[", r"\[")) as failed:
                wrapped()
            assert failed.value.__cause__ is exc  # the package's own traceback stays in the task log
        else:
            with pytest.raises(type(exc)) as raised:
                wrapped()
            assert raised.value is exc  # retried as usual
    assert fail_terminal(lambda params=None: {"ok": 1}, RETRY_RULES)(params={}) == {"ok": 1}


def test_task_before_3_3_wraps_task_bodies_unless_they_opt_out(monkeypatch):
    """Without the retry policy `task` drops `retry_policy` (older operators refuse it) and wraps the body of every
    task that does not set it to None; the task keeps the function's id and context arguments."""
    from airflow.sdk import dag

    from eagle_datagen_airflow import compat
    from eagle_datagen_airflow.runs import RETRY_RULES

    monkeypatch.setattr(compat, "HAS_RETRY_POLICY", False)
    task = compat.task_with(RETRY_RULES)

    @dag(dag_id="compat_probe", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC))
    def probe() -> None:
        @task(retry_policy=None)
        def check(params=None) -> None:
            raise ConfigError("a server still loading")

        @task
        def plan(params=None) -> None:
            raise ConfigError("bad recipe")

        @task(multiple_outputs=True)
        def finish(params=None) -> dict:
            return {"ok": 1}

        check() >> plan() >> finish()

    built = probe()
    assert [t.task_id for t in built.topological_sort()] == ["check", "plan", "finish"]
    assert not hasattr(built.get_task("check").python_callable, "__wrapped__")
    assert built.get_task("plan").python_callable.__wrapped__.__name__ == "plan"
    assert built.get_task("finish").multiple_outputs is True
    with pytest.raises(compat.AirflowFailException, match="bad recipe"):
        built.get_task("plan").python_callable(params={})
    with pytest.raises(ConfigError, match="still loading"):
        built.get_task("check").python_callable(params={})


def test_on_3_3_task_is_airflows_own_and_the_dags_keep_the_policy():
    from airflow.sdk import task as sdk_task

    from eagle_datagen_airflow import compat, runs

    assert compat.HAS_RETRY_POLICY and runs.task is sdk_task
    assert runs.DEFAULT_ARGS["retry_policy"] is runs.RETRY_POLICY
    assert runs.DEFAULT_ARGS["retry_exponential_backoff"] == 2.0 and compat.exponential_backoff(1.5) == 1.5


def test_before_3_2_the_backoff_is_true_which_doubles(monkeypatch):
    from airflow.sdk.bases import operator

    from eagle_datagen_airflow import compat

    monkeypatch.setitem(operator.BASEOPERATOR_ARGS_EXPECTED_TYPES, "retry_exponential_backoff", bool)  # as 3.1's
    assert compat.exponential_backoff(2.0) is True
    with pytest.raises(ValueError, match="only by a multiplier of 2, not 1.5"):
        compat.exponential_backoff(1.5)
