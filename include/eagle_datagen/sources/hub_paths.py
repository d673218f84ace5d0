"""`hf://datasets/OWNER/NAME` paths of Hugging Face hub datasets, with `?config=C&split=S` (the command line's
way to give them). Plain string work: the recipe imports this at DAG parse time."""

from __future__ import annotations

import re
from typing import Any

HUB_PREFIX = "hf://"
HUB_PATTERN = re.compile(r"^hf://datasets/([A-Za-z0-9][\w.-]*)/([A-Za-z0-9][\w.-]*)/?$")


def split_query(value: dict[str, Any]) -> dict[str, Any]:
    """`value` with the split and config of `value["path"]`'s query moved to their own keys. Raises ValueError
    for anything else after the `?`."""
    path = value.get("path")
    if not isinstance(path, str) or not path.startswith(HUB_PREFIX) or "?" not in path:
        return value
    path, _, query = path.partition("?")
    value = dict(value, path=path)
    for part in query.split("&"):
        key, _, item = part.partition("=")
        if key not in ("split", "config") or not item:
            raise ValueError(f"bad query {part!r} in {path}: only split=NAME and config=NAME")
        if value.get(key) not in (None, item):
            raise ValueError(f"{key} is given twice for {path}")
        value[key] = item
    return value
