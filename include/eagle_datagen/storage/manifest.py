"""Run manifests: the list of a run's committed files, written last. Readers trust only what one lists.

`manifests/run=<id>.json` holds every file's key, kind, category, sha256, size and row count, the run's
counts, and its provenance (model, profile, tokenizer and chat-template hashes, server model path,
weight version and SGLang version, sampling per category). It is committed with `put_once` after every
file it lists is stored and verified, so a manifest on storage means a complete run.

Readers parse a manifest with `parse_manifest`, which checks its shape (a damaged, truncated or foreign
file is a `ManifestError` that names the file and what is wrong, never a KeyError from deep inside), and
keeps a listed key from reaching outside the output root.
"""

from __future__ import annotations

import json
import re
from collections.abc import Container
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from eagle_datagen.errors import DataGenError
from eagle_datagen.storage.objects import StoredObject, put_once, sha256_hex
from eagle_datagen.storage.output_root import OutputRoot, UnsafeKey, check_key

CONTRACT_VERSION = 1
CONTRACT_MINOR = 1  # v1.1 added the mode (counts.modes); readers check only the major version
FileKind = Literal["data", "quarantine", "rejects", "statistics", "draft_vocab", "report", "summary"]
FILE_KINDS = frozenset(get_args(FileKind))
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ManifestError(DataGenError):
    """A manifest on storage that is not one eagle-datagen wrote: damaged, truncated or of another format."""


def manifest_key(run_id: str) -> str:
    return f"manifests/run={run_id}.json"


def run_artifact_key(run_id: str, name: str) -> str:
    """Files that travel with the manifest: statistics, draft vocabulary, report."""
    return f"manifests/run={run_id}.{name}"


@dataclass(frozen=True)
class ManifestFile:
    key: str
    kind: FileKind
    sha256: str
    size: int
    rows: int | None = None
    category: str | None = None

    @classmethod
    def of(cls, stored: StoredObject, kind: FileKind, rows: int | None = None, category: str | None = None):
        return cls(stored.key, kind, stored.sha256, stored.size, rows, category)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class Manifest:
    run_id: str
    model: str
    profile: str
    provenance: dict[str, Any]
    sampling: dict[str, Any]  # per category: sampling_params and samples_per_prompt
    counts: dict[str, Any]
    files: list[ManifestFile] = field(default_factory=list)
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    validation: dict[str, Any] = field(default_factory=dict)  # the thresholds and breaker settings used
    # the output root's held-out policy (heldout.py) and the held-out rows per category and kind
    heldout: dict[str, Any] = field(default_factory=dict)

    @property
    def weight_version(self) -> str | None:
        servers = self.provenance.get("servers") or [{}]
        return servers[0].get("weight_version")

    def to_json(self) -> dict[str, Any]:
        return {
            "contract": CONTRACT_VERSION,
            "contract_minor": CONTRACT_MINOR,
            "run_id": self.run_id,
            "created_at": self.created_at,
            "model": self.model,
            "profile": self.profile,
            "weight_version": self.weight_version,
            "provenance": self.provenance,
            "sampling": self.sampling,
            "counts": self.counts,
            "validation": self.validation,
            "heldout": self.heldout,
            "files": [f.to_json() for f in self.files],
        }


