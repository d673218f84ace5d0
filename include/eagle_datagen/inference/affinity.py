"""Prefix affinity: which replica a request goes to, so that requests sharing a prompt prefix share one KV cache.

A replica that already holds a prompt's prefix (SGLang's radix cache) prefills only the rest. So the K samples
of a prompt, the steps of a conversation (each prompt extends the previous one) and prompts under one long
system prompt should land where that prefix was sent last, as long as that replica is not overloaded.

- **Keys.** A prompt's keys are chained hashes of its leading ids at lengths 64, 128, 256, ... up to 4,096
  (the last one: the whole prompt when shorter): two prompts share the keys of the lengths they share, so a
  conversation's steps share the keys of their common history and a prompt's K samples share all.
- **Recent placements.** A table (LRU, bounded) maps each key to the replica its latest request went to and
  to how many distinct prompts were seen under it. A request follows its whole key (another sample of its
  prompt) while that replica is in service and under `sticky_load_factor` x the mean load, or else its
  longest shorter key that at most `max_fanout` prompts share (an earlier step of its conversation), under
  the placement bound. A prefix that many prompts share (a category's system prompt) is not followed:
  following it would pile the whole category onto one replica, and the load bound would then split
  prompts' samples; the ring spreads such prompts, and each replica computes that prefix once.
- **Consistent hashing with bounded loads** (Mirrokni, Thorup and Zadimoghaddam, 2018) for the rest: the key
  of the first 1,024 ids picks a point on a ring of virtual nodes, and the first replica clockwise that is in
  service and whose load is under `load_factor` x the mean load takes it. Load is requests in flight plus
  requests waiting for that replica. A replica taken out (any availability predicate: the circuit breaker, a
  content breaker) simply is not in service, so its keys go to the next replica on the ring, and the bound
  keeps that one from taking more than its share; when it comes back, the ring gives it its keys again.
- A request sent elsewhere to keep slots busy (`EndpointPool`'s stealing) is `rehome`d: its prompt's other
  samples follow it.

The caller (`EndpointPool`) owns loads and availability; this module only chooses.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

BALANCE_POLICIES = ("prefix-affinity", "least-outstanding")  # how a run spreads requests over replica URLs
KEY_LENGTHS = (64, 128, 256, 512, 1024, 2048, 4096)
# The ring places a prompt by its first 1,024 ids (or all, when shorter): the steps of a conversation with a
# longer history share that key. Prompts that share only a shorter prefix (a system prompt) spread over the
# replicas; prompts sharing a longer one (long tool declarations) share a home and spill at the load bound.
RING_KEY_INDEX = KEY_LENGTHS.index(1024)


@dataclass(frozen=True)
class AffinityPolicy:
    load_factor: float = 1.25  # a new placement goes to a replica under this x the mean load
    sticky_load_factor: float = 3.0  # a request follows its prompt's placement while its replica is under this
    max_fanout: int = 8  # a shorter key is followed while at most this many prompts were seen under it
    virtual_nodes: int = 64  # points per replica on the ring
    table_size: int = 65_536  # recent placements kept (keys, LRU)

    def __post_init__(self) -> None:
        if not 1.0 <= self.load_factor <= self.sticky_load_factor:
            raise ValueError("affinity: need 1 <= load_factor <= sticky_load_factor")
        if self.virtual_nodes < 1 or self.table_size < 1:
            raise ValueError("affinity: virtual_nodes and table_size must be at least 1")


def prefix_keys(prompt_ids: Sequence[int]) -> list[int]:
    """Chained hashes of the prompt's leading ids at KEY_LENGTHS (shortest first; the whole prompt if shorter)."""
    keys, start, key = [], 0, 0
    for length in KEY_LENGTHS:
        end = min(length, len(prompt_ids))
        key = hash((key, tuple(prompt_ids[start:end])))
        keys.append(key)
        if end == len(prompt_ids):
            break
        start = end
    return keys


def prompt_groups(requests: list[T], prompt_ids: Callable[[T], Sequence[int]]) -> list[list[T]]:
    """The requests grouped by prompt (samples in their order), groups sorted by prompt ids, so that prompts
    sharing leading ids (a system prompt, a conversation's steps) are neighbours."""
    by_prompt: dict[int, list[T]] = {}
    for request in requests:
        by_prompt.setdefault(id(prompt_ids(request)), []).append(request)
    return sorted(by_prompt.values(), key=lambda group: prompt_ids(group[0]))


