"""The Airflow APIs the DAGs and plugins use, on every supported version (3.1 and later; docs/install.md).

Each name comes from where the newest Airflow has it, else from where older ones do: 3.2 moved the task exceptions
to airflow.sdk.exceptions, added airflow.sdk.configuration and made retry_exponential_backoff a multiplier (3.1 takes
only True: a multiplier of 2); 3.3 added the task retry policy. Without the policy,
`task_with(rules)` gives the same outcome by older means: a task whose body raises an exception that `rules` fail at
once raises AirflowFailException instead, which every Airflow 3 fails without retries. On 3.3 and later nothing here
changes what the DAGs do.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

try:
    from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException, AirflowRescheduleException
except ImportError:  # before 3.2
    from airflow.exceptions import AirflowFailException, AirflowNotFoundException, AirflowRescheduleException

try:
    from airflow.sdk import ExceptionRetryPolicy, RetryAction, RetryRule
except ImportError:  # before 3.3
    ExceptionRetryPolicy = RetryAction = RetryRule = None

__all__ = [
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowRescheduleException",
    "HAS_RETRY_POLICY",
    "airflow_conf",
    "exponential_backoff",
    "fail_terminal",
    "retry_policy",
    "task_with",
]

HAS_RETRY_POLICY = ExceptionRetryPolicy is not None

# One rule: the exception's dotted path, whether it retries (True) or fails at once (False), and why. The first
# rule that matches an exception (or a subclass of it) decides, as in ExceptionRetryPolicy; no match: the task's
# retries, as usual.
Rule = tuple[str, bool, str]


def airflow_conf() -> Any:
    """Airflow's configuration, as a task reads it."""
    try:
        from airflow.sdk.configuration import conf
    except ImportError:  # before 3.2
        from airflow.configuration import conf
    return conf


def exponential_backoff(multiplier: float) -> float | bool:
    """`multiplier` as the operators' retry_exponential_backoff. Airflow 3.1 takes only a bool, and True waits
    retry_delay * 2 ** (try - 1) (with the same jitter), as a multiplier of 2 does on 3.2 and later."""
    from airflow.sdk.bases.operator import BASEOPERATOR_ARGS_EXPECTED_TYPES

    accepted = BASEOPERATOR_ARGS_EXPECTED_TYPES.get("retry_exponential_backoff", float)
    if float in (accepted if isinstance(accepted, tuple) else (accepted,)):
        return multiplier
    if multiplier != 2.0:
        raise ValueError(f"Airflow before 3.2 backs off only by a multiplier of 2, not {multiplier}")
    return True


def retry_policy(rules: Sequence[Rule]) -> Any:
    """The rules as the DAGs' ExceptionRetryPolicy; None before Airflow 3.3 (task_with applies them there)."""
    if not HAS_RETRY_POLICY:
        return None
    return ExceptionRetryPolicy(
        rules=[
            RetryRule(exception=path, action=RetryAction.RETRY if retry else RetryAction.FAIL, reason=reason)
            for path, retry, reason in rules
        ]
    )


def _resolve(path: str) -> type[BaseException]:
    from importlib import import_module

    module, _, name = path.rpartition(".")
    return getattr(import_module(module), name)


def fail_terminal(function: Callable[..., Any], rules: Sequence[Rule]) -> Callable[..., Any]:
    """`function`, raising AirflowFailException (with the same message) for what `rules` fail at once."""

    @functools.wraps(function)  # the task's id, signature and context arguments stay the function's
    def body(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except Exception as exc:
            for path, retry, _reason in rules:
                if isinstance(exc, _resolve(path)):
                    if retry:
                        raise
                    raise AirflowFailException(str(exc)) from exc
            raise

    return body


def task_with(rules: Sequence[Rule]) -> Any:
    """`airflow.sdk.task`. Before Airflow 3.3 it puts each task's body under fail_terminal(rules), unless the task
    says `retry_policy=None` (as it does on 3.3 to opt out of the DAG's policy), and drops that argument, which
    those versions' operators refuse."""
    from airflow.sdk import task

    if HAS_RETRY_POLICY:
        return task

    def older_task(python_callable: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
        terminal = kwargs.pop("retry_policy", True) is not None

        def decorate(function: Callable[..., Any]) -> Any:
            return task(fail_terminal(function, rules) if terminal else function, **kwargs)

        return decorate(python_callable) if python_callable is not None else decorate

    return older_task
