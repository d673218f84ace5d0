"""Transient store errors are retried until they stop or have gone on too long; other errors are not."""

from __future__ import annotations

import threading

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from eagle_datagen.errors import DataGenError
from eagle_datagen.objectstore import s3


def client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op")


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    slept = []
    monkeypatch.setattr(s3.time, "sleep", slept.append)
    monkeypatch.setattr(s3, "_store_answered", threading.Event())  # a process that has not met the store yet
    return slept


def refused() -> None:
    raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")


@pytest.mark.parametrize(
    "error",
    [
        EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),  # a store restarting: connection refused
        client_error("SlowDown", 503),
        client_error("InternalError", 500),
        client_error("BadDigest", 400),  # bytes damaged on the way: the store checked the checksum
    ],
)
def test_transient_errors_are_retried_until_the_call_succeeds(error, no_waiting):
    calls = []

    def flaky() -> int:
        calls.append(1)
        if len(calls) < 4:
            raise error
        return 42

    assert s3.retry_transient("read s3://b/k", flaky) == 42
    assert len(calls) == 4 and len(no_waiting) == 3
    assert all(0 <= delay <= s3.MAX_STORE_DELAY_S for delay in no_waiting)


@pytest.mark.parametrize("error", [client_error("AccessDenied", 403), client_error("NoSuchKey", 404)])
def test_other_errors_propagate_unchanged_at_once(error, no_waiting):
    calls = []

    def refused() -> None:
        calls.append(1)
        raise error

    with pytest.raises(ClientError) as info:
        s3.retry_transient("read s3://b/k", refused)
    assert info.value is error and len(calls) == 1 and not no_waiting


def test_a_store_that_stays_down_ends_in_one_line(monkeypatch):
    clock = iter(range(0, 10_000, 7))  # each look at the clock: 7 s later
    monkeypatch.setattr(s3.time, "monotonic", lambda: next(clock))
    with pytest.raises(DataGenError) as info:
        s3.retry_transient("write s3://b/checkpoints/c.jsonl", refused, give_up_after_s=60)
    message = str(info.value)
    assert message.startswith("cannot write s3://b/checkpoints/c.jsonl: Could not connect to the endpoint URL")
    assert "still failing after 63s and 9 attempts" in message and "\n" not in message


def test_a_store_that_never_answered_fails_in_seconds_one_that_did_gets_minutes(monkeypatch):
    clock = iter(range(0, 100_000))  # each look at the clock: 1 s later
    monkeypatch.setattr(s3.time, "monotonic", lambda: next(clock))
    with pytest.raises(DataGenError, match=r"still failing after [5-6]s"):  # a wrong AWS_ENDPOINT_URL
        s3.retry_transient("list s3://b/p/", refused)
    assert s3.retry_transient("list s3://b/p/", lambda: ["k"]) == ["k"]  # the store answers: it is there
    with pytest.raises(DataGenError, match=r"still failing after 12[0-1]s"):  # now a restart is waited out
        s3.retry_transient("list s3://b/p/", refused)
