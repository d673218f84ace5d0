"""storage/reorder.py: a staged file's rows in another order, a bucket at a time; `gather` with rows that repeat
(a training mix's copies) or are left out, the same whether one bucket or many."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from eagle_datagen.storage import reorder


def stage(path, n: int, batch: int = 7):
    rows = pa.table({"row": pa.array(np.arange(n), pa.int64()), "ids": pa.array([[i] * (1 + i % 5) for i in range(n)])})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, rows.schema) as writer:
        for start in range(0, n, batch):
            writer.write_table(rows.slice(start, batch))
    return rows


def test_gather_repeats_and_leaves_out_rows_in_any_number_of_buckets(tmp_path):
    staging = tmp_path / "staged.arrow"
    rows = stage(staging, 50)
    rng = np.random.default_rng(3)
    source = rng.choice(50, 120)  # some rows three times, some never
    for budget in (2**30, 200, 1):
        got = pa.concat_tables(list(reorder.gather(staging, source, budget)))
        assert got.column("row").to_numpy().tolist() == source.tolist()
        assert got.column("ids").to_pylist() == [rows.column("ids")[int(i)].as_py() for i in source]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["staged.arrow"]  # buckets removed
    assert list(reorder.gather(staging, np.zeros(0, np.int64))) == []


def test_in_order_is_gather_of_the_inverse_permutation(tmp_path):
    staging = tmp_path / "staged.arrow"
    stage(staging, 40)
    place = np.random.default_rng(1).permutation(40)
    order = np.empty(40, np.int64)
    order[place] = np.arange(40)
    for budget in (2**30, 100):
        by_place = pa.concat_tables(list(reorder.in_order(staging, place, budget))).column("row").to_numpy()
        by_source = pa.concat_tables(list(reorder.gather(staging, order, budget))).column("row").to_numpy()
        assert by_place.tolist() == by_source.tolist() == order.tolist()
    cuts = np.array([0, 10, 25])
    groups = list(reorder.in_order(staging, place, cuts=cuts))
    assert [g.num_rows for g in groups] == [10, 15, 15]
