"""Near-duplicate prompts: MinHash signatures over word shingles, LSH bands to find candidates, and the
estimated Jaccard similarity of the candidates' signatures against a threshold.

Records are taken in collection order (recipe categories, sources, records); a record whose estimated
similarity to a record kept before it reaches the threshold is a near-duplicate of that one (the most
similar, the earliest on ties). The permutations come from a fixed seed and the shingle hashes from
blake2b, so the same input keeps the same records in every run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from eagle_datagen.sources.recipe import DEFAULT_NUM_PERM, DEFAULT_SHINGLE_WORDS, DEFAULT_THRESHOLD
from eagle_datagen.sources.text import WordHasher, ngram_hashes, words

_SEED = 20261201
_TARGET_RECALL = 0.995  # chance that a pair exactly at the threshold becomes a candidate


@dataclass(frozen=True, slots=True)
class NearDuplicate:
    index: int  # the near-duplicate, by position in the input
    of: int  # the kept record it duplicates
    similarity: float


def lsh_bands(num_perm: int, threshold: float) -> tuple[int, int]:
    """(bands, rows): the most rows per band (fewest false candidates) that still find a pair at the
    threshold with probability _TARGET_RECALL."""
    best = (num_perm, 1)
    for rows in range(1, num_perm + 1):
        bands = num_perm // rows
        if 1 - (1 - threshold**rows) ** bands >= _TARGET_RECALL:
            best = (bands, rows)
    return best


class MinHasher:
    def __init__(self, num_perm: int = DEFAULT_NUM_PERM, shingle_words: int = DEFAULT_SHINGLE_WORDS):
        rng = np.random.default_rng(_SEED)
        self.num_perm, self.shingle_words = num_perm, shingle_words
        self._a = rng.integers(1, 2**63, num_perm, dtype=np.uint64) | np.uint64(1)  # odd multipliers
        self._b = rng.integers(0, 2**63, num_perm, dtype=np.uint64)
        self._hasher = WordHasher()

    def shingles(self, text: str) -> np.ndarray:
        hashes = self._hasher.hashes(words(text))
        if len(hashes) == 0:
            return hashes
        n = min(self.shingle_words, len(hashes))  # a text shorter than a shingle is one shingle
        grams, _ = ngram_hashes([hashes], n)
        return np.unique(grams)

    def signature(self, text: str) -> np.ndarray | None:
        shingles = self.shingles(text)
        if len(shingles) == 0:
            return None
        mixed = shingles[:, None] * self._a[None, :] + self._b[None, :]
        mixed ^= mixed >> np.uint64(31)
        return mixed.min(axis=0)


def find_near_duplicates(
    texts: Sequence[str],
    threshold: float = DEFAULT_THRESHOLD,
    shingle_words: int = DEFAULT_SHINGLE_WORDS,
    num_perm: int = DEFAULT_NUM_PERM,
) -> list[NearDuplicate]:
    hasher = MinHasher(num_perm, shingle_words)
    bands, rows = lsh_bands(num_perm, threshold)
    buckets: list[dict[bytes, list[int]]] = [{} for _ in range(bands)]
    kept: dict[int, np.ndarray] = {}
    found: list[NearDuplicate] = []
    for index, text in enumerate(texts):
        signature = hasher.signature(text)
        if signature is None:
            continue
        keys = [signature[b * rows : (b + 1) * rows].tobytes() for b in range(bands)]
        candidates = sorted({c for b, key in enumerate(keys) for c in buckets[b].get(key, ())})
        best, best_similarity = -1, 0.0
        for candidate in candidates:
            similarity = float(np.mean(kept[candidate] == signature))
            if similarity >= threshold and similarity > best_similarity:
                best, best_similarity = candidate, similarity
        if best >= 0:
            found.append(NearDuplicate(index, best, best_similarity))
            continue
        kept[index] = signature
        for b, key in enumerate(keys):
            buckets[b].setdefault(key, []).append(index)
    return found
