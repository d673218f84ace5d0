"""`make demo` runs the main job on the embedded default and prints what it produced."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from eagle_datagen.demo import main


@pytest.mark.slow
def test_demo_runs_end_to_end_and_prints_a_summary(tmp_path, capsys):
    assert main(["--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "run demo: 238 samples" in out and "0 pending" in out and "tool_use" in out
    assert "<|im_assistant|>assistant<|im_middle|><think>" in out and "manifest manifests/run=demo.json" in out
    data = [r for p in tmp_path.glob("data/category=*/run=demo/*.parquet") for r in pq.read_table(p).to_pylist()]
    bad = [r for p in tmp_path.glob("quarantine/category=*/run=demo/*.parquet") for r in pq.read_table(p).to_pylist()]
    assert len(data) + len(bad) == 238 and len({r["category"] for r in data}) == 7
    assert all(r["output_ids"][-1] == 163586 and 163607 in r["output_ids"] for r in data)
    assert bad and {r["reject_reason"] for r in bad} == {"missing_think_end"}
    assert (tmp_path / "manifests" / "run=demo.report.html").read_text().count("<img") >= 3
