"""An output root: a local directory or `s3://bucket/prefix`, addressed by relative keys.

Local writes go to a temporary name and are renamed into place, so a reader never sees half a file.
S3 writes carry a SHA256 checksum that the server verifies; S3 reads, writes and listings retry transient
errors (a store restarting, throttling, connection resets) for up to two minutes, so a run outlives them.
Keys are checked before use: a key built from a tampered plan or manifest (`../`, an absolute path) must
not reach outside the root. `list_modified` gives each key's modification time as the store recorded it
(S3 `LastModified`, a local file's mtime): times that different workers compare without trusting each
other's clocks. `read_range` reads part of an object, for readers that need only some of it (the catalog: a
Parquet file's footer and one column, `catalog.read_stored_column`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from botocore.exceptions import ClientError

from eagle_datagen.errors import ConfigError, DataGenError
from eagle_datagen.objectstore.s3 import S3Uri, describe_error, is_s3_uri, read_object, retry_transient, s3_client


class OutputRoot(Protocol):
    uri: str

    def write_bytes(self, key: str, data: bytes) -> str: ...

    def read_bytes(self, key: str) -> bytes:
        """The object's bytes; FileNotFoundError when there is none at `key`."""
        ...

    def read_range(self, key: str, start: int, length: int) -> bytes:
        """`length` bytes of `key` from byte `start` (fewer at its end)."""
        ...

    def list(self, prefix: str = "") -> list[str]: ...

    def list_modified(self, prefix: str = "") -> dict[str, float]:
        """key -> modification time (seconds since the epoch, by the store's clock) of every key under prefix."""
        ...

    def delete(self, key: str) -> None:
        """Remove `key` if it is there. Only for a run's own bookkeeping (a withdrawn claim): committed
        objects are never deleted, and a shared object is removed with `objects.delete_if_unchanged`."""
        ...

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
def staged_file(target: Path, data: bytes | Iterable[bytes]) -> Iterator[str]:
    """`data` (bytes, or parts of them) written and synced to a hidden temporary file beside `target`, removed
    when the block ends (after the caller has renamed or linked it into place)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            for part in [data] if isinstance(data, bytes | bytearray | memoryview) else data:
                handle.write(part)
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

    def read_range(self, key: str, start: int, length: int) -> bytes:
        with self._path(key).open("rb") as handle:
            handle.seek(start)
            return handle.read(length)

    def _files(self, prefix: str) -> Iterator[tuple[str, Path]]:
        folder = self.path / check_prefix(prefix).rpartition("/")[0]  # walk only the folder the prefix is in
        if not folder.is_dir():
            return
        for path in folder.rglob("*"):
            key = path.relative_to(self.path).as_posix()
            if key.startswith(prefix) and not path.name.startswith(".") and path.is_file():
                yield key, path

    def list(self, prefix: str = "") -> list[str]:
        return sorted(key for key, _ in self._files(prefix))

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def list_modified(self, prefix: str = "") -> dict[str, float]:
        found = {}
        for key, path in self._files(prefix):
            try:
                found[key] = path.stat().st_mtime
            except FileNotFoundError:  # deleted since the listing (a released lock)
                continue
        return dict(sorted(found.items()))


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
        try:
            return read_object(bucket, full_key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchKey":  # as a local root says it
                raise FileNotFoundError(f"{self.location(key)} does not exist") from None
            raise

    def read_range(self, key: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""  # S3 has no empty range
        bucket, full_key = self.bucket_key(key)
        byte_range = f"bytes={start}-{start + length - 1}"
        return retry_transient(
            f"read {self.location(key)}",
            lambda: s3_client().get_object(Bucket=bucket, Key=full_key, Range=byte_range)["Body"].read(),
        )

    def list(self, prefix: str = "") -> list[str]:
        return list(self.list_modified(prefix))  # the same one listing; the times cost nothing extra

    def delete(self, key: str) -> None:
        bucket, full_key = self.bucket_key(key)
        try:  # S3 answers a delete of a missing key with success
            retry_transient(
                f"delete {self.location(key)}", lambda: s3_client().delete_object(Bucket=bucket, Key=full_key)
            )
        except DataGenError:
            raise
        except Exception as exc:
            raise DataGenError(f"cannot delete {self.location(key)}: {describe_error(exc)}") from None

    def list_modified(self, prefix: str = "") -> dict[str, float]:
        start = len(self._base.key)
        full_prefix = self._base.key + check_prefix(prefix)  # location() would refuse a prefix ending in '/'

        def listing() -> dict[str, float]:
            pages = s3_client().get_paginator("list_objects_v2").paginate(Bucket=self._base.bucket, Prefix=full_prefix)
            items = (item for page in pages for item in page.get("Contents", []))
            return {item["Key"][start:]: item["LastModified"].timestamp() for item in items}

        where = f"s3://{self._base.bucket}/{full_prefix}"
        return dict(sorted(retry_transient(f"list {where}", listing).items()))


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
