"""The catalog: the sample ids of the published runs of a model (and weight version), read from the shards
their manifests list, of which only the footer and the sample_id column are fetched."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from test_parquet import row

from eagle_datagen.storage.catalog import Catalog
from eagle_datagen.storage.manifest import Manifest, ManifestFile, write_manifest
from eagle_datagen.storage.objects import put_once
from eagle_datagen.storage.output_root import OutputRoot, open_output_root
from eagle_datagen.storage.parquet import encode_shard, samples_table

MODEL = "moonshotai/Kimi-K2.5"


@pytest.fixture
def root(output_uri) -> OutputRoot:
    return open_output_root(output_uri)


def rows(first: int, n: int, output_tokens: int = 5) -> list[dict]:
    rng = random.Random(first)
    made = []
    for i in range(first, first + n):
        output = [rng.randrange(160_000) for _ in range(output_tokens - 3)] + [163607, 7, 163586]
        made.append(row(i, output_ids=output, completion_tokens=len(output)))
    return made


def publish(root: OutputRoot, run_id: str, shards: list[list[dict]], model: str = MODEL, weights: str = "w1") -> None:
    """What finalize commits, reduced to what the catalog reads: data shards, then the manifest."""
    files = []
    for index, shard in enumerate(shards):
        stored = put_once(
            root, f"data/category=code/run={run_id}/part-{index:05d}.parquet", encode_shard(samples_table(shard))
        )
        files.append(ManifestFile.of(stored, "data", rows=len(shard), category="code"))
    n = sum(len(shard) for shard in shards)
    counts = {"samples": n, "data": n, "quarantine": 0, "reasons": {}}
    write_manifest(
        root, Manifest(run_id, model, "kimi-k2.5", {"servers": [{"weight_version": weights}]}, {}, counts, files)
    )


def ids(shards: list[list[dict]]) -> set[str]:
    return {r["sample_id"] for shard in shards for r in shard}


class CountingRoot:
    """The root, with the bytes and requests of every read counted by key."""

    def __init__(self, root: OutputRoot) -> None:
        self.root, self.fetched, self.requests = root, Counter(), Counter()

    def __getattr__(self, name: str):
        return getattr(self.root, name)

    def read_bytes(self, key: str) -> bytes:
        data = self.root.read_bytes(key)
        self.fetched[key] += len(data)
        self.requests[key] += 1
        return data

    def read_range(self, key: str, start: int, length: int) -> bytes:
        data = self.root.read_range(key, start, length)
        self.fetched[key] += len(data)
        self.requests[key] += 1
        return data


def test_the_catalog_holds_the_samples_of_the_model_and_weight_version_asked(root):
    a, b, other = [rows(0, 4), rows(4, 3)], [rows(10, 2)], [rows(20, 2)]
    publish(root, "a", a, weights="w1")
    publish(root, "b", b, weights="w2")
    publish(root, "other", other, model="someone/else")
    assert set(Catalog(MODEL).refresh(root).sample_ids) == ids(a) | ids(b)
    assert set(Catalog(MODEL, "w2").refresh(root).sample_ids) == ids(b)
    catalog = Catalog(MODEL, "w1").refresh(root)
    assert set(catalog.sample_ids) == ids(a) and catalog.runs == {"a", "b", "other"}
    later = [rows(30, 2)]
    publish(root, "later", later)
    assert set(catalog.refresh(root).sample_ids) == ids(a) | ids(later)  # brought up to date


def test_only_the_footer_and_the_sample_id_column_of_a_shard_are_fetched(root):
    big, small = [rows(0, 200, output_tokens=4000)], [rows(1000, 3)]
    publish(root, "big", big)
    publish(root, "small", small)
    counting = CountingRoot(root)
    assert set(Catalog(MODEL).refresh(counting).sample_ids) == ids(big) | ids(small)
    big_key, small_key = (
        "data/category=code/run=big/part-00000.parquet",
        "data/category=code/run=small/part-00000.parquet",
    )
    size = len(root.read_bytes(big_key))
    assert size > 2_000_000 and counting.fetched[big_key] < size / 10  # token ids are most of a shard
    assert counting.requests[small_key] == 1  # a small shard: fetched whole with its footer, once


def test_a_shard_of_many_row_groups_with_a_footer_past_the_first_read_is_read_whole(root):
    """The column's chunks of every row group (dictionary pages too) and a footer longer than the tail fetched
    first (FOOTER_READ) are fetched; other columns are not."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from eagle_datagen.storage.catalog import FOOTER_READ, read_stored_column

    ids_written = [f"{i:032x}" for i in range(3000)]
    rng = random.Random(0)
    tokens = [[rng.randrange(160_000) for _ in range(200)] for _ in range(3000)]
    table = pa.table({"tokens": tokens, "sample_id": ids_written})
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=7, compression="zstd")  # dictionary-encoded, 429 row groups
    data = buffer.getvalue()
    footer = int.from_bytes(data[-8:-4], "little")
    assert footer > FOOTER_READ and pq.read_metadata(io.BytesIO(data)).row_group(0).column(1).has_dictionary_page
    root.write_bytes("data/x.parquet", data)
    counting = CountingRoot(root)
    column = read_stored_column(counting, "data/x.parquet", len(data), "sample_id")
    assert column.to_pylist() == ids_written
    assert counting.fetched["data/x.parquet"] < len(data) / 5
