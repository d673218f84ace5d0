"""Prompt sources on a real S3 server (SeaweedFS on 127.0.0.1, authentication on)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eagle_datagen.errors import SourceError
from eagle_datagen.sources.collect import collect_prompts, plans_from_sources

from conftest import REPO, user_record

pytestmark = pytest.mark.slow


def jsonl(*rows) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


@pytest.fixture
def bucket(s3_env):
    client = s3_env.client()
    objects = {
        "prompts/math/a.jsonl": jsonl(user_record("one", category="math"), user_record("two", category="math")),
        "prompts/math/b.jsonl": jsonl(user_record("one", category="math"), user_record("three", category="math")),
        "prompts/chat/c.parquet": None,
        "prompts/chat/readme.txt": b"not a source",
        "prompts/mathematics.jsonl": jsonl(user_record("not under prompts/math/", category="math")),
    }
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([user_record("four"), user_record("five")]), buffer)
    objects["prompts/chat/c.parquet"] = buffer.getvalue()
    for key, body in objects.items():
        client.put_object(Bucket="eagle", Key=key, Body=body)
    yield client
    for key in objects:
        client.delete_object(Bucket="eagle", Key=key)


def contents(result):
    return sorted(p.messages[0]["content"] for p in result.prompts)


def test_prefix_exact_key_and_glob(bucket):
    prefix = collect_prompts(plans_from_sources(["s3://eagle/prompts/math/"]))
    assert contents(prefix) == ["one", "three", "two"] and prefix.counts["math"].duplicates == 1
    folder_without_slash = collect_prompts(plans_from_sources(["s3://eagle/prompts/math"]))
    assert contents(folder_without_slash) == ["one", "three", "two"]  # not prompts/mathematics.jsonl
    exact = collect_prompts(plans_from_sources(["s3://eagle/prompts/math/a.jsonl"]))
    assert contents(exact) == ["one", "two"]
    glob = collect_prompts(plans_from_sources(["s3://eagle/prompts/*/*.parquet"]))
    assert contents(glob) == ["five", "four"]
    everything = collect_prompts(plans_from_sources(["s3://eagle/prompts/"]))
    assert len(everything.prompts) == 6
    assert all(p.origin.startswith("s3://eagle/prompts/") for p in everything.prompts)


def test_missing_prefix_and_bucket_are_one_line_errors(bucket):
    with pytest.raises(SourceError, match="names no .jsonl"):
        collect_prompts(plans_from_sources(["s3://eagle/nothing-here/"]))
    with pytest.raises(SourceError, match="cannot list prompt source s3://no-such-bucket/x: NoSuchBucket"):
        collect_prompts(plans_from_sources(["s3://no-such-bucket/x"]))


def test_wrong_credentials(bucket, monkeypatch):
    from eagle_datagen.objectstore.s3 import s3_client

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    s3_client.cache_clear()
    with pytest.raises(SourceError, match="SignatureDoesNotMatch|AccessDenied|InvalidAccessKeyId"):
        collect_prompts(plans_from_sources(["s3://eagle/prompts/math/"]))


def test_cli_tokenize_from_s3_to_s3(bucket, s3_env):
    env = {**os.environ, **s3_env.env}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "eagle_datagen.cli",
            "tokenize",
            "--prompts",
            "s3://eagle/prompts/",
            "--tokenizer",
            "standin:kimi-k2.5",
            "--trust-remote-code",
            "--output",
            "s3://eagle/out/run1",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    keys = sorted(o["Key"] for o in bucket.list_objects_v2(Bucket="eagle", Prefix="out/run1/")["Contents"])
    assert "out/run1/tokenized/category=math/part-00000.parquet" in keys
    assert "out/run1/tokenized/_summary.json" in keys
    body = bucket.get_object(Bucket="eagle", Key="out/run1/tokenized/category=chat/part-00000.parquet")["Body"]
    table = pq.read_table(io.BytesIO(body.read()))
    assert table.num_rows == 2 and all(ids[-1] == 163606 for ids in table.column("prompt_ids").to_pylist())
