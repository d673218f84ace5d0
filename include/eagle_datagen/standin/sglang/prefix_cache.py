"""The stand-in's prefix cache: what SGLang's radix cache would hold, so `cached_tokens` and prefill time follow it.

SGLang matches a new request's ids against a radix tree of the KV it still holds (at token granularity:
page size 1), reuses the longest match, and computes only the rest. Its `meta_info.cached_tokens` is that
match, at most `len(prompt) - 1` (the last prompt token is always computed: the logits of the first output
token come from it; `Req.adjust_max_prefix_ids`). A prompt's KV enters the tree once its prefill has run, and
the whole sequence (prompt + output) once the request finishes; when memory runs short, the least recently
used leaves are evicted first.

Here the tree is a chain of blocks: a node is `block_tokens` ids (or fewer, at the end of a sequence) keyed by
the hash of (parent key, its ids), so full blocks are found with one dict lookup each, and the match inside
the first block that differs is extended token by token against that node's children, which keeps the match
exact to the token. Capacity counts the ids of every node (a partial tail and the full block that later
extends it are both counted: a small over-count). Eviction takes leaves only, oldest first; every match and
insert touches its path from the leaf up, so a node is always more recent than its descendants and the oldest
node is always a leaf.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

ROOT = 0


@dataclass(slots=True)
class _Node:
    parent: int
    ids: tuple[int, ...]
    children: set[int] = field(default_factory=set)


class PrefixCache:
    def __init__(self, capacity_tokens: int, block_tokens: int = 64) -> None:
        if capacity_tokens < 0 or block_tokens < 1:
            raise ValueError("prefix cache: capacity_tokens must be >= 0 and block_tokens >= 1")
        self.capacity_tokens = capacity_tokens
        self.block_tokens = block_tokens
        self._nodes: OrderedDict[int, _Node] = OrderedDict()  # oldest first
        self._root_children: set[int] = set()
        self.tokens = 0  # ids held, over all nodes
        self.evicted_tokens = 0

    @property
    def enabled(self) -> bool:
        return self.capacity_tokens > 0

    def clear(self) -> None:
        self._nodes.clear()
        self._root_children.clear()
        self.tokens = 0

    def _children(self, key: int) -> set[int]:
        return self._root_children if key == ROOT else self._nodes[key].children

    def _touch(self, path: list[int]) -> None:
        for key in reversed(path):  # leaf first: ancestors end up more recent than descendants
            self._nodes.move_to_end(key)

    def match(self, ids: Sequence[int]) -> int:
        """Ids of `ids` served from the cache, as SGLang counts `cached_tokens` (at most len - 1)."""
        limit = len(ids) - 1
        if not self.enabled or limit <= 0:
            return 0
        size, key, pos, path = self.block_tokens, ROOT, 0, []
        while pos < limit:
            block = tuple(ids[pos : min(pos + size, limit)])
            child = hash((key, block))
            node = self._nodes.get(child)
            if node is not None and node.ids == block and len(block) == size:
                path.append(child)
                key, pos = child, pos + size
                continue
            best, best_key = 0, None  # the first block that differs: the longest common run among the children
            for candidate in self._children(key):
                other = self._nodes[candidate].ids
                common = 0
                for a, b in zip(block, other, strict=False):  # lengths differ at a sequence's end
                    if a != b:
                        break
                    common += 1
                if common > best:
                    best, best_key = common, candidate
            if best_key is not None:
                path.append(best_key)
                pos += best
            break
        self._touch(path)
        return min(pos, limit)

    def insert(self, ids: Sequence[int]) -> None:
        """Hold the KV of `ids` (a prefilled prompt, or a finished prompt + output), evicting LRU leaves."""
        if not self.enabled or not ids:
            return
        size, key, path = self.block_tokens, ROOT, []
        for pos in range(0, len(ids), size):
            block = tuple(ids[pos : pos + size])
            child = hash((key, block))
            node = self._nodes.get(child)
            if node is None or node.ids != block:
                if node is not None:  # a hash collision: keep the old node, stop here
                    break
                self._nodes[child] = _Node(key, block)
                self._children(key).add(child)
                self.tokens += len(block)
            path.append(child)
            key = child
        self._touch(path)
        self._evict(keep=set(path))

    def _evict(self, keep: set[int]) -> None:
        while self.tokens > self.capacity_tokens and self._nodes:
            for key, node in self._nodes.items():  # oldest first; the oldest is a leaf (see the module notes)
                if not node.children and key not in keep:
                    break
            else:
                return  # only the path just inserted is left: a sequence longer than the cache stays whole
            del self._nodes[key]
            self._children(node.parent).discard(key)
            self.tokens -= len(node.ids)
            self.evicted_tokens += len(node.ids)
