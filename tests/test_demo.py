"""`make demo` runs the main job on the embedded default and prints what it produced."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from eagle_datagen.demo import main


@pytest.mark.slow
def test_demo_runs_end_to_end_and_prints_a_summary(tmp_path, capsys):
    assert main(["--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "run demo: 119 samples" in out and "0 pending" in out and "tool_use" in out
    assert "<|im_assistant|>assistant<|im_middle|><think>" in out
    parts = sorted(tmp_path.glob("generated/run=demo/category=*/part-*.parquet"))
    rows = [r for p in parts for r in pq.read_table(p).to_pylist()]
    assert len(rows) == 119 and len({r["category"] for r in rows}) == 7
    assert all(r["output_ids"][-1] == 163586 for r in rows)
