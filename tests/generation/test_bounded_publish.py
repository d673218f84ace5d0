"""Publishing a shard in bounded memory (checkpoints read a chunk at a time, rows staged on local disk, the
Parquet file written row group by row group and uploaded a part at a time) gives byte for byte the files that
main's in-memory publisher gave (tests/generation/old_publish.py), and finalize reads them a row group at a time."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eagle_datagen.generation import shard_samples
from eagle_datagen.generation.publish import (
    PublishOptions,
    ShardIncomplete,
    data_key,
    finalize_run,
    publish_shard,
    quarantine_key,
    shard_rows,
)
from eagle_datagen.storage import parquet, reorder
from eagle_datagen.storage.output_root import LocalOutputRoot
from eagle_datagen.storage.parquet import samples_table
from eagle_datagen.storage.staged_shard import _ArrowSize
from old_publish import old_shard_bytes, old_shard_rows

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("shard_inputs", ROOT / "bench" / "shard_inputs.py")
shard_inputs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shard_inputs)


def _published(root: LocalOutputRoot, plan, index: int = 0) -> tuple[bytes | None, bytes | None]:
    category = plan.shards[index].category
    files = [Path(root.location(k(plan.run_id, category, index))) for k in (data_key, quarantine_key)]
    return tuple(f.read_bytes() if f.exists() else None for f in files)  # type: ignore[return-value]


@pytest.mark.parametrize(
    "row_group_bytes,page_bytes,budget,batch_rows",
    [
        (parquet.ROW_GROUP_BYTES, parquet.DATA_PAGE_BYTES, reorder.BUDGET_BYTES, 64),  # the defaults: one group
        (40_000, 4_096, 30_000, 7),  # many row groups, pages and reorder buckets; batches cut across groups
    ],
)
def test_published_bytes_are_main_s_bytes(
    tmp_path, kimi_profile, monkeypatch, row_group_bytes, page_bytes, budget, batch_rows
):
    monkeypatch.setattr(parquet, "ROW_GROUP_BYTES", row_group_bytes)
    monkeypatch.setattr(parquet, "DATA_PAGE_BYTES", page_bytes)
    monkeypatch.setattr(reorder, "BUDGET_BYTES", budget)
    monkeypatch.setattr(shard_samples, "BATCH_ROWS", batch_rows)
    root = LocalOutputRoot(str(tmp_path / "out"))
    plan, _ = shard_inputs.synthesize_shard(
        root,
        "det",
        prompts=40,
        samples=3,
        output_tokens=(20, 900),
        prompt_tokens=(5, 300),
        chunk=9,
        window=30,
        duplicate=True,
        cut_chunk=True,
        bad_every=5,
    )
    expected = old_shard_bytes(root, plan, 0, kimi_profile, PublishOptions().limits)
    assert expected[0] is not None and expected[1] is not None  # both kinds, so both paths are compared
    if row_group_bytes < parquet.ROW_GROUP_BYTES:
        assert pq.ParquetFile(pa.BufferReader(expected[0])).metadata.num_row_groups > 3
    assert publish_shard(root, plan, 0, kimi_profile, PublishOptions()) == plan.shards[0].samples
    assert _published(root, plan) == expected
    # the old rows predate the heldout column; a plan without a held-out policy marks none (None)
    new_rows = shard_rows(root, plan, 0)
    assert all(row.pop("heldout") is None for row in new_rows)
    assert new_rows == old_shard_rows(root, plan, 0)
    # a rerun (after a crash between the two files, or of a finished shard) finds the same bytes: a no-op
    assert publish_shard(root, plan, 0, kimi_profile, PublishOptions()) == plan.shards[0].samples
    assert _published(root, plan) == expected


def test_an_incomplete_shard_is_refused_before_anything_is_written(tmp_path, kimi_profile):
    root = LocalOutputRoot(str(tmp_path / "out"))
    plan, _ = shard_inputs.synthesize_shard(root, "inc", prompts=10, samples=2, output_tokens=(10, 50), chunk=4)
    chunks = sorted((tmp_path / "out").glob("checkpoints/run=inc/shard=00000/chunk-*"))
    for path in chunks[-2:]:  # the last chunk and its index
        path.unlink()
    with pytest.raises(ShardIncomplete):
        publish_shard(root, plan, 0, kimi_profile, PublishOptions())
    assert not list((tmp_path / "out").glob("data/**/*.parquet")) and shard_rows(root, plan, 0) is None


def test_the_arrow_size_of_staged_batches_is_the_whole_table_s(tmp_path):
    """rows per row group come from the whole table's nbytes: summed batch by batch, bitmaps included."""
    rng = np.random.default_rng(3)
    rows = []
    for i in range(300):
        rows.append(
            {
                "sample_id": f"{i:032x}",
                "record_id": None if i % 3 else f"r{i}",
                "prompt_id": f"p{i}",
                "category": "chat",
                "sample_index": i % 4,
                "prompt_ids": rng.integers(0, 9, int(rng.integers(0, 30))).tolist(),
                "output_ids": rng.integers(0, 9, int(rng.integers(0, 50))).tolist(),
                "finish_reason": "stop",
                "completion_tokens": 1,
                "prompt_tokens": 1,
                "reasoning_tokens": None if i % 7 == 0 else i,
                "sampling": json.dumps({"t": i % 2}),
                "model": "m",
                "run_id": "r",
                "weight_version": None,
                "cached_tokens": None if i < 290 else 3,
                "heldout": None if i < 5 else i % 11 == 0,  # a boolean column: its values are bits
            }
        )
    for cuts in ([300], [1, 8, 9, 100, 182], list(range(1, 301, 17))):
        size, start = _ArrowSize(), 0
        for end in [*cuts, 300]:
            if end > start:
                size.add(samples_table(rows[start:end]))
            start = max(start, end)
        assert size.nbytes == samples_table(rows).nbytes


