"""An output root: a local directory or `s3://bucket/prefix`, addressed by relative keys.

Local writes go to a temporary name and are renamed into place, so a reader never sees half a file.
S3 writes carry a SHA256 checksum that the server verifies; S3 reads, writes and listings retry transient
errors (a store restarting, throttling, connection resets) for up to two minutes, so a run outlives them.
Keys are checked before use: a key built from a tampered plan or manifest (`../`, an absolute path) must
not reach outside the root.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from eagle_datagen.errors import ConfigError, DataGenError
from eagle_datagen.objectstore.s3 import S3Uri, describe_error, is_s3_uri, list_keys, retry_transient, s3_client


class OutputRoot(Protocol):
    uri: str

    def write_bytes(self, key: str, data: bytes) -> str: ...

    def read_bytes(self, key: str) -> bytes: ...

    def list(self, prefix: str = "") -> list[str]: ...

    def location(self, key: str) -> str: ...


class UnsafeKey(DataGenError):
    """A key that would address something outside the output root."""


def check_key(key: str) -> str:
    """`key` when it is a plain relative path inside the root: no absolute path, no '.' or '..' or empty
    segment, no backslash or NUL."""
    parts = key.split("/")
    if not key or "\\" in key or "\x00" in key or any(part in ("", ".", "..") for part in parts):
        raise UnsafeKey(
            f"refusing storage key {key!r}: keys stay inside the output root (relative, no '.', '..' or empty "
            "segments, no backslash or NUL); was a plan or manifest edited by hand?"
        )
    return key


def check_prefix(prefix: str) -> str:
    """A listing prefix: empty, or a key (a trailing '/' allowed, and a partial last segment)."""
    if prefix:
        check_key(prefix.removesuffix("/"))
    return prefix


@contextmanager
def staged_file(target: Path, data: bytes) -> Iterator[str]:
    """`data` written and synced to a hidden temporary file beside `target`, removed when the block ends
    (after the caller has renamed or linked it into place)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        yield tmp
    finally:
        Path(tmp).unlink(missing_ok=True)


@dataclass
class LocalOutputRoot:
    uri: str

    @property
    def path(self) -> Path:
        return Path(self.uri)

    def _path(self, key: str) -> Path:
        return self.path / check_key(key)

    def location(self, key: str) -> str:
        return str(self._path(key))

    def write_bytes(self, key: str, data: bytes) -> str:
        target = self._path(key)
        with staged_file(target, data) as tmp:
            os.replace(tmp, target)
        return str(target)

    def read_bytes(self, key: str) -> bytes:
        return self._path(key).read_bytes()

    def list(self, prefix: str = "") -> list[str]:
        if not self.path.exists():
            return []
        keys = (p.relative_to(self.path).as_posix() for p in self.path.rglob("*") if p.is_file())
        return sorted(k for k in keys if k.startswith(prefix) and not Path(k).name.startswith("."))


@dataclass
class S3OutputRoot:
    uri: str

    @property
    def _base(self) -> S3Uri:
        return S3Uri.parse(self.uri.rstrip("/") + "/")

    def _key(self, key: str) -> str:
        return self._base.key + check_key(key)

    def location(self, key: str) -> str:
        return f"s3://{self._base.bucket}/{self._key(key)}"

    def bucket_key(self, key: str) -> tuple[str, str]:
        return self._base.bucket, self._key(key)

    def write_bytes(self, key: str, data: bytes) -> str:
        bucket, full_key = self.bucket_key(key)  # an unsafe key is refused before any request
        try:
            retry_transient(
                f"write {self.location(key)}",
                lambda: s3_client().put_object(Bucket=bucket, Key=full_key, Body=data, ChecksumAlgorithm="SHA256"),
            )
        except DataGenError:
            raise
        except Exception as exc:
            raise DataGenError(f"cannot write {self.location(key)}: {describe_error(exc)}") from None
        return self.location(key)

    def read_bytes(self, key: str) -> bytes:
        bucket, full_key = self.bucket_key(key)
        return retry_transient(
            f"read {self.location(key)}", lambda: s3_client().get_object(Bucket=bucket, Key=full_key)["Body"].read()
        )

    def list(self, prefix: str = "") -> list[str]:
        start = len(self._base.key)
        full_prefix = self._base.key + check_prefix(prefix)  # location() would refuse a prefix ending in '/'
        where = f"s3://{self._base.bucket}/{full_prefix}"
        keys = retry_transient(f"list {where}", lambda: sorted(list_keys(self._base.bucket, full_prefix)))
        return [k[start:] for k in keys]


def open_output_root(uri: str) -> OutputRoot:
    if not uri or "\x00" in uri:
        raise ConfigError(f"bad output root {uri!r}: give a local folder or s3://bucket/prefix")
    if not is_s3_uri(uri):
        return LocalOutputRoot(uri)
    try:
        base = S3Uri.parse(uri.rstrip("/") + "/")
        if base.key:
            check_key(base.key.rstrip("/"))
    except (ValueError, UnsafeKey):
        raise ConfigError(
            f"bad output root {uri!r}: give s3://bucket/prefix (a bucket, then a prefix without '.', '..' or "
            "empty segments)"
        ) from None
    return S3OutputRoot(uri)
