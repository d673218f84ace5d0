"""Committed objects: written once, verified, never overwritten; locally and on a real S3 server."""

from __future__ import annotations

import hashlib
import time

import pytest

from eagle_datagen.errors import DataGenError
from eagle_datagen.objectstore.s3 import TRANSIENT_CODES
from eagle_datagen.storage import objects
from eagle_datagen.storage.objects import ObjectCollision, delete_if_unchanged, expected_s3_checksum, put_once
from eagle_datagen.storage.output_root import LocalOutputRoot, S3OutputRoot, open_output_root


def test_local_put_once_is_idempotent_and_refuses_other_content(tmp_path):
    root = LocalOutputRoot(str(tmp_path))
    stored = put_once(root, "data/a.parquet", b"hello")
    assert stored.sha256 == hashlib.sha256(b"hello").hexdigest() and stored.size == 5
    assert put_once(root, "data/a.parquet", b"hello") == stored  # a rerun: no-op
    with pytest.raises(ObjectCollision, match="never overwritten"):
        put_once(root, "data/a.parquet", b"other")
    assert (tmp_path / "data" / "a.parquet").read_bytes() == b"hello"
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["a.parquet"]  # no temporary files left


def test_multipart_checksum_is_the_checksum_of_part_checksums():
    data = b"a" * 10 + b"b" * 5
    single = expected_s3_checksum(data, 100)
    multi = expected_s3_checksum(data, 10)
    assert not single.endswith("-1") and multi.endswith("-2") and single != multi.split("-")[0]


@pytest.fixture
def s3_root(s3_env, request):
    return S3OutputRoot(f"s3://eagle/objects-{request.node.name}")


@pytest.mark.slow
def test_s3_put_once_verifies_is_idempotent_and_refuses_other_content(s3_root):
    stored = put_once(s3_root, "x/file.bin", b"payload")
    assert s3_root.read_bytes("x/file.bin") == b"payload"
    assert put_once(s3_root, "x/file.bin", b"payload") == stored
    with pytest.raises(ObjectCollision, match="already holds other content"):
        put_once(s3_root, "x/file.bin", b"different")
    assert s3_root.read_bytes("x/file.bin") == b"payload"


