"""`make demo` runs the existing stages on the demo recipe and prints what it produced."""

from __future__ import annotations

import pyarrow.parquet as pq

from eagle_datagen.demo import main


def test_demo_runs_and_prints_a_summary(tmp_path, capsys):
    assert main(["--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "tokenized" in out and "tool_use" in out and "163606" in out
    parts = sorted((tmp_path / "tokenize" / "tokenized").glob("category=*/part-*.parquet"))
    assert len(parts) >= 6
    assert sum(pq.read_metadata(p).num_rows for p in parts) > 100