def write_manifest(root: OutputRoot, manifest: Manifest) -> StoredObject:
    data = json.dumps(manifest.to_json(), indent=1, sort_keys=False).encode()
    return put_once(root, manifest_key(manifest.run_id), data)


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _manifest_problem(raw: Any) -> str | None:
    """What is wrong with a parsed manifest, or None."""
    if not isinstance(raw, dict):
        return f"it is a JSON {type(raw).__name__}, not an object"
    if raw.get("contract") != CONTRACT_VERSION or type(raw.get("contract")) is not int:
        return f"contract is {raw.get('contract')!r}; this eagle-datagen reads contract {CONTRACT_VERSION}"
    for name in ("run_id", "model", "profile", "created_at"):
        if not isinstance(raw.get(name), str) or not raw[name]:
            return f"{name} must be a non-empty string"
    if raw.get("weight_version") is not None and not isinstance(raw["weight_version"], str):
        return "weight_version must be a string or null"
    for name in ("provenance", "sampling", "counts"):
        if not isinstance(raw.get(name), dict):
            return f"{name} must be an object"
    counts = raw["counts"]
    for name in ("samples", "data", "quarantine"):
        if not _is_count(counts.get(name)):
            return f"counts.{name} must be a non-negative integer"
    if not isinstance(counts.get("reasons"), dict):
        return "counts.reasons must be an object"
    if not isinstance(raw.get("files"), list):
        return "files must be a list"
    for i, entry in enumerate(raw["files"]):
        where = f"files[{i}]"
        if not isinstance(entry, dict):
            return f"{where} must be an object"
        if not isinstance(entry.get("key"), str):
            return f"{where}.key must be a string"
        try:
            check_key(entry["key"])
        except UnsafeKey:
            return f"{where}.key {entry['key'][:120]!r} points outside the output root"
        if not isinstance(entry.get("kind"), str) or entry["kind"] not in FILE_KINDS:
            return f"{where}.kind {str(entry.get('kind'))[:40]!r} is not one of {sorted(FILE_KINDS)}"
        if not isinstance(entry.get("sha256"), str) or not _SHA256.fullmatch(entry["sha256"]):
            return f"{where}.sha256 must be 64 lowercase hex digits"
        if not _is_count(entry.get("size")):
            return f"{where}.size must be a non-negative integer"
        if entry.get("rows") is not None and not _is_count(entry["rows"]):
            return f"{where}.rows must be a non-negative integer"
        if entry.get("category") is not None and not isinstance(entry["category"], str):
            return f"{where}.category must be a string"
    return None


def parse_manifest(data: bytes, where: str, run_id: str | None = None) -> dict[str, Any]:
    """A manifest's JSON, checked; `ManifestError` (one line: which file, what is wrong) otherwise."""
    try:
        raw = json.loads(data.decode("utf-8"))
        problem = _manifest_problem(raw)
    except UnicodeDecodeError as exc:
        problem = f"it is not UTF-8 text ({exc.reason} at byte {exc.start})"
    except RecursionError:
        problem = "it is nested too deeply to be a manifest"
    except ValueError as exc:
        problem = f"it is not valid JSON, perhaps truncated ({exc})"
    if problem is None and run_id is not None and raw["run_id"] != run_id:
        problem = f"it names run {raw['run_id'][:140]!r}, not {run_id!r}"
    if problem is not None:
        raise ManifestError(
            f"manifest {where} is damaged or not an eagle-datagen manifest: {problem}; restore it from a backup, or "
            "move it away to make the run unpublished (a rerun with the same run id then publishes it again)"
        )
    return raw


def read_manifest(root: OutputRoot, run_id: str) -> dict[str, Any] | None:
    key = manifest_key(run_id)
    if key not in root.list(f"manifests/run={run_id}"):
        return None
    return parse_manifest(root.read_bytes(key), root.location(key), run_id)


def manifest_run_ids(root: OutputRoot) -> list[str]:
    """The run ids of every manifest under the root (the `.json` files only, not their artifacts)."""
    keys = [k for k in root.list("manifests/") if k.startswith("manifests/run=") and k.endswith(".json")]
    # manifests/run=<id>.json; artifacts have a second dot
    return [k.removeprefix("manifests/run=").removesuffix(".json") for k in sorted(keys) if k.count(".") == 1]


def list_manifests(root: OutputRoot, skip: Container[str] = ()) -> list[dict[str, Any]]:
    """Every run manifest under the root, but those of the runs in `skip` (already read)."""
    manifests = []
    for run_id in manifest_run_ids(root):
        if run_id not in skip:
            key = manifest_key(run_id)
            manifests.append(parse_manifest(root.read_bytes(key), root.location(key), run_id))
    return manifests


def verify_manifest(root: OutputRoot, manifest: dict[str, Any]) -> list[str]:
    """Problems between a manifest and the store (empty: every listed file is there, byte for byte)."""
    problems = []
    for entry in manifest["files"]:
        try:
            data = root.read_bytes(entry["key"])
        except Exception as exc:  # missing or unreadable: report, do not stop the check
            problems.append(f"{entry['key']}: cannot read ({type(exc).__name__})")
            continue
        if len(data) != entry["size"] or sha256_hex(data) != entry["sha256"]:
            problems.append(f"{entry['key']}: size or sha256 differs from the manifest")
    return problems
