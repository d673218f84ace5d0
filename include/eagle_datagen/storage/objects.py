"""Write once, verify, never overwrite: how every output file of a run is committed.

`put_once(root, key, data)` stores `data` at `key` unless an object is already committed there
(`put_file_once(root, key, path)` the same for a local file, read a part at a time):
- the same bytes already there (a rerun) is a no-op;
- other bytes there is an `ObjectCollision`: a committed object is never overwritten.
On S3 the upload carries SHA256 checksums that the server verifies (multipart above `PART_SIZE`, one
checksum per part), `IfNoneMatch="*"` makes the commit conditional, and the stored object's size and
checksum are read back before the call returns. Transient errors (throttling, 5xx, connection resets,
a server restarting) are retried with backoff for up to two minutes (`retry_transient`); a request whose
answer was lost after the store committed it finds the object there on the next attempt (a 412, then the
same checksum). On a local folder the file is linked into place, which fails instead of replacing an
existing file.

`delete_if_unchanged(root, key, expected)` is the matching delete, for the few short-lived objects (the
plan lock) that are removed again: it deletes `key` only while it still holds `expected`, so a writer
never removes an object that someone else has put there since it looked.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from eagle_datagen import settings
from eagle_datagen.errors import DataGenError
from eagle_datagen.objectstore.s3 import describe_error, retry_transient, s3_client
from eagle_datagen.storage.output_root import LocalOutputRoot, OutputRoot, S3OutputRoot, staged_file

log = logging.getLogger(__name__)
PART_SIZE = 16 * 1024 * 1024


class ObjectCollision(DataGenError):
    """Another object is already committed at a key this run wants to write. The message names no front end's
    setting: a caller that knows how its user writes elsewhere adds it (`for_run`)."""

    def for_run(self, front_end: str) -> ObjectCollision:
        """The collision with the way out of a run's user: a new run id, as the running front end says it."""
        return ObjectCollision(f"{self}, or {settings.new_run_hint(front_end)}")


@dataclass(frozen=True)
class StoredObject:
    key: str
    sha256: str  # hex digest of the whole object
    size: int

    def to_json(self) -> dict[str, object]:
        return {"key": self.key, "sha256": self.sha256, "size": self.size}


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


def expected_s3_checksum(data: bytes, part_size: int | None = None) -> str:
    """What S3 reports as ChecksumSHA256: the object's digest, or for multipart the digest of the parts'
    digests with the part count appended."""
    part_size = part_size or PART_SIZE
    if len(data) <= part_size:
        return _b64(hashlib.sha256(data).digest())
    parts = [hashlib.sha256(data[i : i + part_size]).digest() for i in range(0, len(data), part_size)]
    return f"{_b64(hashlib.sha256(b''.join(parts)).digest())}-{len(parts)}"


def _is_precondition_failed(exc: Exception) -> bool:
    if not isinstance(exc, ClientError):
        return False
    code = exc.response.get("Error", {}).get("Code")
    return code in ("PreconditionFailed", "ConditionalRequestConflict", "412")


def _existing_s3(bucket: str, key: str) -> tuple[int, str | None] | None:
    try:
        head = s3_client().head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    except ClientError as exc:
        if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
            return None
        raise
    return head["ContentLength"], head.get("ChecksumSHA256")


class _Payload:
    """What is committed: bytes in memory, or a local file read a part at a time (a shard of any size)."""

    def __init__(self, data: bytes | None = None, path: Path | None = None) -> None:
        self.data, self.path = data, path
        self.size = len(data) if data is not None else Path(path).stat().st_size  # type: ignore[arg-type]
        self._digests: dict[int, tuple[str, str]] = {}

    def parts(self, part_size: int) -> Iterator[bytes]:
        if self.data is not None:
            for start in range(0, max(self.size, 1), part_size):
                yield self.data[start : start + part_size]
            return
        with Path(self.path).open("rb") as handle:  # type: ignore[arg-type]
            while chunk := handle.read(part_size):
                yield chunk
            if not self.size:
                yield b""

    def digests(self, part_size: int) -> tuple[str, str]:
        """(hex sha256 of the whole, the S3 checksum of an upload in parts of `part_size`), in one read."""
        if part_size not in self._digests:
            whole, parts = hashlib.sha256(), []
            for chunk in self.parts(part_size):
                whole.update(chunk)
                parts.append(hashlib.sha256(chunk).digest())
            if len(parts) <= 1:
                checksum = _b64(whole.digest())
            else:
                checksum = f"{_b64(hashlib.sha256(b''.join(parts)).digest())}-{len(parts)}"
            self._digests[part_size] = (whole.hexdigest(), checksum)
        return self._digests[part_size]

    @property
    def sha256(self) -> str:
        return self.digests(PART_SIZE)[0]

    def s3_checksums(self) -> set[str]:
        """What S3 may report for these bytes: uploaded in parts of PART_SIZE, or in one part."""
        whole = self.digests(PART_SIZE)[0]
        return {self.digests(PART_SIZE)[1], _b64(bytes.fromhex(whole))}


def _upload_s3(bucket: str, key: str, payload: _Payload) -> None:
    client = s3_client()
    if payload.size <= PART_SIZE:
        data = next(payload.parts(PART_SIZE))
        client.put_object(
            Bucket=bucket, Key=key, Body=data, ChecksumSHA256=_b64(hashlib.sha256(data).digest()), IfNoneMatch="*"
        )
        return
    upload = client.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="SHA256")
    try:
        parts = []
        for number, chunk in enumerate(payload.parts(PART_SIZE), start=1):
            checksum = _b64(hashlib.sha256(chunk).digest())
            answer = client.upload_part(
                Bucket=bucket,
                Key=key,
                UploadId=upload["UploadId"],
                PartNumber=number,
                Body=chunk,
                ChecksumAlgorithm="SHA256",
                ChecksumSHA256=checksum,
            )
            parts.append({"PartNumber": number, "ETag": answer["ETag"], "ChecksumSHA256": checksum})
        client.complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=upload["UploadId"], MultipartUpload={"Parts": parts}, IfNoneMatch="*"
        )
    except BaseException:
        try:
            client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload["UploadId"])
        except (BotoCoreError, ClientError):
            pass  # the bucket's lifecycle rules clean up what could not be aborted
        raise


