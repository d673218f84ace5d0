"""Sample ids as 16-byte digests, and a compact set of them for the planner's comparisons.

A sample id is 32 lowercase hex digits (`make_sample_id`: the first half of a sha256), stored as text in data
shards and claims. As a Python `str` in a `set` one costs about 130 bytes; as the 16 bytes it encodes, in a
sorted numpy array (`SampleIdSet`), 16, and membership is a binary search (`np.searchsorted`) over the array,
vectorised for a whole category at once. The conversions to and from text work on whole Arrow arrays, without
a Python object per id, and give back exactly the text stored (hex is lowercase both ways).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

log = logging.getLogger(__name__)
DIGEST = np.dtype("S16")  # compared as raw bytes (equal width: no NUL padding enters a comparison)
HEX_DIGITS = 32
HEX_SLICE = 1 << 16  # ids turned into text at a time
_NIBBLE = np.full(256, 255, dtype=np.uint8)
_NIBBLE[np.frombuffer(b"0123456789", np.uint8)] = np.arange(10, dtype=np.uint8)
_NIBBLE[np.frombuffer(b"abcdef", np.uint8)] = np.arange(10, 16, dtype=np.uint8)


def digests_from_hex(ids: pa.Array | pa.ChunkedArray | Iterable[str]) -> np.ndarray:
    """The digests of sample ids given as text (an Arrow string array or Python strings), in their order. An id
    that is not 32 lowercase hex digits is left out (with a warning): no id this pipeline makes can equal it."""
    if not isinstance(ids, (pa.Array, pa.ChunkedArray)):
        ids = pa.array(list(ids), pa.string())
    chunks = ids.chunks if isinstance(ids, pa.ChunkedArray) else [ids]
    parts = [_chunk_digests(chunk.cast(pa.string()) if chunk.type != pa.string() else chunk) for chunk in chunks]
    return np.concatenate(parts) if parts else np.empty(0, DIGEST)


def _chunk_digests(chunk: pa.StringArray) -> np.ndarray:
    n = len(chunk)
    if n == 0:
        return np.empty(0, DIGEST)
    if chunk.null_count:
        chunk = chunk.drop_null()
        n = len(chunk)
    offsets = np.frombuffer(chunk.buffers()[1], np.int32)[chunk.offset : chunk.offset + n + 1]
    data = np.frombuffer(chunk.buffers()[2], np.uint8) if chunk.buffers()[2] is not None else np.empty(0, np.uint8)
    lengths = np.diff(offsets)
    if np.all(lengths == HEX_DIGITS):
        fast = _fast_digests(data[offsets[0] : offsets[-1]], n)
        if fast is not None:
            return fast
        text = data[offsets[0] : offsets[-1]].reshape(n, HEX_DIGITS)
        good = np.ones(n, dtype=bool)
    else:
        good = lengths == HEX_DIGITS
        starts = offsets[:-1][good]
        text = data[starts[:, None] + np.arange(HEX_DIGITS)] if len(starts) else np.empty((0, HEX_DIGITS), np.uint8)
    nibbles = _NIBBLE[text]
    valid = (nibbles != 255).all(axis=1)
    if not good.all() or not valid.all():
        log.warning("%d sample id(s) are not 32 lowercase hex digits: left out", n - int(valid.sum()))
        nibbles = nibbles[valid]
    packed = (nibbles[:, 0::2] << 4) | nibbles[:, 1::2]
    return np.ascontiguousarray(packed).view(DIGEST).reshape(len(packed))


def _fast_digests(text: np.ndarray, n: int) -> np.ndarray | None:
    """`n` ids of 32 characters each, back to back in `text`: decoded by `bytes.fromhex`, a slice at a time; None
    when one is not lowercase hex (fromhex also reads uppercase and skips whitespace: those are checked)."""
    out = np.empty(n, dtype=DIGEST)
    for start in range(0, n, HEX_SLICE):
        raw = text[start * HEX_DIGITS : (start + HEX_SLICE) * HEX_DIGITS].tobytes()
        if any(upper in raw for upper in b"ABCDEF"):
            return None
        try:
            decoded = bytes.fromhex(raw.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            return None
        if len(decoded) * 2 != len(raw):
            return None
        out[start : start + len(decoded) // 16] = np.frombuffer(decoded, DIGEST)
    return out


def hex_strings(digests: np.ndarray) -> pa.StringArray:
    """The digests' text (what `make_sample_id` returns), as one Arrow string array in their order."""
    raw = np.ascontiguousarray(digests, dtype=DIGEST).reshape(-1)
    text = np.empty(len(raw) * HEX_DIGITS, dtype=np.uint8)
    for start in range(0, len(raw), HEX_SLICE):  # a slice at a time: no Python string of the whole text
        part = raw[start : start + HEX_SLICE].tobytes().hex().encode("ascii")
        text[start * HEX_DIGITS : start * HEX_DIGITS + len(part)] = np.frombuffer(part, dtype=np.uint8)
    offsets = np.arange(0, (len(raw) + 1) * HEX_DIGITS, HEX_DIGITS, dtype=np.int32)
    return pa.StringArray.from_buffers(len(raw), pa.py_buffer(offsets), pa.py_buffer(text))