def test_finalize_reads_a_shard_a_row_group_at_a_time_to_main_s_manifest_counts(tmp_path, kimi_profile, monkeypatch):
    monkeypatch.setattr(parquet, "ROW_GROUP_BYTES", 30_000)
    root = LocalOutputRoot(str(tmp_path / "out"))
    plan, _ = shard_inputs.synthesize_shard(root, "fin", prompts=30, samples=2, output_tokens=(50, 400), chunk=8)
    publish_shard(root, plan, 0, kimi_profile, PublishOptions())
    data_file = Path(root.location(data_key("fin", "chat", 0)))
    assert pq.ParquetFile(data_file).metadata.num_row_groups > 2
    reads = []
    original = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read", lambda *a, **k: pytest.fail("a whole shard was read"))
    monkeypatch.setattr(
        pq.ParquetFile, "read_row_group", lambda self, i, *a, **k: reads.append(i) or original(self, i, *a, **k)
    )
    summary = finalize_run(root, plan, kimi_profile, PublishOptions(draft_vocab_size=64))
    rows = old_shard_rows(root, plan, 0)
    assert summary.data + summary.quarantine == len(rows) == 60 and summary.quarantine == 60 // 11 + 0
    manifest = json.loads(Path(root.location(summary.manifest)).read_text())
    [data_entry] = [f for f in manifest["files"] if f["kind"] == "data"]
    assert data_entry["rows"] == summary.data and data_entry["size"] == data_file.stat().st_size
    assert manifest["counts"]["trained_tokens"] == sum(len(r["output_ids"]) for r in rows) - sum(
        len(r["output_ids"]) for r in rows if r["output_ids"][-3] != shard_inputs.THINK_END
    )
    quarantine_file = Path(root.location(quarantine_key("fin", "chat", 0)))
    groups = [pq.ParquetFile(f).metadata.num_row_groups for f in (data_file, quarantine_file)]
    assert reads == [*range(groups[0]), *range(groups[1])]  # each file once, a row group at a time