def spaced_samples(
    groups: Iterable[list[T]], spacing: int, prompt_ids: Callable[[T], Sequence[int]] | None = None
) -> Iterator[T]:
    """Each group's first request as it comes; its next one `spacing` requests after the previous one.

    Two samples of a prompt that start prefilling at the same moment both compute the whole prompt; the
    second one finds it cached only once the first one's prefill has run. With `spacing` at least the
    requests in flight (all endpoints' windows), no two samples of a prompt are ever sent together, not
    even in the first burst of a run, and the next one still comes while the prefix is cached. With
    `prompt_ids`, a group whose prompt extends the previous group's (the next step of a conversation, which
    `prompt_groups` puts right after it) is chained the same way: its first request comes `spacing` after
    the previous group's first one, once that prefix is cached. One queue: the order changes, nothing waits."""
    # heap of (due after this many sent, tie, group, index, the group's step state when index is 0)
    waiting: list[tuple[int, int, list[T], int, _Step | None]] = []
    sent = tie = 0

    def due(at: int, group: list[T], index: int, step: _Step | None = None) -> None:
        nonlocal tie
        tie += 1
        heapq.heappush(waiting, (at, tie, group, index, step))

    def sent_one(group: list[T], index: int, step: _Step | None) -> None:
        nonlocal sent
        sent += 1
        if index + 1 < len(group):
            due(sent + spacing, group, index + 1)
        if step is not None:
            step.first_sent = sent
            if step.follower is not None:  # the next step was waiting for this one
                due(sent + spacing, *step.follower)

    def send_due(drain: bool = False) -> Iterator[T]:
        while waiting and (drain or waiting[0][0] <= sent):
            _, _, g, i, step = heapq.heappop(waiting)
            yield g[i]
            sent_one(g, i, step)

    previous: tuple[Sequence[int], _Step] | None = None  # the previous group's prompt and step state
    for group in groups:
        yield from send_due()
        step = _Step()
        ids = prompt_ids(group[0]) if prompt_ids is not None else None
        if ids is not None and previous is not None and _extends(ids, previous[0]):
            before = previous[1]
            if before.first_sent is None:
                before.follower = (group, 0, step)  # due once the previous step's first request is sent
            else:
                due(before.first_sent + spacing, group, 0, step)
        else:
            yield group[0]
            sent_one(group, 0, step)
        previous = (ids, step) if ids is not None else None
    yield from send_due(drain=True)


class _Step:
    """A group's place in a chain of steps: when its first request went out, and the step due after it."""

    __slots__ = ("first_sent", "follower")

    def __init__(self) -> None:
        self.first_sent: int | None = None
        self.follower: tuple[list, int, _Step] | None = None


def _extends(ids: Sequence[int], earlier: Sequence[int]) -> bool:
    return len(earlier) < len(ids) and ids[: len(earlier)] == earlier


def _point(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class PrefixAffinity:
    def __init__(self, names: Sequence[str], policy: AffinityPolicy | None = None) -> None:
        self.policy = policy or AffinityPolicy()
        ring = sorted((_point(f"{name}#{v}"), name) for name in names for v in range(self.policy.virtual_nodes))
        self._points = [p for p, _ in ring]
        self._owners = [name for _, name in ring]
        self._names = list(dict.fromkeys(names))
        self._recent: OrderedDict[int, list] = OrderedDict()  # key -> [replica, prompts seen, requests placed]
        self.followed = self.placed = self.spilled = 0  # choices by kind, for the run's log

    def choose(self, keys: Sequence[int], load: Callable[[str], int], in_service: Callable[[str], bool]) -> str | None:
        """The replica for a request with these keys; None when no replica is in service."""
        names = [n for n in self._names if in_service(n)]
        if not names:
            return None
        mean = (sum(load(n) for n in names) + 1) / len(names)
        bound = math.ceil(self.policy.load_factor * mean)
        recent = self._recent
        for depth in range(len(keys), 0, -1):
            entry = recent.get(keys[depth - 1])
            if entry is None:
                continue
            name, fanout, _ = entry
            if depth == len(keys) or fanout <= self.policy.max_fanout:
                # another sample of this prompt, or an earlier step of its conversation: placed elsewhere it
                # would prefill all that again, so it follows up to the sticky bound
                limit = math.ceil(self.policy.sticky_load_factor * mean)
            else:  # a prefix many prompts share (a system prompt): the ring spreads them
                continue
            if in_service(name) and load(name) < limit:
                self.followed += 1
                return self._remember(keys, name)
            break
        ring_key = keys[min(len(keys), RING_KEY_INDEX + 1) - 1] if keys else 0
        start = bisect.bisect(self._points, ring_key & 0xFFFFFFFFFFFFFFFF)
        seen: set[str] = set()
        for i in range(len(self._owners)):
            name = self._owners[(start + i) % len(self._owners)]
            if name in seen:
                continue
            seen.add(name)
            if in_service(name) and load(name) < bound:
                if len(seen) > 1:
                    self.spilled += 1
                self.placed += 1
                return self._remember(keys, name)
        self.placed += 1  # every replica at the bound: the least loaded (cannot happen with a bound above the mean)
        return self._remember(keys, min(names, key=load))

    def free_to_move(self, keys: Sequence[int]) -> bool:
        """Sending this request elsewhere splits nothing: no other request of its prompt was placed, and no
        other prompt shares its leading ids closely (an earlier or later step of its conversation: up to
        `max_fanout` prompts under a key); a prefix that many prompts share is on every replica anyway."""
        if not keys:
            return True
        entry = self._recent.get(keys[-1])
        if entry is not None and entry[2] > 1:
            return False
        for key in keys[:-1]:
            entry = self._recent.get(key)
            if entry is not None and 1 < entry[1] <= self.policy.max_fanout:
                return False
        return True

    def rehome(self, keys: Sequence[int], name: str) -> None:
        """A request of these keys went to `name` after all (sent where slots were idle): follow it there."""
        self._remember(keys, name)

    def _remember(self, keys: Sequence[int], name: str) -> str:
        recent = self._recent
        new_prompt = keys[-1] not in recent
        for key in keys:
            entry = recent.get(key)
            if entry is None:
                recent[key] = [name, 1, 1]
            else:
                entry[0] = name
                entry[1] += new_prompt  # prompts seen under this prefix
                entry[2] += 1  # requests placed under it
                recent.move_to_end(key)
        while len(recent) > self.policy.table_size:
            recent.popitem(last=False)
        return name
