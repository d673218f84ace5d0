"""The EAGLE-3 draft vocabulary: selection, d2t/t2d, safetensors round trip, errors."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import load, save

from eagle_datagen.errors import ConfigError
from eagle_datagen.stats.draft_vocab import DraftVocab, build_draft_vocab


def small_counts() -> np.ndarray:
    counts = np.zeros(12, dtype=np.int64)
    counts[[7, 2, 9, 4, 0]] = [50, 40, 30, 5, 1]
    return counts


def test_top_k_sorted_by_target_id_with_exact_d2t_and_t2d():
    draft = build_draft_vocab(small_counts(), k=3)
    assert draft.target_ids().tolist() == [2, 7, 9]
    assert draft.d2t.tolist() == [2, 6, 7] and draft.d2t.dtype == np.int64
    assert draft.t2d.dtype == np.bool_ and draft.t2d.shape == (12,)
    assert np.flatnonzero(draft.t2d).tolist() == [2, 7, 9]
    assert draft.k == 3 and draft.vocab_size == 12
    assert draft.coverage == pytest.approx(120 / 126)


def test_ties_go_to_the_lower_id():
    counts = np.zeros(20, dtype=np.int64)
    counts[[15, 3, 11, 8]] = [9, 4, 4, 4]
    assert build_draft_vocab(counts, k=3).target_ids().tolist() == [3, 8, 15]
    assert build_draft_vocab(counts, k=2).target_ids().tolist() == [3, 15]


def test_every_draft_id_maps_back_to_its_target_id():
    rng = np.random.default_rng(3)
    ids = np.minimum(rng.zipf(1.2, size=200_000) - 1, 99_999)
    counts = np.bincount(ids, minlength=100_000)
    draft = build_draft_vocab(counts, k=500)
    draft_ids = np.arange(draft.k)
    targets = draft_ids + draft.d2t[draft_ids]
    assert np.array_equal(targets, np.flatnonzero(draft.t2d))
    assert np.all(np.diff(targets) > 0) and np.all(draft.d2t >= 0) and np.all(np.diff(draft.d2t) >= 0)
    top = np.argsort(-counts, kind="stable")[:500]
    assert set(targets.tolist()) == set(top.tolist())
    assert draft.coverage == pytest.approx(counts[targets].sum() / counts.sum())


def test_safetensors_round_trip():
    draft = build_draft_vocab(small_counts(), k=4)
    data = draft.to_safetensors_bytes()
    tensors = load(data)
    assert set(tensors) == {"d2t", "t2d"}
    assert tensors["d2t"].dtype == np.int64 and tensors["t2d"].dtype == np.bool_
    restored = DraftVocab.from_safetensors_bytes(data)
    assert np.array_equal(restored.d2t, draft.d2t) and np.array_equal(restored.t2d, draft.t2d)
    assert (restored.k, restored.coverage) == (draft.k, draft.coverage)


def test_a_file_without_metadata_loads_with_unknown_coverage():
    draft = build_draft_vocab(small_counts(), k=3)
    restored = DraftVocab.from_safetensors_bytes(save({"d2t": draft.d2t, "t2d": draft.t2d}))
    assert restored.target_ids().tolist() == [2, 7, 9] and np.isnan(restored.coverage)


def test_inconsistent_tensors_are_refused():
    t2d = np.zeros(12, dtype=np.bool_)
    t2d[[2, 7]] = True
    with pytest.raises(ValueError, match="d2t and t2d disagree"):
        DraftVocab.from_safetensors_bytes(save({"d2t": np.array([2, 6, 7]), "t2d": t2d}))
    with pytest.raises(ValueError, match="needs tensors d2t and t2d"):
        DraftVocab.from_safetensors_bytes(save({"d2t": np.array([2, 6, 7])}))


def test_more_draft_ids_than_distinct_tokens_is_a_config_error():
    counts = np.zeros(163840, dtype=np.int64)
    counts[:1234] = 1
    with pytest.raises(ConfigError) as caught:
        build_draft_vocab(counts, k=32000)
    assert str(caught.value) == (
        "draft vocabulary of 32000 asked, but only 1234 distinct tokens were generated: "
        "lower --draft-vocab-size or generate more data"
    )
    assert build_draft_vocab(counts, k=1234).target_ids().tolist() == list(range(1234))


@pytest.mark.parametrize("k", [0, -5, True, 2.5])
def test_k_must_be_a_positive_integer(k):
    with pytest.raises(ConfigError, match="draft vocabulary size must be a positive integer"):
        build_draft_vocab(small_counts(), k=k)


def test_counts_must_be_a_flat_integer_array():
    with pytest.raises(ValueError, match="1-d integer array"):
        build_draft_vocab(np.ones((2, 3), dtype=np.int64), k=1)