class SampleIdSet:
    """A set of sample ids as a sorted array of unique digests: 16 bytes an id."""

    def __init__(self, digests: np.ndarray | None = None) -> None:
        self.digests = SampleIdSet.merged([digests]).digests if digests is not None else _EMPTY

    @classmethod
    def of(cls, ids: Iterable[str]) -> SampleIdSet:
        return cls(digests_from_hex(ids))

    def __len__(self) -> int:
        return len(self.digests)

    def __bool__(self) -> bool:
        return len(self.digests) > 0

    def __iter__(self) -> Iterator[str]:
        """The ids as text, in digest order (for tests and messages: a Python object each)."""
        return iter(hex_strings(self.digests).to_pylist())

    def __contains__(self, sample_id: object) -> bool:
        if isinstance(sample_id, str):
            digests = digests_from_hex([sample_id])
            return len(digests) == 1 and self.has(digests.tobytes())
        return False

    def has(self, digest: bytes) -> bool:
        """Whether the set holds the 16-byte `digest`: one binary search, for a record at a time."""
        at = int(self.digests.searchsorted(digest))
        return self.digests[at : at + 1].tobytes() == digest  # raw bytes: an element would lose trailing NULs

    def contains(self, digests: np.ndarray) -> np.ndarray:
        """For each digest of `digests` (any shape), whether the set holds it."""
        digests = np.asarray(digests, dtype=DIGEST)
        if not len(self.digests) or not digests.size:
            return np.zeros(digests.shape, dtype=bool)
        flat = digests.reshape(-1)
        # queries in order: the search walks the array forwards (5-10x faster than in random order)
        order = np.argsort(flat) if len(flat) > 1 else np.zeros(1, dtype=np.intp)
        queries = flat[order]
        at = np.searchsorted(self.digests, queries)
        np.minimum(at, len(self.digests) - 1, out=at)
        found = np.empty(len(flat), dtype=bool)
        found[order] = self.digests[at] == queries
        return found.reshape(digests.shape)

    def union(self, *others: SampleIdSet | np.ndarray) -> SampleIdSet:
        parts = [o.digests if isinstance(o, SampleIdSet) else np.asarray(o, DIGEST).reshape(-1) for o in others]
        if not any(len(p) for p in parts):
            return self
        if not len(self.digests) and len(others) == 1 and isinstance(others[0], SampleIdSet):
            return others[0]
        return SampleIdSet.merged([self.digests, *parts])

    @classmethod
    def merged(cls, parts: list[np.ndarray]) -> SampleIdSet:
        """The set of the digests of `parts`, which it empties (each part freed once copied, when nothing else
        holds it), sorting in place: at most twice the digests' size at a time."""
        merged = cls()
        flat = np.concatenate([np.asarray(p, DIGEST).reshape(-1) for p in parts]) if parts else _EMPTY
        parts.clear()
        if len(flat) > 1:
            flat.sort()
            keep = np.empty(len(flat), dtype=bool)
            keep[0] = True
            np.not_equal(flat[1:], flat[:-1], out=keep[1:])
            if not keep.all():
                flat = flat[keep]
        merged.digests = flat
        return merged


_EMPTY = np.empty(0, DIGEST)
