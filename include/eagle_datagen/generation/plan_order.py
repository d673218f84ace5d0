"""Plan order: prompts that extend one another go into one shard, side by side.

A multi-turn dataset often holds each step of a conversation as a record of its own, its prompt the whole
history so far; in a dataset's order those steps are far apart, so a plan cut into shards in that order puts
them in different shards, that is on different Airflow workers and at different times, and every step
prefills the whole history again. Here a category's prompts are chained into families (a prompt joins the
family of the longest earlier prompt in id order that is a prefix of it: the steps of one conversation, and
identical prompts), and each family moves to the place of its first member, members in id order (a
conversation's steps in order). Everything else keeps the dataset's order, so a shard is still a slice of it.
Prompts that share only a shorter prefix (a category's system prompt) are not chained: affinity spreads
those over the replicas, and each replica computes that prefix once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import numpy as np
import pyarrow as pa

T = TypeVar("T")


def _is_prefix(short: Sequence[int], long: Sequence[int]) -> bool:
    return len(short) <= len(long) and long[: len(short)] == short


def extensions_together(items: list[T], ids: Callable[[T], Sequence[int]]) -> list[T]:
    """`items` reordered so that each family (prompts that are prefixes of one another) sits at the place of its
    first member, members in id order; the order of families is that of `items`. Stable and deterministic."""
    if len(items) < 2:
        return list(items)
    by_ids = sorted(range(len(items)), key=lambda i: ids(items[i]))
    family = list(range(len(items)))  # each item's family: the position (in `items`) of its root
    ancestors: list[int] = []  # the chain of prefixes of the current item, in id order
    for i in by_ids:
        current = ids(items[i])
        while ancestors and not _is_prefix(ids(items[ancestors[-1]]), current):
            ancestors.pop()
        if ancestors:
            family[i] = family[ancestors[-1]]
        ancestors.append(i)
    members: dict[int, list[int]] = {}
    for i in by_ids:  # members in id order
        members.setdefault(family[i], []).append(i)
    first = {root: min(group) for root, group in members.items()}
    ordered = sorted(members, key=first.__getitem__)
    return [items[i] for root in ordered for i in members[root]]


# The same order for a category of any size, from the prompts' ids read twice in batches (never all at once):
# prefix relations are found with 64-bit hashes of every prefix instead of a sort of the ids.
_BASE = 0x100000001B3
_LENGTH_MIX = 0x9E3779B97F4A7C15
SIBLING_KEY_TOKENS = 16  # siblings (extensions of one prompt) are ordered by their next 16 ids, then dataset order
MAX_POSITIONS = 1 << 20  # prefix hashes computed at a time: bounds the memory of a pass (8 bytes each, a few arrays)
_powers = np.ones(1, dtype=np.uint64)


def _power_table(n: int) -> np.ndarray:
    global _powers
    if len(_powers) < n:
        size = max(n, 2 * len(_powers))
        powers = np.empty(size, dtype=np.uint64)
        powers[0] = 1
        with np.errstate(over="ignore"):
            for i in range(1, size):  # once per process, up to the longest prompt
                powers[i] = powers[i - 1] * np.uint64(_BASE)
        _powers = powers
    return _powers[:n]


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: spreads a polynomial hash over all 64 bits."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _prefix_keys(values: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For rows given as flat `values` and `offsets` (n + 1, from 0): the key of every prefix of every row (one
    per position: the prefix that ends there) and its length."""
    lengths = np.diff(offsets)
    starts = np.repeat(offsets[:-1], lengths)
    position = np.arange(len(values), dtype=np.int64) - starts
    with np.errstate(over="ignore"):
        terms = (values.astype(np.uint64) + np.uint64(1)) * _power_table(int(lengths.max(initial=1)))[position]
        sums = np.cumsum(terms, dtype=np.uint64)
        before = np.concatenate([np.zeros(1, dtype=np.uint64), sums])[starts]
        length = position + 1
        keys = _mix((sums - before) ^ (length.astype(np.uint64) * np.uint64(_LENGTH_MIX)))
    return keys, length


