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

from collections.abc import Callable, Sequence
from typing import TypeVar

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
