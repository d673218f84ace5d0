"""boto3 clients and `s3://` URIs.

Endpoint and credentials come from the standard AWS environment (`AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, ...), never from flags or params, so they stay out of logs and manifests.
"""

from __future__ import annotations

import fnmatch
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from eagle_datagen.errors import DataGenError

log = logging.getLogger(__name__)
T = TypeVar("T")
GLOB_CHARS = "*?["
CREDENTIAL_ERRORS = {"403", "AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "InvalidToken"}
# Errors that another attempt can cure; everything else (403, NoSuchBucket, ...) is for the user to fix.
TRANSIENT_CODES = {
    "BadDigest",
    "XAmzContentChecksumMismatch",
    "InvalidDigest",
    "RequestTimeout",
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "InternalError",
    "ServiceUnavailable",
    "503",
    "500",
    "502",
    "504",
}
# How long the store may keep failing (a restart, a failover, throttling) before the operation gives up.
# boto3's own retries give up after a few seconds of connection refused, which a store restart outlasts.
STORE_GIVE_UP_S = 120.0
# A store that has never answered this process is more likely a wrong AWS_ENDPOINT_URL than a restart.
FIRST_CONTACT_GIVE_UP_S = 5.0
MAX_STORE_DELAY_S = 5.0
_store_answered = threading.Event()  # set by the first answer of the store, whatever it said


@dataclass(frozen=True)
class S3Uri:
    bucket: str
    key: str

    @classmethod
    def parse(cls, uri: str) -> S3Uri:
        if not uri.startswith("s3://"):
            raise ValueError(f"not an s3:// URI: {uri}")
        bucket, _, key = uri[len("s3://") :].partition("/")
        if not bucket:
            raise ValueError(f"s3 URI without a bucket: {uri}")
        return cls(bucket, key)

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def is_s3_uri(value: str) -> bool:
    return value.startswith("s3://")


@cache
def s3_client() -> Any:
    """One client per process (clients are thread-safe and costly to create). boto3 retries a blip itself
    (standard mode, 3 attempts); longer trouble, such as a store restarting, is `retry_transient`'s."""
    config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=10, read_timeout=120)
    return boto3.session.Session().client("s3", config=config)


def describe_error(exc: Exception) -> str:
    """One line for a boto error: the S3 error code when there is one, else the exception's text."""
    if isinstance(exc, DataGenError):  # already one line (a store that stayed unreachable)
        return str(exc)
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        text = f"{error.get('Code', 'error')}: {error.get('Message', '')}".strip(": ")
        if error.get("Code") in CREDENTIAL_ERRORS:
            text += " (check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
        return text
    if isinstance(exc, BotoCoreError):
        return str(exc).splitlines()[0]
    return f"{type(exc).__name__}: {exc}"


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return error.get("Code") in TRANSIENT_CODES or status >= 500
    return isinstance(exc, BotoCoreError | ConnectionError)


def retry_transient(what: str, call: Callable[[], T], give_up_after_s: float | None = None) -> T:
    """`call()`, retrying transient store errors with backoff and full jitter until they have gone on for
    `give_up_after_s` (then a DataGenError: "cannot {what}: ..."). Other errors propagate unchanged.

    By default a store gets STORE_GIVE_UP_S to come back, but only FIRST_CONTACT_GIVE_UP_S while it has
    never answered this process at all: an endpoint that is wrong fails in seconds, not minutes."""
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            result = call()
            _store_answered.set()
            return result
        except DataGenError:
            raise
        except Exception as exc:
            if isinstance(exc, ClientError):
                _store_answered.set()  # an error answer is an answer: the store is there
            if not is_transient(exc):
                raise
            attempt += 1
            waited = time.monotonic() - started
            limit = give_up_after_s
            if limit is None:
                limit = STORE_GIVE_UP_S if _store_answered.is_set() else FIRST_CONTACT_GIVE_UP_S
            if waited >= limit:
                raise DataGenError(
                    f"cannot {what}: {describe_error(exc)} (still failing after {waited:.0f}s and {attempt} attempts)"
                ) from None
            delay = random.uniform(0, min(MAX_STORE_DELAY_S, 0.25 * 2**attempt))
            log.warning("cannot %s yet (%s); retry %d in %.1fs", what, describe_error(exc), attempt, delay)
            time.sleep(delay)


def list_keys(bucket: str, prefix: str) -> Iterator[str]:
    paginator = s3_client().get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            yield item["Key"]


def match_keys(uri: S3Uri) -> list[str]:
    """Keys named by a URI: a glob (`s3://b/p/*.jsonl`), an exact key, or everything under a prefix."""
    key = uri.key
    glob_at = min((key.index(c) for c in GLOB_CHARS if c in key), default=-1)
    if glob_at >= 0:
        listed = retry_transient(f"list {uri}", lambda: list(list_keys(uri.bucket, key[:glob_at])))
        return sorted(k for k in listed if fnmatch.fnmatchcase(k, key))
    keys = retry_transient(f"list {uri}", lambda: sorted(list_keys(uri.bucket, key)))
    if key in keys:
        return [key]
    folder = key if key.endswith("/") or not key else key + "/"
    return [k for k in keys if k.startswith(folder)]


def read_object(bucket: str, key: str) -> bytes:
    return retry_transient(
        f"read s3://{bucket}/{key}", lambda: s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()
    )
