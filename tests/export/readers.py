"""Each export format read back the way its trainer reads it, as (sample_id, input_ids, loss_mask) rows.

- speculators: `datasets.load_from_disk` (its trainer's `ArrowDataset` and `generate-offline-data`). The
  folder's format is `torch`, as prepare-data leaves it; without torch in the test environment the copy
  read here has the format unset (`read_speculators` checks the original's state first).
- specforge: its pre-tokenized reader takes `input_ids` and `loss_mask` of each JSON line.
- torchspec: `datasets.load_dataset("parquet", streaming=True)` (TorchSpec's `load_hf_dataset`), and its
  run-length `packed_loss_mask` unpacked as `unpack_loss_mask` does.
- hf: `datasets.load_from_disk`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import numpy as np


def _load_from_disk(folder: Path, tmp: Path) -> datasets.Dataset:
    state = json.loads((folder / "state.json").read_text())
    if state["_format_type"] == "torch":
        try:
            import torch  # noqa: F401
        except ImportError:
            copy = tmp / f"{folder.name}-no-torch"
            shutil.copytree(folder, copy)
            (copy / "state.json").write_text(json.dumps(state | {"_format_type": None}))
            folder = copy
    return datasets.load_from_disk(str(folder))


def sample_ids(folder: Path) -> list[str]:
    return (folder / "sample_ids.txt").read_text().split()


def unpack_loss_mask(packed: str) -> list[int]:
    """TorchSpec's unpack_loss_mask: alternating run lengths, starting with a (possibly empty) 0 run."""
    mask: list[int] = []
    for i, length in enumerate(int(x) for x in packed.split(",") if x):
        mask += [i % 2] * length
    return mask


def read_rows(fmt: str, path: Path, tmp: Path) -> list[tuple[str, list[int], list[int]]]:
    if fmt == "jsonl":
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        return [(r["sample_id"], r["input_ids"], r["loss_mask"]) for r in lines]
    if fmt == "specforge":
        lines = [json.loads(line) for line in (path / "train.jsonl").read_text().splitlines()]
        assert [r["sample_id"] for r in lines] == sample_ids(path)
        return [(r["sample_id"], r["input_ids"], r["loss_mask"]) for r in lines]
    if fmt == "torchspec":
        stream = datasets.load_dataset("parquet", data_files=str(path / "train.parquet"), split="train", streaming=True)
        rows = list(stream)
        for r in rows:
            assert unpack_loss_mask(r["packed_loss_mask"]) == r["loss_mask"]
            assert r["seq_len"] == len(r["input_ids"]) and r["loss_tokens"] == sum(r["loss_mask"])
        assert [r["data_id"] for r in rows] == sample_ids(path)
        return [(r["data_id"], r["input_ids"], r["loss_mask"]) for r in rows]
    dataset = _load_from_disk(path, tmp).with_format(None)
    ids = sample_ids(path)
    assert len(ids) == len(dataset)
    if fmt == "hf":
        assert dataset["sample_id"] == ids
    for row in dataset:
        assert row["seq_len"] == len(row["input_ids"]) == len(row["loss_mask"])
    return [(i, r["input_ids"], r["loss_mask"]) for i, r in zip(ids, dataset, strict=True)]


def expected_rows(samples: list[dict], max_len: int | None = None) -> list[tuple[str, list[int], list[int]]]:
    """prompt_ids + output_ids and [0]*len(prompt) + [1]*len(output), cut and dropped as the trainers do."""
    rows = []
    for s in samples:
        ids = s["prompt_ids"] + s["output_ids"]
        mask = [0] * len(s["prompt_ids"]) + [1] * len(s["output_ids"])
        if max_len is not None:
            ids, mask = ids[:max_len], mask[:max_len]
        if sum(mask):
            rows.append((s["sample_id"], ids, mask))
    return rows


def check_npy_maps(folder: Path, k: int, vocab_size: int) -> np.ndarray:
    """speculators' rules for d2t-K.npy / t2d-K.npy; returns the target ids that t2d marks."""
    d2t, t2d = np.load(folder / f"d2t-{k}.npy"), np.load(folder / f"t2d-{k}.npy")
    assert d2t.dtype == np.int64 and d2t.shape == (k,)
    assert t2d.dtype == np.bool_ and t2d.shape == (vocab_size,) and int(t2d.sum()) == k
    targets = np.flatnonzero(t2d)
    assert np.array_equal(np.arange(k) + d2t, targets)  # d2t[i] = target_id - i
    return targets