def _same_object(size: int, checksum: str | None, payload: _Payload, location: str) -> bool:
    if size != payload.size:
        return False
    if checksum is not None:
        return checksum in payload.s3_checksums()
    raise DataGenError(f"cannot verify {location}: the store reports no SHA256 checksum")


def _put_s3(root: S3OutputRoot, key: str, payload: _Payload) -> None:
    location = root.location(key)
    bucket, full_key = root.bucket_key(key)

    def commit() -> None:
        for _ in range(2):  # a 412: another writer, or an earlier attempt whose answer was lost, committed
            existing = _existing_s3(bucket, full_key)
            if existing is not None:
                if _same_object(*existing, payload, location):
                    return  # committed by an earlier attempt or run: nothing to do
                raise ObjectCollision(
                    f"{location} already holds other content: a committed object is never overwritten; remove the "
                    "stale object if you are sure it is garbage"
                )
            try:
                _upload_s3(bucket, full_key, payload)
            except ClientError as exc:
                if _is_precondition_failed(exc):
                    continue  # compare contents with what is there now
                raise
            stored = _existing_s3(bucket, full_key)
            if stored is None or not _same_object(*stored, payload, location):
                raise DataGenError(f"verification of {location} failed after upload: size or checksum differ")
            return
        raise DataGenError(f"cannot store {location}: it kept changing under concurrent writers")

    try:
        retry_transient(f"store {location}", commit)
    except DataGenError:  # a collision, a failed verification, or a store that stayed unreachable
        raise
    except Exception as exc:  # a permanent error (credentials, a missing bucket): retrying cannot help
        raise DataGenError(f"cannot store {location}: {describe_error(exc)}") from None


def _same_file(a: Path, payload: _Payload) -> bool:
    if a.stat().st_size != payload.size:
        return False
    with a.open("rb") as handle:
        return all(handle.read(len(chunk)) == chunk for chunk in payload.parts(PART_SIZE))


def _put_local(root: LocalOutputRoot, key: str, payload: _Payload) -> None:
    target = Path(root.location(key))
    with staged_file(target, payload.parts(PART_SIZE)) as tmp:
        try:
            os.link(tmp, target)  # atomic, and unlike rename it refuses to replace an existing file
        except FileExistsError:
            if not _same_file(target, payload):
                raise ObjectCollision(
                    f"{target} already holds other content: a committed file is never overwritten; remove the stale "
                    "file if you are sure it is garbage"
                ) from None


def _put(root: OutputRoot, key: str, payload: _Payload) -> StoredObject:
    if isinstance(root, S3OutputRoot):
        _put_s3(root, key, payload)
    elif isinstance(root, LocalOutputRoot):
        _put_local(root, key, payload)
    else:  # pragma: no cover - only the two roots exist
        raise TypeError(f"unsupported output root {root!r}")
    return StoredObject(key, payload.sha256, payload.size)


def put_once(root: OutputRoot, key: str, data: bytes) -> StoredObject:
    return _put(root, key, _Payload(data=data))


def put_file_once(root: OutputRoot, key: str, path: Path) -> StoredObject:
    """`put_once` of a local file's bytes, read a part (PART_SIZE) at a time: an upload in parts on S3, a copy
    linked into place on a local root; memory holds one part, whatever the file's size."""
    return _put(root, key, _Payload(path=path))


def _delete_s3(root: S3OutputRoot, key: str, expected: bytes) -> bool:
    bucket, full_key = root.bucket_key(key)
    client = s3_client()

    def delete() -> bool:
        try:
            current = client.get_object(Bucket=bucket, Key=full_key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return False
            raise
        if current["Body"].read() != expected:
            return False
        try:  # only the object just read: another writer's newer object there is left alone (412)
            client.delete_object(Bucket=bucket, Key=full_key, IfMatch=current["ETag"])
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if _is_precondition_failed(exc) or code in ("NoSuchKey", "404"):
                return False
            if code != "NotImplemented":
                raise
            # a store without conditional deletes (AWS, SeaweedFS and Ceph have them): the window is the read
            log.warning("%s does not support conditional deletes; deleting %s unconditionally", root.uri, key)
            client.delete_object(Bucket=bucket, Key=full_key)
        return True

    try:
        return retry_transient(f"delete {root.location(key)}", delete)
    except DataGenError:
        raise
    except Exception as exc:
        raise DataGenError(f"cannot delete {root.location(key)}: {describe_error(exc)}") from None


def _delete_local(root: LocalOutputRoot, key: str, expected: bytes) -> bool:
    target = Path(root.location(key))
    try:
        if target.read_bytes() != expected:
            return False
        target.unlink()  # a local root has no conditional delete: the window is the read above
    except FileNotFoundError:
        return False
    return True


def delete_if_unchanged(root: OutputRoot, key: str, expected: bytes) -> bool:
    """Delete `key` if it holds exactly `expected`; False when it is gone or holds something else."""
    if isinstance(root, S3OutputRoot):
        return _delete_s3(root, key, expected)
    if isinstance(root, LocalOutputRoot):
        return _delete_local(root, key, expected)
    raise TypeError(f"unsupported output root {root!r}")  # pragma: no cover - only the two roots exist
