"""Draft vocabulary of an EAGLE-3 drafter: the K most frequently trained target ids, as SpecForge/EAGLE-3 use it.

The drafter predicts over K ids (draft ids 0..K-1); the selected target ids are sorted ascending and
- `d2t[i] = target_id[i] - i` (int64, length K), so `target_id = draft_id + d2t[draft_id]`;
- `t2d[t]` is True for the selected target ids (bool, length vocab_size).
Both are stored under those names in a safetensors file, the buffers an EAGLE-3 checkpoint carries.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

import numpy as np

from eagle_datagen.errors import ConfigError


@dataclass(frozen=True, eq=False)
class DraftVocab:
    d2t: np.ndarray  # int64 (k,)
    t2d: np.ndarray  # bool (vocab_size,)
    k: int
    coverage: float  # share of the trained tokens whose id is in the draft vocabulary (nan when unknown)

    @property
    def vocab_size(self) -> int:
        return int(self.t2d.shape[0])

    def target_ids(self) -> np.ndarray:
        """Target id of each draft id, ascending."""
        return np.arange(self.k, dtype=np.int64) + self.d2t

    def to_safetensors_bytes(self) -> bytes:
        from safetensors.numpy import save

        metadata = {"k": str(self.k), "vocab_size": str(self.vocab_size), "coverage": repr(float(self.coverage))}
        tensors = {
            "d2t": np.ascontiguousarray(self.d2t, dtype=np.int64),
            "t2d": np.ascontiguousarray(self.t2d, dtype=np.bool_),
        }
        return save(tensors, metadata=metadata)

    @classmethod
    def from_safetensors_bytes(cls, data: bytes) -> DraftVocab:
        from safetensors.numpy import load

        tensors = load(data)
        if not {"d2t", "t2d"} <= set(tensors):
            raise ValueError(f"a draft vocabulary needs tensors d2t and t2d, found {sorted(tensors)}")
        d2t, t2d = tensors["d2t"].astype(np.int64), tensors["t2d"].astype(np.bool_)
        if d2t.ndim != 1 or t2d.ndim != 1:
            raise ValueError(f"d2t and t2d must be 1-d, got shapes {d2t.shape} and {t2d.shape}")
        k = int(d2t.shape[0])
        targets = np.arange(k, dtype=np.int64) + d2t
        if int(t2d.sum()) != k or not np.array_equal(targets, np.flatnonzero(t2d)):
            raise ValueError("d2t and t2d disagree: the target ids of d2t must be exactly the True entries of t2d")
        coverage = float(_metadata(data).get("coverage", "nan"))
        return cls(d2t=d2t, t2d=t2d, k=k, coverage=coverage)


def _metadata(data: bytes) -> dict[str, str]:
    """The `__metadata__` of a safetensors buffer (an 8-byte little-endian header size, then JSON)."""
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    return header.get("__metadata__") or {}


def build_draft_vocab(counts: np.ndarray, k: int = 32000, setting: str = "--draft-vocab-size") -> DraftVocab:
    """Select the k most frequent token ids of `counts` (ties go to the lower id), sorted ascending. `setting`
    is how the running front end calls the size (settings.named), for the messages."""
    counts = np.asarray(counts)
    if counts.ndim != 1 or counts.dtype.kind not in "iu":
        raise ValueError(f"token counts must be a 1-d integer array, got {counts.dtype} {counts.shape}")
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k <= 0:
        raise ConfigError(f"draft vocabulary size must be a positive integer, got {k!r}: pass a {setting} > 0")
    k = int(k)
    counts = counts.astype(np.int64)
    if counts.size and int(counts.min()) < 0:
        raise ValueError("token counts must not be negative")
    distinct = int(np.count_nonzero(counts))
    if k > distinct:
        raise ConfigError(
            f"draft vocabulary of {k} asked, but only {distinct} distinct tokens were generated: "
            f"lower {setting} or generate more data"
        )
    chosen = np.argsort(-counts, kind="stable")[:k]  # stable: equal counts keep ascending id order
    targets = np.sort(chosen).astype(np.int64)
    t2d = np.zeros(len(counts), dtype=np.bool_)
    t2d[targets] = True
    total = int(counts.sum())
    coverage = int(counts[targets].sum()) / total if total else 0.0
    return DraftVocab(d2t=targets - np.arange(k, dtype=np.int64), t2d=t2d, k=k, coverage=coverage)
