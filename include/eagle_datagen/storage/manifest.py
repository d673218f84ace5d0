"""Run manifests: the list of a run's committed files, written last. Readers trust only what one lists.

`manifests/run=<id>.json` holds every file's key, kind, category, sha256, size and row count, the run's
counts, and its provenance (model, profile, tokenizer and chat-template hashes, server model path,
weight version and SGLang version, sampling per category). It is committed with `put_once` after every
file it lists is stored and verified, so a manifest on storage means a complete run.
"""

from __future__ import annotations

import json
from collections.abc import Container
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from eagle_datagen.storage.objects import StoredObject, put_once, sha256_hex
from eagle_datagen.storage.output_root import OutputRoot

CONTRACT_VERSION = 1
FileKind = Literal["data", "quarantine", "rejects", "statistics", "draft_vocab", "report", "summary"]


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

    @property
    def weight_version(self) -> str | None:
        servers = self.provenance.get("servers") or [{}]
        return servers[0].get("weight_version")

    def to_json(self) -> dict[str, Any]:
        return {
            "contract": CONTRACT_VERSION,
            "run_id": self.run_id,
            "created_at": self.created_at,
            "model": self.model,
            "profile": self.profile,
            "weight_version": self.weight_version,
            "provenance": self.provenance,
            "sampling": self.sampling,
            "counts": self.counts,
            "files": [f.to_json() for f in self.files],
        }


def write_manifest(root: OutputRoot, manifest: Manifest) -> StoredObject:
    data = json.dumps(manifest.to_json(), indent=1, sort_keys=False).encode()
    return put_once(root, manifest_key(manifest.run_id), data)


def read_manifest(root: OutputRoot, run_id: str) -> dict[str, Any] | None:
    if manifest_key(run_id) not in root.list(f"manifests/run={run_id}"):
        return None
    return json.loads(root.read_bytes(manifest_key(run_id)))


def manifest_run_ids(root: OutputRoot) -> list[str]:
    """The run ids of every manifest under the root (the `.json` files only, not their artifacts)."""
    keys = [k for k in root.list("manifests/") if k.startswith("manifests/run=") and k.endswith(".json")]
    # manifests/run=<id>.json; artifacts have a second dot
    return [k.removeprefix("manifests/run=").removesuffix(".json") for k in sorted(keys) if k.count(".") == 1]


def list_manifests(root: OutputRoot, skip: Container[str] = ()) -> list[dict[str, Any]]:
    """Every run manifest under the root, but those of the runs in `skip` (already read)."""
    return [json.loads(root.read_bytes(manifest_key(r))) for r in manifest_run_ids(root) if r not in skip]


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
