"""The machine's own PostgreSQL and Redis as a Celery deployment's metadata DB and broker, borrowed for a run.

A test or benchmark gets a database of its own on a shared server and gives it back afterwards:

    with postgres_database() as db_url, redis_database() as broker_url:
        LocalStack(StackOptions(..., executor="CeleryExecutor", database_url=db_url, broker_url=broker_url))

`postgres_database` creates a uniquely named database (trust auth, user postgres by default) and drops it
on the way out, closing whatever connections are left. `redis_database` claims an empty numbered Redis
database (a marker key set only if absent, so two runs at once never share one), and empties it on the way
out. Only these two talk to the servers; Airflow and Celery get plain URLs.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

POSTGRES = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}
REDIS = {"host": "127.0.0.1", "port": 6379}
REDIS_DATABASES = range(15, 0, -1)  # a default Redis has 16; 0 is the one everybody else uses
CLAIM_KEY = "eagle-datagen:claimed-by"


class ServiceUnavailable(RuntimeError):
    """PostgreSQL or Redis is not there (or refuses us): says which and how to start it."""


def _admin_connection(host: str, port: int, user: str):  # noqa: ANN202 - psycopg2 has no public types
    import psycopg2

    try:
        conn = psycopg2.connect(host=host, port=port, user=user, dbname="postgres", connect_timeout=10)
    except psycopg2.OperationalError as exc:
        raise ServiceUnavailable(
            f"PostgreSQL at {host}:{port} (user {user}) refused the connection: {str(exc).strip()}; "
            "start it (pg_ctlcluster <version> main start) or pass another server"
        ) from None
    conn.autocommit = True  # CREATE/DROP DATABASE cannot run inside a transaction
    return conn


@contextmanager
def postgres_database(prefix: str = "eagle_datagen", **server: object) -> Iterator[str]:
    """A new database on the PostgreSQL server; yields its SQLAlchemy URL (psycopg2), drops it afterwards."""
    host, port, user = (server.get(k, POSTGRES[k]) for k in ("host", "port", "user"))
    name = f"{prefix}_{secrets.token_hex(4)}"
    conn = _admin_connection(str(host), int(port), str(user))  # type: ignore[arg-type]
    try:
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        try:
            yield f"postgresql+psycopg2://{user}@{host}:{port}/{name}"
        finally:
            with conn.cursor() as cur:  # WITH (FORCE) ends the connections a killed component left open
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        conn.close()


@contextmanager
def redis_database(host: str = REDIS["host"], port: int = REDIS["port"]) -> Iterator[str]:  # type: ignore[assignment]
    """An empty numbered Redis database, claimed for the duration; yields its URL, empties it afterwards."""
    import redis

    token = secrets.token_hex(8)
    for number in REDIS_DATABASES:
        client = redis.Redis(host=host, port=port, db=number, socket_timeout=10)
        try:
            empty = client.dbsize() == 0
        except redis.ConnectionError as exc:
            raise ServiceUnavailable(
                f"Redis at {host}:{port} refused the connection: {exc}; start it (redis-server --daemonize yes)"
            ) from None
        except redis.ResponseError:  # fewer databases configured than we try
            continue
        if empty and client.set(CLAIM_KEY, token, nx=True):
            try:
                yield f"redis://{host}:{port}/{number}"
            finally:
                client.flushdb()
                client.close()
            return
        client.close()
    raise ServiceUnavailable(f"Redis at {host}:{port} has no empty database among {list(REDIS_DATABASES)} to claim")