@pytest.mark.slow
def test_s3_multipart_upload_with_part_checksums(s3_root, monkeypatch):
    monkeypatch.setattr(objects, "PART_SIZE", 5 * 1024 * 1024)  # S3's smallest part
    data = bytes(range(256)) * (11 * 1024 * 1024 // 256)
    put_once(s3_root, "big.bin", data)
    bucket, key = s3_root.bucket_key("big.bin")
    head = s3_root_client(s3_root).head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == expected_s3_checksum(data, 5 * 1024 * 1024) and head["ContentLength"] == len(data)
    assert put_once(s3_root, "big.bin", data).size == len(data)  # a rerun recognises the multipart object


def s3_root_client(root):
    from eagle_datagen.objectstore.s3 import s3_client

    return s3_client()


@pytest.mark.slow
def test_seaweedfs_rejects_a_wrong_checksum_and_put_once_retries_it(s3_root, monkeypatch):
    bucket, key = s3_root.bucket_key("corrupt.bin")
    client = s3_root_client(s3_root)
    wrong = objects._b64(hashlib.sha256(b"not the data").digest())
    with pytest.raises(Exception) as info:
        client.put_object(Bucket=bucket, Key=key, Body=b"the data", ChecksumSHA256=wrong)
    assert info.value.response["Error"]["Code"] in TRANSIENT_CODES  # BadDigest: the store checked

    real_b64, calls = objects._b64, []

    def corrupt_first(digest: bytes) -> str:  # bytes damaged in transit on the first attempt
        calls.append(digest)
        return wrong if len(calls) == 1 else real_b64(digest)

    monkeypatch.setattr(objects, "_b64", corrupt_first)
    monkeypatch.setattr("time.sleep", lambda s: None)
    put_once(s3_root, "corrupt.bin", b"the data")
    assert s3_root.read_bytes("corrupt.bin") == b"the data"


@pytest.mark.slow
def test_conditional_write_collision_between_two_writers(s3_root, monkeypatch):
    """Writer B checks, finds nothing, but A commits first: B's conditional write fails, and B then sees
    A's object: the same bytes are fine, other bytes are a collision."""
    put_once(s3_root, "race.bin", b"from A")
    real_existing, seen = objects._existing_s3, []

    def stale_first_check(bucket, key):
        seen.append(key)
        return None if len(seen) == 1 else real_existing(bucket, key)

    monkeypatch.setattr(objects, "_existing_s3", stale_first_check)
    with pytest.raises(ObjectCollision):
        put_once(s3_root, "race.bin", b"from B")
    seen.clear()
    put_once(s3_root, "race.bin", b"from A")
    assert s3_root.read_bytes("race.bin") == b"from A"


@pytest.mark.slow
def test_permanent_errors_stop_with_one_line(s3_root, monkeypatch):
    from eagle_datagen.objectstore.s3 import s3_client

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    s3_client.cache_clear()
    with pytest.raises(DataGenError, match=r"cannot store s3://eagle/.*/f: .*check AWS_ACCESS_KEY_ID") as info:
        put_once(s3_root, "f", b"1")
    assert "\n" not in str(info.value)


@pytest.fixture
def any_root(output_uri):
    return open_output_root(output_uri)


def test_delete_if_unchanged_deletes_only_the_content_it_was_given(any_root):
    put_once(any_root, "locks/l.json", b"mine")
    assert not delete_if_unchanged(any_root, "locks/l.json", b"someone else's")
    assert any_root.read_bytes("locks/l.json") == b"mine"
    assert delete_if_unchanged(any_root, "locks/l.json", b"mine")
    assert any_root.list("locks/") == []
    assert not delete_if_unchanged(any_root, "locks/l.json", b"mine")  # gone: nothing to do
    put_once(any_root, "locks/l.json", b"next")  # and the key can be created again
    assert any_root.read_bytes("locks/l.json") == b"next"


def test_list_modified_gives_the_stores_times_of_the_keys_under_a_prefix(any_root):
    put_once(any_root, "plans/run=a/plan.json", b"1")
    any_root.write_bytes("plans/run=ab/plan.json", b"2")
    put_once(any_root, "checkpoints/run=a/x.jsonl", b"3")
    found = any_root.list_modified("plans/run=a/")
    assert list(found) == ["plans/run=a/plan.json"]
    assert abs(found["plans/run=a/plan.json"] - time.time()) < 60  # the store runs on this machine
    assert list(any_root.list_modified("plans/")) == ["plans/run=a/plan.json", "plans/run=ab/plan.json"]
    assert any_root.list_modified("nothing/here/") == {}


@pytest.mark.slow
def test_s3_delete_leaves_an_object_that_replaced_the_one_it_read(s3_root, monkeypatch):
    """Between the read and the delete another writer replaces the object: the delete, conditional on the
    ETag it read, fails on the server and the newer object stays."""
    from eagle_datagen.objectstore.s3 import s3_client

    put_once(s3_root, "locks/l.json", b"stale")
    bucket, key = s3_root.bucket_key("locks/l.json")
    real = s3_client()

    class ReplacedAfterRead:
        def get_object(self, **kwargs):
            answer = real.get_object(**kwargs)
            real.put_object(Bucket=bucket, Key=key, Body=b"fresh")  # another planner's new lock
            return answer

        def __getattr__(self, name):
            return getattr(real, name)

    monkeypatch.setattr(objects, "s3_client", ReplacedAfterRead)
    assert not delete_if_unchanged(s3_root, "locks/l.json", b"stale")
    assert s3_root.read_bytes("locks/l.json") == b"fresh"


def test_delete_removes_a_key_and_a_missing_key_is_no_error(any_root):
    any_root.write_bytes("claims/run=a.parquet", b"claim")
    any_root.delete("claims/run=a.parquet")
    any_root.delete("claims/run=a.parquet")
    assert any_root.list("claims/") == []


def test_read_range_gives_the_bytes_asked_for_and_fewer_at_the_end(any_root):
    data = bytes(range(256)) * 4
    put_once(any_root, "data/x.parquet", data)
    assert any_root.read_range("data/x.parquet", 10, 20) == data[10:30]
    assert any_root.read_range("data/x.parquet", 1000, 100) == data[1000:]
    assert any_root.read_range("data/x.parquet", 0, 0) == b""


def test_reading_a_missing_key_is_file_not_found_on_every_root(any_root):
    with pytest.raises(FileNotFoundError):
        any_root.read_bytes("locks/nobody.json")


@pytest.mark.slow
def test_put_file_once_uploads_a_file_in_parts_and_keeps_put_once_s_rules(any_root, tmp_path, monkeypatch):
    """A local file committed a part at a time (multipart on S3, a copy linked into place locally): the same
    checksums as put_once of its bytes, a rerun is a no-op, other content is refused; local_copy reads it back."""
    from eagle_datagen.storage.local_copy import local_copy
    from eagle_datagen.storage.objects import put_file_once

    monkeypatch.setattr(objects, "PART_SIZE", 5 * 1024 * 1024)  # S3's smallest part: 3 parts
    data = hashlib.sha256(b"seed").digest() * (11 * 1024 * 1024 // 32)
    path = tmp_path / "shard.parquet"
    path.write_bytes(data)
    stored = put_file_once(any_root, "data/x/part-00000.parquet", path)
    assert stored == objects.StoredObject("data/x/part-00000.parquet", hashlib.sha256(data).hexdigest(), len(data))
    assert put_file_once(any_root, "data/x/part-00000.parquet", path) == stored
    assert put_once(any_root, "data/x/part-00000.parquet", data) == stored  # the same object, however it came
    if isinstance(any_root, S3OutputRoot):
        bucket, key = any_root.bucket_key("data/x/part-00000.parquet")
        head = s3_root_client(any_root).head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        assert head["ChecksumSHA256"] == expected_s3_checksum(data, 5 * 1024 * 1024)
    other = tmp_path / "other.parquet"
    other.write_bytes(data[:-1] + b"!")
    with pytest.raises(ObjectCollision, match="already holds other content"):
        put_file_once(any_root, "data/x/part-00000.parquet", other)
    with local_copy(any_root, "data/x/part-00000.parquet") as (copy, sha256):
        assert sha256 == stored.sha256 and copy.read_bytes() == data
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert put_file_once(any_root, "data/x/empty", empty).size == 0 and any_root.read_bytes("data/x/empty") == b""
