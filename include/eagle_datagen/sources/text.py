"""Text as words, for overlap checks (benchmark decontamination, near-duplicates): normalisation, 64-bit hashes
of words (stable ones for decisions that must repeat across processes, Python's own where only membership
counts) and of word n-grams, vectorised with numpy.

Normalised text is NFKC, case-folded, and split into runs of letters and digits: punctuation, underscores,
whitespace and markup do not separate two texts that say the same thing. Chinese and Japanese write no spaces
between words, so each Han, Hiragana or Katakana character is a word of its own (a C-Eval question is a run of
characters, which as one "word" could never share a 13-word n-gram with anything).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence

import numpy as np

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Hiragana, Katakana, Han (and extensions)
_WORD = re.compile(f"[{_CJK}]|[^\\W_{_CJK}]+")
_MULTIPLIER = np.uint64(0x100000001B3)  # odd: the polynomial n-gram hash keeps word order
_MAX_CACHED_WORDS = 4_000_000


# ASCII text (most prompts) takes a faster path with the same result: every character that is not a letter or
# a digit becomes a space.
_ASCII_SEPARATORS = str.maketrans({chr(c): " " for c in range(128) if not chr(c).isalnum()})


def words(text: str) -> list[str]:
    if text.isascii():
        return text.lower().translate(_ASCII_SEPARATORS).split()
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def normalised(text: str) -> str:
    return " ".join(words(text))


class WordHasher:
    """64-bit hashes of words (blake2b: the same in every process, so decisions are reproducible), cached
    because a corpus repeats its words."""

    def __init__(self) -> None:
        self._cache: dict[str, int] = {}

    def _new(self, word: str) -> int:
        if len(self._cache) >= _MAX_CACHED_WORDS:
            self._cache.clear()
        value = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")
        self._cache[word] = value
        return value

    def hashes(self, text_words: Sequence[str]) -> np.ndarray:
        lookup = self._cache.__getitem__
        try:
            values = list(map(lookup, text_words))  # one C-level pass when every word was seen before
        except KeyError:
            for word in set(text_words).difference(self._cache):
                self._new(word)
            values = list(map(lookup, text_words))
        return np.array(values, np.uint64)


def process_hashes(text_words: Sequence[str]) -> np.ndarray:
    """Python's own 64-bit string hashes: the fastest, but salted per process (PYTHONHASHSEED), so only for
    hashes that never leave the process and whose exact values decide nothing (exact n-gram membership)."""
    return np.fromiter(map(hash, text_words), np.int64, len(text_words)).view(np.uint64)


def ngram_hashes(word_hashes: Sequence[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every n-gram of words of each text, and the index of the text each one belongs to. Texts
    shorter than n words have none. One pass over the concatenation: windows across two texts are dropped."""
    lengths = np.fromiter((len(h) for h in word_hashes), np.int64, len(word_hashes))
    total = int(lengths.sum())
    if total < n:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    joined = np.concatenate(word_hashes) if len(word_hashes) > 1 else np.asarray(word_hashes[0], np.uint64)
    windows = total - n + 1
    grams = np.zeros(windows, np.uint64)
    for j in range(n):
        grams = grams * _MULTIPLIER + joined[j : j + windows]
    ends = np.cumsum(lengths)
    owner = np.repeat(np.arange(len(lengths)), lengths)[:windows]
    inside = np.arange(windows) + n <= ends[owner]
    return grams[inside], owner[inside]
