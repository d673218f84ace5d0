"""Helpers for the secrets tests: credentials no one could find by chance, and a scan of what a run stored."""

from __future__ import annotations

import io
import json
import secrets
from pathlib import Path

import pyarrow.parquet as pq


def random_credentials() -> dict[str, str]:
    """An access key id and secret shaped like AWS's, unique to this test run (so a hit is never a coincidence)."""
    return {
        "access_key": "AKIA" + secrets.token_hex(8).upper(),
        "secret_key": secrets.token_urlsafe(30),
    }


def readable(key: str, data: bytes) -> bytes:
    """The bytes to search: Parquet pages are compressed, so their rows are decoded to JSON first."""
    if key.endswith(".parquet"):
        rows = pq.read_table(io.BytesIO(data)).to_pylist()
        return data + json.dumps(rows, default=str).encode()
    return data


def stored_objects(client, bucket: str) -> dict[str, bytes]:
    """Every object in the bucket, by key."""
    found = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            found[item["Key"]] = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
    return found


def leaks(secret_values: list[str], texts: dict[str, bytes]) -> list[str]:
    """'where: which secret' for every secret value found in any of the texts."""
    hits = []
    for where, data in texts.items():
        searchable = readable(where, data)
        for value in secret_values:
            if value.encode() in searchable:
                hits.append(f"{where}: {value[:6]}...")
    return hits


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
