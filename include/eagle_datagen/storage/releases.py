"""Releases: `releases/release=<id>.json`, every category's published data for one model and weight version.

The release DAG and `eagle-datagen release` assemble them (generation/release.py); readers such as the export need
only the key and a checked parse. A release lists, per category, the data files of its runs (newest run
first) with their sha256; a sample id seen in an earlier listed file supersedes later rows of that id.
"""

from __future__ import annotations

import json
from typing import Any

from eagle_datagen.errors import DataGenError
from eagle_datagen.storage.output_root import OutputRoot, UnsafeKey, check_key


def release_key(release_id: str, name: str = "json") -> str:
    return f"releases/release={release_id}.{name}"


def _release_problem(raw: Any) -> str | None:
    if not isinstance(raw, dict):
        return f"it is a JSON {type(raw).__name__}, not an object"
    for name in ("release_id", "model", "profile"):
        if not isinstance(raw.get(name), str) or not raw[name]:
            return f"{name} must be a non-empty string"
    if not isinstance(raw.get("categories"), dict):
        return "categories must be an object"
    for category, entry in raw["categories"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("files"), list):
            return f"categories.{category}.files must be a list"
        for i, f in enumerate(entry["files"]):
            if not isinstance(f, dict) or not all(isinstance(f.get(k), str) for k in ("key", "sha256", "run_id")):
                return f"categories.{category}.files[{i}] needs string key, sha256 and run_id"
            try:
                check_key(f["key"])
            except UnsafeKey:
                return f"categories.{category}.files[{i}].key points outside the output root"
    vocab = raw.get("draft_vocab")
    if vocab is not None and not (isinstance(vocab, dict) and isinstance(vocab.get("key"), str)):
        return "draft_vocab must be an object with a key"
    return None


def read_release(root: OutputRoot, release_id: str) -> dict[str, Any] | None:
    """The release's JSON, checked; None when there is no such release."""
    key = release_key(release_id)
    if key not in root.list(key):
        return None
    try:
        raw = json.loads(root.read_bytes(key).decode("utf-8"))
        problem = _release_problem(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        problem = f"it is not valid JSON ({exc})"
    if problem is None and raw["release_id"] != release_id:
        problem = f"it names release {raw['release_id'][:140]!r}, not {release_id!r}"
    if problem is not None:
        raise DataGenError(
            f"release {root.location(key)} is damaged or not an eagle-datagen release: {problem}; "
            "assemble the release again (trigger the release DAG)"
        )
    return raw
