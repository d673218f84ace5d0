"""The bulk row builder against a plain per-row one, the JSON lines against json.dumps, and the torch-free
`vocab_mapping.pt` writer: its zip and pickle structure, read back with torch's weights-only rules, and with
torch itself in the side environment of `make speculators-env` (or the Python EAGLE_DATAGEN_TORCH_PYTHON names)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eagle_datagen.errors import DataGenError
from eagle_datagen.export.formats import jsonl_text
from eagle_datagen.export.rows import RowCounts, SeqLimit, ranges, training_rows
from eagle_datagen.export.torch_file import ALIGNMENT, read_tensors, tensors_to_torch_bytes

REPO = Path(__file__).resolve().parents[2]

TOKEN_LISTS = st.lists(st.integers(0, 163_839), min_size=1, max_size=12)


def naive(prompts, outputs, limit: SeqLimit):
    rows = []
    for p, o in zip(prompts, outputs, strict=True):
        ids, mask = p + o, [0] * len(p) + [1] * len(o)
        if limit.max_len is not None:
            if limit.overlong == "drop" and len(ids) > limit.max_len:
                continue
            ids, mask = ids[: limit.max_len], mask[: limit.max_len]
        if sum(mask):
            rows.append((ids, mask))
    return rows


@given(
    st.lists(st.tuples(TOKEN_LISTS, TOKEN_LISTS), min_size=1, max_size=20),
    st.one_of(st.none(), st.integers(1, 30)),
    st.sampled_from(["cut", "drop"]),
    st.integers(0, 3),
)
def test_bulk_rows_equal_per_row_concatenation_cut_and_drop(pairs, max_len, overlong, offset):
    prompts, outputs = [p for p, _ in pairs], [o for _, o in pairs]
    ids_type = pa.list_(pa.int32())
    table = pa.table(
        {
            "sample_id": [f"{i:064x}" for i in range(len(pairs) + offset)],
            "prompt_ids": pa.array([[1]] * offset + prompts, ids_type),
            "output_ids": pa.array([[2]] * offset + outputs, ids_type),
        }
    ).slice(offset)  # a sliced table: list offsets that do not start at 0
    limit, counts = SeqLimit(max_len, overlong), RowCounts()
    rows = training_rows(table, limit, counts)
    got = list(zip(rows.column("input_ids").to_pylist(), rows.column("loss_mask").to_pylist(), strict=True))
    assert got == naive(prompts, outputs, limit)
    assert rows.column("seq_len").to_pylist() == [len(ids) for ids, _ in got]
    assert counts.rows_exported == len(got) and counts.tokens == sum(len(ids) for ids, _ in got)
    assert counts.supervised_tokens == sum(sum(mask) for _, mask in got)
    dropped = counts.rows_dropped_unsupervised + counts.rows_dropped_overlong
    assert counts.rows_read == len(pairs) == counts.rows_exported + dropped


def test_ranges_concatenate_aranges():
    assert ranges(np.array([5, 0, 9]), np.array([2, 0, 3])).tolist() == [5, 6, 9, 10, 11]
    assert ranges(np.array([], dtype=np.int64), np.array([], dtype=np.int64)).tolist() == []


def test_jsonl_text_is_the_json_of_each_row():
    table = pa.table(
        {
            "sample_id": ["ab" * 32],
            "category": ["math"],
            "prompt_ids": pa.array([[163584, 7, 163606]], pa.list_(pa.int32())),
            "output_ids": pa.array([[9, 163607, 163586]], pa.list_(pa.int32())),
        }
    )
    (line,) = jsonl_text(training_rows(table, SeqLimit(), RowCounts())).to_pybytes().decode().splitlines(True)
    expected = {
        "sample_id": "ab" * 32,
        "category": "math",
        "input_ids": [163584, 7, 163606, 9, 163607, 163586],
        "loss_mask": [0, 0, 0, 1, 1, 1],
    }
    assert line == json.dumps(expected, separators=(",", ":")) + "\n"


def vocab_mapping() -> dict[str, np.ndarray]:
    t2d = np.zeros(163_840, dtype=np.bool_)
    targets = np.array([3, 17, 17_000, 163_586, 163_607])
    t2d[targets] = True
    return {"d2t": targets - np.arange(5), "t2d": t2d}


def test_vocab_mapping_file_has_torchs_structure_and_reads_back_with_weights_only_rules():
    data = tensors_to_torch_bytes(vocab_mapping())
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        infos = archive.infolist()
        names = [i.filename for i in infos]
        assert names == [
            "archive/data.pkl",
            "archive/.format_version",
            "archive/byteorder",
            "archive/data/0",
            "archive/data/1",
            "archive/version",
        ]
        assert all(i.compress_type == zipfile.ZIP_STORED for i in infos)
        for info in infos:  # each record's bytes start 64-byte aligned, as torch writes them (mmap loads)
            start = info.header_offset + 30 + len(info.filename) + len(info.extra)
            assert start % ALIGNMENT == 0
        assert archive.read("archive/version") == b"3" and archive.read("archive/byteorder") == b"little"
        assert len(archive.read("archive/data/0")) == 5 * 8 and len(archive.read("archive/data/1")) == 163_840
    mapping = read_tensors(data)
    assert mapping["d2t"].dtype == np.int64 and mapping["d2t"].tolist() == vocab_mapping()["d2t"].tolist()
    assert mapping["t2d"].dtype == np.bool_ and np.array_equal(mapping["t2d"], vocab_mapping()["t2d"])


def test_the_reader_refuses_globals_that_weights_only_refuses():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02cos\nsystem\n.")  # PROTO 2, GLOBAL os.system, STOP
        archive.writestr("archive/byteorder", b"little")
    with pytest.raises(Exception, match="os.system is not allowed"):
        read_tensors(buffer.getvalue())


TORCH_PYTHON = Path(os.environ.get("EAGLE_DATAGEN_TORCH_PYTHON", REPO / ".venv-speculators" / "bin" / "python"))


@pytest.mark.skipif(not TORCH_PYTHON.exists(), reason=f"no Python with torch at {TORCH_PYTHON} (make speculators-env)")
def test_torch_itself_loads_the_vocab_mapping(tmp_path):
    path = tmp_path / "vocab_mapping.pt"
    path.write_bytes(tensors_to_torch_bytes(vocab_mapping()))
    script = (
        "import sys, torch\n"
        "for kw in ({'weights_only': True}, {'weights_only': True, 'mmap': True}):\n"
        "    m = torch.load(sys.argv[1], **kw)\n"
        "    assert m['d2t'].dtype == torch.int64 and m['t2d'].dtype == torch.bool, m\n"
        "    print(m['d2t'].tolist(), m['t2d'].nonzero().flatten().tolist())\n"
    )
    result = subprocess.run([str(TORCH_PYTHON), "-c", script, str(path)], capture_output=True, text=True, check=True)
    expected = f"{vocab_mapping()['d2t'].tolist()} {np.flatnonzero(vocab_mapping()['t2d']).tolist()}"
    assert result.stdout.split("\n")[:2] == [expected, expected]


def test_jsonl_text_refuses_text_that_would_need_escaping():
    table = pa.table(
        {
            "sample_id": ['ab"}'],
            "category": ["math"],
            "prompt_ids": pa.array([[1]], pa.list_(pa.int32())),
            "output_ids": pa.array([[2]], pa.list_(pa.int32())),
        }
    )
    with pytest.raises(DataGenError, match="sample_id outside the data contract"):
        jsonl_text(training_rows(table, SeqLimit(), RowCounts()))


def test_the_bounded_shuffle_gives_the_seeds_order_over_many_buckets(tmp_path):
    """The shuffled export in buckets (bounded memory) puts rows in exactly shuffled_order's order, whatever the
    bucket size: one bucket, or a bucket per 4,096 rows."""
    import numpy as np
    import pyarrow as pa

    from eagle_datagen.export.rows import RowCounts
    from eagle_datagen.export.stage import _shuffled, shuffled_order

    rng = np.random.default_rng(5)
    read = 20_000
    kept = np.sort(rng.choice(read, 15_000, replace=False))  # rows dropped on the way, as training_rows does
    tables = [
        pa.table(
            {
                "row_index": pa.array(kept[s : s + 3000], pa.int64()),
                "input_ids": pa.array([[int(i), int(i) + 1] for i in kept[s : s + 3000]], pa.list_(pa.int32())),
            }
        )
        for s in range(0, len(kept), 3000)
    ]
    expected = kept[shuffled_order(kept, read, 11)]
    for bucket_bytes in (2**30, 1):
        counts = RowCounts(rows_read=read)
        out = list(_shuffled(iter(tables), tmp_path / "staging.arrow", 11, counts, bucket_bytes=bucket_bytes))
        got = pa.concat_tables(out)
        assert got.column("row_index").to_numpy().tolist() == expected.tolist()
        assert got.column("input_ids").to_pylist()[:3] == [[int(i), int(i) + 1] for i in expected[:3]]
        assert got.schema.names == ["row_index", "input_ids"]
        assert not list(tmp_path.iterdir())  # staging and buckets removed


def test_the_shuffle_of_long_rows_makes_small_buckets_and_batches(tmp_path, monkeypatch):
    """Rows of many tokens (a 28k-token answer is 450 KB as training rows): buckets and the batches handed to the
    writer are cut by bytes, not by a row count, and the order is still the seed's."""
    import numpy as np
    import pyarrow as pa

    from eagle_datagen.export import stage
    from eagle_datagen.export.rows import RowCounts
    from eagle_datagen.storage import reorder

    monkeypatch.setattr(stage, "SHUFFLE_BATCH_BYTES", 50_000)
    read = 300
    kept = np.arange(0, read, 2)
    tables = [
        pa.table(
            {
                "row_index": pa.array(kept[s : s + 40], pa.int64()),
                "input_ids": pa.array([[int(i)] * 2000 for i in kept[s : s + 40]], pa.list_(pa.int64())),
            }
        )
        for s in range(0, len(kept), 40)
    ]
    buckets = []
    original = reorder.in_order

    def counting(staging, place, budget):
        for bucket in original(staging, place, budget):
            buckets.append(bucket.num_rows)
            yield bucket

    monkeypatch.setattr(reorder, "in_order", counting)
    out = list(stage._shuffled(iter(tables), tmp_path / "staging.arrow", 3, RowCounts(rows_read=read), 200_000))
    expected = kept[stage.shuffled_order(kept, read, 3)]
    assert pa.concat_tables(out).column("row_index").to_numpy().tolist() == expected.tolist()
    assert len(buckets) >= 10 and max(buckets) <= 13  # 200 KB buckets of 16 KB rows
    assert max(t.num_rows for t in out) <= 4  # 50 KB batches
    assert not list(tmp_path.iterdir())
