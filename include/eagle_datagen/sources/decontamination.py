"""Benchmark decontamination: prompts whose user text shares a long word n-gram with a benchmark item
(13 words by default, over normalised text), or equals one, are rejected as `benchmark_overlap`; so is a
record whose `source` and `id` are those of a SPEED-Bench placeholder row (an item without text).

The benchmark side is one sorted array of hashed n-grams (and the item each came from), so a prompt costs a
binary search per n-gram, whatever the number of items; prompts are hashed in batches with numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from eagle_datagen.sources.benchmarks import DEFAULT_NGRAM, BenchmarkItem
from eagle_datagen.sources.text import ngram_hashes, process_hashes, words

_BATCH = 2048  # prompts hashed and looked up together


def source_name(source: str) -> str:
    """A dataset's name as SPEED-Bench's `source` and a record's `source` may spell it: without a hub prefix
    (hf://datasets/, https://huggingface.co/datasets/), without a trailing slash, case-folded."""
    name = source.strip()
    for prefix in ("hf://datasets/", "https://huggingface.co/datasets/", "huggingface.co/datasets/"):
        name = name.removeprefix(prefix)
    return name.rstrip("/").casefold()


@dataclass(frozen=True, slots=True)
class Overlap:
    item: BenchmarkItem
    shared_ngrams: int  # 0 when the text equals the item after normalisation; -1: matched on source and id

    def describe(self, n: int) -> str:
        if self.shared_ngrams < 0 and self.item.source_key is not None:
            source, src_id = self.item.source_key
            return (
                f"the record's source and id match benchmark {self.item.benchmark} item {self.item.item_id} "
                f"(a placeholder row of source {source!r}, src_id {src_id!r})"
            )
        how = (
            "equals it after normalisation"
            if self.shared_ngrams == 0
            else f"shares {self.shared_ngrams} {n}-word n-gram(s) with it"
        )
        return f"the user text overlaps benchmark {self.item.benchmark} item {self.item.item_id}: {how}"


class BenchmarkIndex:
    def __init__(self, items: Sequence[BenchmarkItem], n: int = DEFAULT_NGRAM):
        if n < 1:
            raise ValueError(f"n-gram length must be at least 1, got {n}")
        self.n = n
        self.items = list(items)
        self._equal: dict[str, int] = {}
        self._keys: dict[tuple[str, str], int] = {}  # (source name, src_id) of placeholder rows -> item
        text_hashes, text_item = [], []
        for index, item in enumerate(self.items):
            if item.source_key is not None:
                self._keys.setdefault((source_name(item.source_key[0]), item.source_key[1]), index)
            for text in item.texts:
                text_words = words(text)
                if text_words:
                    self._equal.setdefault(" ".join(text_words), index)
                    text_hashes.append(process_hashes(text_words))
                    text_item.append(index)
        grams, owner = ngram_hashes(text_hashes, n) if text_hashes else (np.zeros(0, np.uint64), np.zeros(0, np.int64))
        item_of = np.asarray(text_item, np.int64)[owner] if len(owner) else np.zeros(0, np.int64)
        order = np.argsort(grams, kind="stable")  # a gram in several items belongs to the first one
        grams, item_of = grams[order], item_of[order]
        first = np.ones(len(grams), bool)
        first[1:] = grams[1:] != grams[:-1]
        self._grams, self._item_of = grams[first], item_of[first]
        # A bitmap of the grams' top bits answers most lookups (a prompt's grams are mostly not in any item)
        # with one gather instead of a binary search; about 1 in 16 misses gets through to the search.
        self._bits_log2 = int(min(32, max(16, np.ceil(np.log2(max(1, len(self._grams)) * 16)))))
        self._bitmap = np.zeros(1 << (self._bits_log2 - 3), np.uint8)
        slots = self._slots(self._grams)
        np.bitwise_or.at(self._bitmap, slots >> np.uint64(3), np.left_shift(1, slots & np.uint64(7)).astype(np.uint8))

    def _slots(self, grams: np.ndarray) -> np.ndarray:
        return grams >> np.uint64(64 - self._bits_log2)

    def _maybe_present(self, grams: np.ndarray) -> np.ndarray:
        slots = self._slots(grams)
        return (self._bitmap[slots >> np.uint64(3)] >> (slots & np.uint64(7)).astype(np.uint8)) & 1 == 1

    @property
    def ngrams(self) -> int:
        return len(self._grams)

    def summary(self) -> dict[str, Any]:
        """What the run was decontaminated against (its provenance): the n-gram length and each set's item count."""
        counts: dict[str, int] = {}
        for item in self.items:
            counts[item.benchmark] = counts.get(item.benchmark, 0) + 1
        return {"ngram": self.n, "benchmarks": counts}

    def find(
        self, user_texts: Sequence[Sequence[str]], keys: Sequence[tuple[str | None, str | None]] | None = None
    ) -> list[Overlap | None]:
        """For each prompt (its user messages' texts), the benchmark item it overlaps most, or None. With `keys`
        (each prompt's record `source` and `id`), a prompt whose pair is a placeholder item's is that item's."""
        found: list[Overlap | None] = []
        for start in range(0, len(user_texts), _BATCH):
            found.extend(self._find_batch(user_texts[start : start + _BATCH]))
        if keys is not None and self._keys:
            for i, (source, record_id) in enumerate(keys):
                index = self._keys.get((source_name(source), record_id)) if source and record_id else None
                if index is not None and found[i] is None:
                    found[i] = Overlap(self.items[index], -1)
        return found

    def _find_batch(self, batch: Sequence[Sequence[str]]) -> list[Overlap | None]:
        result: list[Overlap | None] = [None] * len(batch)
        joined_words = []
        for i, texts in enumerate(batch):
            per_message = [words(t) for t in texts]
            joined = per_message[0] if len(per_message) == 1 else [w for ws in per_message for w in ws]
            for candidate in per_message if len(per_message) == 1 else [*per_message, joined]:
                index = self._equal.get(" ".join(candidate))
                if candidate and index is not None:
                    result[i] = Overlap(self.items[index], 0)
                    break
            joined_words.append(joined)
        hashes = [process_hashes(ws) for ws in joined_words]
        if not len(self._grams):
            return result
        grams, owner = ngram_hashes(hashes, self.n)
        maybe = self._maybe_present(grams)
        grams, owner = grams[maybe], owner[maybe]
        at = np.searchsorted(self._grams, grams)
        at[at == len(self._grams)] = 0
        hit = self._grams[at] == grams
        if not hit.any():
            return result
        owners, items = owner[hit], self._item_of[at[hit]]
        pairs, counts = np.unique(owners * (len(self.items) + 1) + items, return_counts=True)
        for pair, count in zip(pairs.tolist(), counts.tolist(), strict=True):
            i, item = divmod(pair, len(self.items) + 1)
            current = result[i]
            if current is None or (current.shared_ngrams and count > current.shared_ngrams):
                result[i] = Overlap(self.items[item], int(count))
        return result