def _slices(batch: pa.ListArray) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(first row, values, offsets from 0) for consecutive slices of `batch` of at most MAX_POSITIONS ids (at
    least one row)."""
    offsets = batch.offsets.to_numpy()
    first = 0
    while first < len(batch):
        last = int(np.searchsorted(offsets, offsets[first] + MAX_POSITIONS, side="right")) - 1
        last = min(max(last, first + 1), len(batch))
        piece = batch.slice(first, last - first)
        values = piece.flatten().to_numpy(zero_copy_only=False)
        local = piece.offsets.to_numpy()
        yield first, values, (local - local[0]).astype(np.int64)
        first = last


def family_order(batches: Callable[[], Iterator[pa.ListArray]], n: int) -> np.ndarray:
    """`extensions_together`'s order as row numbers, for `n` prompts whose ids `batches()` gives in row order as
    list arrays (called twice). Memory: a few arrays of n entries, and one slice of ids at a time. Siblings (two
    extensions of one prompt, neither a prefix of the other) are ordered by their next SIBLING_KEY_TOKENS ids
    (`extensions_together`: all of them), then by row; a 64-bit hash collision could only move a prompt."""
    if n < 2:
        return np.arange(n, dtype=np.int64)
    full = np.empty(n, dtype=np.uint64)
    row = 0
    for batch in batches():
        for first, values, offsets in _slices(batch):
            keys, _ = _prefix_keys(values, offsets)
            count = len(offsets) - 1
            full[row + first : row + first + count] = keys[offsets[1:] - 1]
        row += len(batch)
    by_key = np.argsort(full, kind="stable")
    sorted_keys = full[by_key]
    parent = np.full(n, -1, dtype=np.int64)
    # an identical prompt earlier in the dataset: the nearest one is the parent
    same = np.flatnonzero(sorted_keys[1:] == sorted_keys[:-1]) + 1
    parent[by_key[same]] = by_key[same - 1]
    child_rows: list[np.ndarray] = []  # the prompts given a parent by a prefix here, slice by slice
    child_keys: list[np.ndarray] = []  # ... and their sibling keys: the next ids after the prefix, -1 past the end
    row = 0
    for batch in batches():
        for first, values, offsets in _slices(batch):
            keys, length = _prefix_keys(values, offsets)
            at = np.minimum(np.searchsorted(sorted_keys, keys), n - 1)
            row_length = np.repeat(np.diff(offsets), np.diff(offsets))
            hit = (sorted_keys[at] == keys) & (length < row_length)
            longest = np.maximum.reduceat(np.where(hit, length, 0), offsets[:-1])
            local = np.flatnonzero(longest)
            index = row + first + local
            fresh = parent[index] < 0  # otherwise an identical prompt is its longest prefix
            local, index = local[fresh], index[fresh]
            if len(local):
                prefix = longest[local].astype(np.int64)
                key = keys[offsets[local] + prefix - 1]
                parent[index] = by_key[np.searchsorted(sorted_keys, key, side="right") - 1]
                at = (offsets[local] + prefix)[:, None] + np.arange(SIBLING_KEY_TOKENS)
                inside = at < offsets[local + 1][:, None]
                child_keys.append(np.where(inside, values[np.minimum(at, len(values) - 1)], -1).astype(np.int32))
                child_rows.append(index)
        row += len(batch)
    return _depth_first(parent, _concat(child_rows, np.int64), _concat(child_keys, np.int32, SIBLING_KEY_TOKENS))


def _concat(parts: list[np.ndarray], dtype: type, width: int | None = None) -> np.ndarray:
    if parts:
        return np.concatenate(parts)
    return np.empty((0, width) if width else 0, dtype=dtype)


ROOT_SLICE = 1 << 16  # families placed at a time: prompts without extensions are placed as arrays


def _depth_first(parent: np.ndarray, keyed: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Families in the order of their first row, each in depth-first order from its root, children ordered by
    their sibling key (`keys` of the rows `keyed`, ascending; a child without one: all -1), then row."""
    n = len(parent)
    root = np.where(parent < 0, np.arange(n), parent)
    while True:
        jumped = root[root]
        if np.array_equal(jumped, root):
            break
        root = jumped
    first = np.full(n, n, dtype=np.int64)
    np.minimum.at(first, root, np.arange(n))
    children = np.flatnonzero(parent >= 0)
    sibling = np.full((len(children), SIBLING_KEY_TOKENS), -1, dtype=np.int32)
    sibling[np.searchsorted(children, keyed)] = keys
    # children grouped by parent, each group by sibling key (its ids in order: lexicographic), then row
    by = np.lexsort((children, *(sibling[:, t] for t in reversed(range(SIBLING_KEY_TOKENS))), parent[children]))
    children = children[by]
    count = np.bincount(parent[children], minlength=n)
    start = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(count)])
    roots = np.flatnonzero(parent < 0)
    roots = roots[np.argsort(first[roots], kind="stable")]
    order = np.empty(n, dtype=np.int64)
    filled = 0
    for begin in range(0, len(roots), ROOT_SLICE):
        part = roots[begin : begin + ROOT_SLICE]
        if not count[part].any():
            order[filled : filled + len(part)] = part
            filled += len(part)
            continue
        for top in part.tolist():
            stack = [top]
            while stack:
                current = stack.pop()
                order[filled] = current
                filled += 1
                if count[current]:
                    stack.extend(children[start[current] : start[current + 1]][::-1].tolist())
    assert filled == n
    return order
