"""Hypothesis strategies shared by the fuzz tests: damage a known-good value in exactly one place."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st


def value_paths(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """The path (keys and indices) of every value nested in `value`, itself included as ()."""
    yield prefix
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        yield from value_paths(child, (*prefix, key))


@st.composite
def one_value_changed(draw: st.DrawFn, base: Any, values: st.SearchStrategy) -> Any:
    """A copy of `base` with one nested value replaced by one of `values`, or (in an object) removed."""
    result = copy.deepcopy(base)
    *parent_path, last = draw(st.sampled_from([p for p in value_paths(base) if p]))
    parent = result
    for key in parent_path:
        parent = parent[key]
    if isinstance(parent, dict) and draw(st.booleans()):
        del parent[last]
    else:
        parent[last] = draw(values)
    return result
