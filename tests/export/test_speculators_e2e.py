"""End to end with the speculators package itself (0.9.0, in its own environment: `make speculators-env`):
its `prepare-data`, run on our JSONL export with the stand-in tokenizer, writes row for row (and in the same
order) what our `speculators` export holds; its trainer's dataset (`ArrowDataset`) and vocabulary loader
(`parse_vocab_mappings`) read our export folder. Skipped when the side environment is not there."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from published_runs import REPO, publish, shard_rows

from eagle_datagen.export.rows import SeqLimit
from eagle_datagen.export.stage import ExportOptions, run_export
from eagle_datagen.storage.output_root import LocalOutputRoot

PYTHON = Path(os.environ.get("EAGLE_DATAGEN_SPECULATORS_PYTHON", REPO / ".venv-speculators" / "bin" / "python"))
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not PYTHON.exists(), reason=f"no speculators environment at {PYTHON} (make speculators-env)"),
]

CHECK = """
import argparse, json, sys
import datasets, torch
from speculators.train.cli import parse_vocab_mappings
from speculators.train.data import ArrowDataset, build_client_item

ours, prepared, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
a, b = datasets.load_from_disk(prepared), datasets.load_from_disk(ours)
assert a.features == b.features and a.format == b.format, (a.features, b.features, a.format, b.format)
rows = lambda d: [(r["input_ids"].tolist(), r["loss_mask"].tolist(), int(r["seq_len"])) for r in d]
assert rows(a) == rows(b), "prepare-data wrote other rows, or in another order"
ds = ArrowDataset(max_len=4096, datapath=ours, on_missing="skip")
assert len(ds) == len(b) and ds._compute_approx_lengths() == [r[2] for r in rows(b)]
assert build_client_item(ds.data[0])["input_ids"] == rows(b)[0][0]
args = argparse.Namespace(d2t_path=None, t2d_path=None, data_path=ours, draft_vocab_size=k, token_freq_path=None,
                          verifier_name_or_path=None, trust_remote_code=False)
d2t, t2d, size = parse_vocab_mappings(args)
assert size == k and d2t.dtype == torch.int64 and t2d.dtype == torch.bool and int(t2d.sum()) == k
print(json.dumps({"rows": len(b), "t2d": t2d.nonzero().flatten().tolist()}))
"""


def test_prepare_data_on_our_jsonl_writes_our_speculators_export(tmp_path, fast_standin_dir):
    # The fast stand-in (the remote-code one's ids as a tokenizer.json): the speculators environment has no
    # tiktoken, which the remote-code folder (like the real Kimi-K2.5) needs with --trust-remote-code.
    standin_dir = fast_standin_dir
    root = LocalOutputRoot(str(tmp_path / "root"))
    draft = publish(root, "r1", {"math": [shard_rows(0, 20, "math", "r1")], "code": [shard_rows(50, 10, "code", "r1")]})
    assert draft is not None
    run_export(root, ExportOptions("jsonl", str(tmp_path / "train.jsonl"), "r1"))
    ours = tmp_path / "ours"
    run_export(root, ExportOptions("speculators", str(ours), "r1", limit=SeqLimit(32), shuffle_seed=0))
    prepared = tmp_path / "prepared"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    subprocess.run(
        [str(PYTHON.parent / "speculators"), "prepare-data", "--model", str(standin_dir), "--data",
         str(tmp_path / "train.jsonl"), "--output", str(prepared), "--seq-length", "32", "--seed", "0",
         "--num-preprocessing-workers", "1"],
        check=True, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    result = subprocess.run(
        [str(PYTHON), "-c", CHECK, str(ours), str(prepared), str(draft.k)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    checked = json.loads(result.stdout.strip().splitlines()[-1])
    assert checked["t2d"] == [int(t) for t in draft.target_ids()]
    assert checked["rows"] == len((ours / "sample_ids.txt").read_text().split())
