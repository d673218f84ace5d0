"""boto3 clients and `s3://` URIs.

Endpoint and credentials come from the standard AWS environment (`AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, ...), never from flags or params, so they stay out of logs and manifests.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

GLOB_CHARS = "*?["
CREDENTIAL_ERRORS = {"403", "AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "InvalidToken"}


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
    """One client per process (clients are thread-safe and costly to create); standard retry mode."""
    config = Config(retries={"max_attempts": 8, "mode": "standard"}, connect_timeout=10, read_timeout=120)
    return boto3.session.Session().client("s3", config=config)


def describe_error(exc: Exception) -> str:
    """One line for a boto error: the S3 error code when there is one, else the exception's text."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        text = f"{error.get('Code', 'error')}: {error.get('Message', '')}".strip(": ")
        if error.get("Code") in CREDENTIAL_ERRORS:
            text += " (check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
        return text
    if isinstance(exc, BotoCoreError):
        return str(exc).splitlines()[0]
    return f"{type(exc).__name__}: {exc}"


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
        return sorted(k for k in list_keys(uri.bucket, key[:glob_at]) if fnmatch.fnmatchcase(k, key))
    keys = sorted(list_keys(uri.bucket, key))
    if key in keys:
        return [key]
    folder = key if key.endswith("/") or not key else key + "/"
    return [k for k in keys if k.startswith(folder)]


def read_object(bucket: str, key: str) -> bytes:
    return s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()
