"""JSON read strictly: NaN and Infinity are not JSON, and an object with a key twice is ambiguous (parsers disagree
on which value wins). Used by the readers (sources/readers.py) and the formats (sources/formats.py) alike, so that
neither imports the other for it."""

from __future__ import annotations

import json
from typing import Any


class DuplicateKey(ValueError):
    """An object names a key twice."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):  # the rare case: find the key to name it
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(f"key {key!r} appears twice in one object")
            seen.add(key)
    return result


def _not_json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (JSON has no NaN or Infinity)")


def loads_strict(text: str) -> Any:
    """json.loads without NaN/Infinity and without duplicate keys."""
    return json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_not_json_constant)
