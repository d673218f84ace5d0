"""Connections, read inside tasks (never at parse time): the SGLang deployment and the object store.

SGLang: an Airflow connection (conn type `http` or `generic`) whose host and port (and schema, `http` or
`https`) name one endpoint, or whose extra `{"urls": ["http://a:30000", ...]}` names several replicas.
The extra also says what the deployment serves: `tokenizer` (a directory or hub id of the target
model's tokenizer; `standin:kimi-k2.5` for the stand-in; else EAGLE_DATAGEN_TOKENIZER on the workers), and
optionally `profile`, `model`, `trust_remote_code` (else EAGLE_DATAGEN_TRUST_REMOTE_CODE on the workers: it goes
with the tokenizer), `tiktoken_fast_path` (true: opt in to encoding prompts through the tokenizer's
tiktoken.Encoding instead of its own call, recorded in the manifest), `concurrency`, `replicas_behind_url`
(replicas behind a router or proxy that does not list its workers: inference/fleet.py) and `balance`
(`prefix-affinity`, the default, or `least-outstanding`: how requests spread over several replica URLs;
docs/internals/prefix_cache.md) and `lost_after` (seconds a server may count fewer requests than the run has there
before they are called lost: inference/liveness.py) and `drain_hedge` (false: no copies of a run's slowest last
requests on replicas that fell idle) and `allow_unchecked_tokenizer` (true: use an endpoint whose
/v1/tokenize cannot be asked, recorded unchecked in the manifest: inference/tokenizer_agreement.py) and `ca_bundle`
(a PEM file of CA certificates on the workers that checks https:// endpoints; else the system's). The connection's
password is the deployment's API key (SGLang's --api-key, or a router's client key): `sglang_key` hands it to the
package as $EAGLE_DATAGEN_API_KEY for the duration of a task, masked in task logs, never in params or XComs. For
example

    AIRFLOW_CONN_SGLANG_DEFAULT='{"conn_type": "http", "host": "sglang", "port": 30000,
                                  "extra": {"tokenizer": "/models/Kimi-K2.5", "trust_remote_code": true}}'

Object store: the Amazon provider's AWS connection (`aws_default`; `endpoint_url` in its extra for
S3-compatible stores such as SeaweedFS or MinIO). Its credentials are handed to the package through the
standard AWS environment variables for the duration of a task, and restored afterwards; they never
appear in params, XComs or logs. Without the connection, the worker's own AWS environment is used.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException
from airflow.sdk.log import mask_secret

from eagle_datagen import settings
from eagle_datagen.errors import ConfigError

log = logging.getLogger(__name__)

EXTRA_KEYS = {
    "urls",
    "tokenizer",
    "profile",
    "model",
    "trust_remote_code",
    "tiktoken_fast_path",
    "concurrency",
    "replicas_behind_url",
    "balance",
    "lost_after",
    "drain_hedge",
    "allow_unchecked_tokenizer",
    "ca_bundle",
}
AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL")
REGION_VARIABLE = "AWS_DEFAULT_REGION"


@dataclass(frozen=True)
class Deployment:
    """What a run needs to know about the SGLang deployment (no credentials)."""

    urls: list[str]
    tokenizer: str
    profile: str = settings.default_of("profile")
    model: str | None = None
    trust_remote_code: bool = False
    tiktoken_fast_path: bool = settings.default_of("tiktoken_fast_path")
    concurrency: int | None = None
    replicas_behind_url: int | None = None  # None: the router's GET /workers, else one server
    balance: str = settings.default_of("balance")
    lost_after: float | None = None  # None: settings.LOST_AFTER_S
    drain_hedge: bool = settings.default_of("drain_hedge")
    allow_unchecked_tokenizer: bool = settings.default_of("allow_unchecked_tokenizer")
    ca_bundle: str | None = None  # None: the system's CA certificates


def sglang_deployment(conn_id: str) -> Deployment:
    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise ConfigError(
            f"no Airflow connection {conn_id!r}: create it (conn type http, host and port of SGLang, extra "
            '{"tokenizer": ...}) or pick another in the sglang_conn_id param'
        ) from None
    extra: dict[str, Any] = conn.extra_dejson
    unknown = sorted(set(extra) - EXTRA_KEYS)
    if unknown:
        raise ConfigError(f"connection {conn_id!r} has unknown extra key(s) {unknown}; known: {sorted(EXTRA_KEYS)}")
    urls = extra.get("urls") or [_endpoint_url(conn_id, conn.host, conn.port, conn.schema)]
    if isinstance(urls, str):  # from a connection URI's query string: comma-separated
        urls = [u.strip() for u in urls.split(",") if u.strip()]
    tokenizer = extra.get("tokenizer") or os.environ.get("EAGLE_DATAGEN_TOKENIZER")
    if not tokenizer:
        raise ConfigError(
            f"connection {conn_id!r} names no tokenizer: set its extra 'tokenizer' to the served model's "
            "tokenizer (a directory or hub id), or EAGLE_DATAGEN_TOKENIZER on the workers"
        )
    return Deployment(
        urls=[str(u).rstrip("/") for u in urls],
        tokenizer=str(tokenizer),
        profile=str(extra.get("profile") or settings.default_of("profile")),
        model=extra.get("model"),
        # beside the tokenizer, wherever it is set: the extra, else the workers' environment
        trust_remote_code=_flag(
            extra.get("trust_remote_code", os.environ.get("EAGLE_DATAGEN_TRUST_REMOTE_CODE", False))
        ),
        tiktoken_fast_path=_flag(extra.get("tiktoken_fast_path", settings.default_of("tiktoken_fast_path"))),
        concurrency=int(extra["concurrency"]) if extra.get("concurrency") else None,
        replicas_behind_url=int(extra["replicas_behind_url"]) if extra.get("replicas_behind_url") else None,
        balance=str(extra.get("balance") or settings.default_of("balance")),
        lost_after=_seconds(conn_id, "lost_after", extra.get("lost_after")),
        drain_hedge=_flag(extra.get("drain_hedge", settings.default_of("drain_hedge"))),
        allow_unchecked_tokenizer=_flag(
            extra.get("allow_unchecked_tokenizer", settings.default_of("allow_unchecked_tokenizer"))
        ),
        ca_bundle=str(extra["ca_bundle"]) if extra.get("ca_bundle") else None,
    )


def _seconds(conn_id: str, key: str, value: Any) -> float | None:
    if value is None or value == "":
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = 0.0
    if not seconds > 0 or seconds == float("inf"):
        raise ConfigError(f"connection {conn_id!r}: extra {key!r} is {value!r}, not a positive number of seconds")
    return seconds


def _endpoint_url(conn_id: str, host: str | None, port: int | None, schema: str | None) -> str:
    if not host:
        raise ConfigError(f"connection {conn_id!r} has neither a host nor extra 'urls': set one")
    if "://" in host:  # a host given with its scheme, as HttpHook also accepts
        base = host.rstrip("/")
    else:
        base = f"{schema if schema in ('http', 'https') else 'http'}://{host}"
    return f"{base}:{port}" if port else base


def _flag(value: Any) -> bool:
    return value is True or str(value).lower() in ("true", "1", "yes")


def _aws_environment(aws_conn_id: str) -> dict[str, str] | None:
    """The AWS variables from the connection, or None when there is no such connection."""
    try:
        BaseHook.get_connection(aws_conn_id)
    except AirflowNotFoundException:
        return None
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    hook = AwsBaseHook(aws_conn_id=aws_conn_id, client_type="s3")
    credentials = hook.get_credentials()
    for value in (credentials.access_key, credentials.secret_key, credentials.token):
        if value:  # the key id too: botocore's debug lines carry it in every request's Authorization header
            mask_secret(value)
    values = {
        "AWS_ACCESS_KEY_ID": credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": credentials.secret_key,
        "AWS_SESSION_TOKEN": credentials.token,
        "AWS_ENDPOINT_URL": hook.conn_config.get_service_endpoint_url("s3"),
        REGION_VARIABLE: hook.conn_config.region_name,
    }
    return {k: v for k, v in values.items() if v}


@contextmanager
def sglang_key(conn_id: str | None) -> Iterator[None]:
    """The SGLang connection's password, as $EAGLE_DATAGEN_API_KEY, while the block runs (inference/access.py reads
    it there), masked in the task's log. No password (or no connection): the workers' own variable, if any, is
    left as it is."""
    from eagle_datagen.inference.access import API_KEY_VARIABLE

    try:
        password = BaseHook.get_connection(conn_id).password if conn_id else None
    except AirflowNotFoundException:
        password = None  # sglang_deployment has already said what is missing
    if not password:
        yield
        return
    mask_secret(password)
    saved = os.environ.get(API_KEY_VARIABLE)
    os.environ[API_KEY_VARIABLE] = password
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(API_KEY_VARIABLE, None)
        else:
            os.environ[API_KEY_VARIABLE] = saved


@contextmanager
def object_store(aws_conn_id: str) -> Iterator[None]:
    """Point the package's boto3 client at the connection's object store while the block runs."""
    from eagle_datagen.objectstore.s3 import s3_client

    env = _aws_environment(aws_conn_id)
    if env is None:
        log.info("no Airflow connection %r: the object store is configured by the AWS environment", aws_conn_id)
        yield
        return
    log.info("object store from connection %r (endpoint %s)", aws_conn_id, env.get("AWS_ENDPOINT_URL", "AWS"))
    saved = {k: os.environ.get(k) for k in (*AWS_VARIABLES, REGION_VARIABLE)}
    for key in AWS_VARIABLES:  # the connection replaces the environment's credentials, it does not mix with them
        os.environ.pop(key, None)
    os.environ.update(env)
    s3_client.cache_clear()
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        s3_client.cache_clear()
