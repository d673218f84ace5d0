"""An independent checker of one run's output: it reads only what the run stored (the plan, the manifest,
the data and quarantine Parquet files), with pyarrow and boto3, and nothing of the package.

What it checks, as a training job would rely on it:
- no loss: every planned sample (prompt_id, sample_index) is in data or quarantine (a permanent failure is
  a quarantine row with reason `request_error`);
- no duplicates: each planned sample and each sample_id appears once across data and quarantine;
- the manifest: every file it lists exists with its sha256, size and rows; no data or quarantine file of
  the run is stored outside it; its counts agree with the rows;
- every data row passes the token-level contract of Kimi-K2.5 (the ids are the contract's, written here
  again on purpose): the prompt ends in <think> 163606, the output holds exactly one </think> 163607, no
  <think>, a non-empty answer, and ends in its only <|im_end|> 163586; finish_reason stop; token counts match.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pyarrow.parquet as pq

THINK_START, THINK_END, EOS, VOCAB_SIZE = 163606, 163607, 163586, 163840


class Store:
    """A local folder or `s3://bucket/prefix`, read-only, addressed by keys relative to the root."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        if uri.startswith("s3://"):
            bucket, _, prefix = uri[len("s3://") :].partition("/")
            self.bucket, self.prefix = bucket, prefix.rstrip("/") + "/" if prefix else ""
            self.s3 = boto3.client("s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL"))
        else:
            self.path = Path(uri)
            self.s3 = None

    def keys(self, prefix: str) -> list[str]:
        if self.s3 is None:
            base = self.path / prefix
            found = base.rglob("*") if base.is_dir() else self.path.glob(prefix + "*")
            return sorted(p.relative_to(self.path).as_posix() for p in found if p.is_file())
        keys = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix + prefix):
            keys += [item["Key"][len(self.prefix) :] for item in page.get("Contents", [])]
        return sorted(keys)

    def read(self, key: str) -> bytes:
        if self.s3 is None:
            return (self.path / key).read_bytes()
        return self.s3.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"].read()


@dataclass
class RunCheck:
    run_id: str
    planned: int = 0
    manifest: dict[str, Any] | None = None
    data: list[dict[str, Any]] = field(default_factory=list)
    quarantine: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def reasons(self) -> Counter[str]:
        return Counter(r["reject_reason"] for r in self.quarantine)

    @property
    def permanently_failed(self) -> int:
        return sum(1 for r in self.quarantine if r["reject_reason"] == "request_error")

    def assert_ok(self) -> RunCheck:
        assert not self.problems, f"run {self.run_id}: " + "; ".join(self.problems[:20])
        return self


def contract_problem(row: dict[str, Any]) -> str | None:
    """Why a data row breaks the token-level contract, or None."""
    prompt, output = row["prompt_ids"], row["output_ids"]
    if not prompt or prompt[-1] != THINK_START:
        return "prompt does not end in <think> 163606"
    if output.count(THINK_END) != 1:
        return f"{output.count(THINK_END)} </think> in the output, not 1"
    if THINK_START in output:
        return "<think> in the output"
    if not output or output[-1] != EOS or output.count(EOS) != 1:
        return "output does not end in its only <|im_end|> 163586"
    if output.index(THINK_END) >= len(output) - 2:
        return "empty answer after </think>"
    if any(not 0 <= t < VOCAB_SIZE for t in prompt + output):
        return "token id out of range"
    if row["finish_reason"] != "stop":
        return f"finish_reason {row['finish_reason']}"
    if row["completion_tokens"] != len(output) or row["prompt_tokens"] != len(prompt):
        return "token counts differ from the ids"
    if row["reasoning_tokens"] != output.index(THINK_END):
        return "reasoning_tokens is not the position of </think>"
    return None


def _planned(store: Store, run_id: str) -> Counter[tuple[str, int]]:
    planned: Counter[tuple[str, int]] = Counter()
    for key in store.keys(f"plans/run={run_id}/"):
        if key.endswith(".parquet"):
            table = pq.read_table(io.BytesIO(store.read(key)), columns=["prompt_id", "sample_indices"])
            for row in table.to_pylist():
                planned.update((row["prompt_id"], k) for k in row["sample_indices"])
    return planned


def check_run(uri: str, run_id: str, expect_manifest: bool = True) -> RunCheck:
    store = Store(uri)
    check = RunCheck(run_id)
    problems = check.problems
    planned = _planned(store, run_id)
    check.planned = sum(planned.values())
    if not planned:
        problems.append("no plan stored")
    stored: dict[str, bytes] = {}
    for kind in ("data", "quarantine"):
        for key in store.keys(f"{kind}/"):
            if f"/run={run_id}/" in key and key.endswith(".parquet"):
                stored[key] = store.read(key)
                category = key.split("/")[1].removeprefix("category=")
                for row in pq.read_table(io.BytesIO(stored[key])).to_pylist():
                    (check.data if kind == "data" else check.quarantine).append(row)
                    if row["run_id"] != run_id or row["category"] != category:
                        problems.append(f"{key}: a row of run {row['run_id']}, category {row['category']}")
    rows = check.data + check.quarantine
    seen = Counter((r["prompt_id"], r["sample_index"]) for r in rows)
    if missing := set(planned) - set(seen):
        problems.append(f"{len(missing)} planned samples are neither in data nor in quarantine")
    if extra := set(seen) - set(planned):
        problems.append(f"{len(extra)} stored samples were never planned")
    if twice := [s for s, n in seen.items() if n > 1 or planned[s] > 1]:
        problems.append(f"{len(twice)} samples stored more than once")
    if len({r["sample_id"] for r in rows}) != len(rows):
        problems.append("duplicate sample_id values")
    for row in check.data:
        if (why := contract_problem(row)) is not None:
            problems.append(f"data row {row['sample_id']}: {why}")
    for row in check.quarantine:
        if not row["reject_reason"]:
            problems.append(f"quarantine row {row['sample_id']} without a reject_reason")
        elif row["reject_reason"] == "request_error" and not row["error"]:
            problems.append(f"quarantine row {row['sample_id']}: request_error without the error")

    manifest_key = f"manifests/run={run_id}.json"
    if manifest_key in store.keys(manifest_key):
        check.manifest = json.loads(store.read(manifest_key))
        _check_manifest(store, check, stored)
    elif expect_manifest:
        problems.append("no manifest")
    return check


def _check_manifest(store: Store, check: RunCheck, stored: dict[str, bytes]) -> None:
    manifest, problems = check.manifest, check.problems
    assert manifest is not None
    listed = {}
    for entry in manifest["files"]:
        try:
            data = stored.get(entry["key"]) or store.read(entry["key"])
        except Exception as exc:  # noqa: BLE001 - any failure to read is the finding
            problems.append(f"manifest lists {entry['key']}, which cannot be read ({type(exc).__name__})")
            continue
        if len(data) != entry["size"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
            problems.append(f"{entry['key']}: size or sha256 differs from the manifest")
        if entry["kind"] in ("data", "quarantine"):
            listed[entry["key"]] = entry
            if pq.read_metadata(io.BytesIO(data)).num_rows != entry.get("rows"):
                problems.append(f"{entry['key']}: row count differs from the manifest")
    if unlisted := sorted(set(stored) - set(listed)):
        problems.append(f"stored but not in the manifest: {unlisted[:5]}")
    counts = manifest["counts"]
    actual = {
        "samples": len(check.data) + len(check.quarantine),
        "data": len(check.data),
        "quarantine": len(check.quarantine),
        "reasons": dict(check.reasons),
    }
    for name, value in actual.items():
        if counts.get(name) != value:
            problems.append(f"manifest counts {name}={counts.get(name)!r}, the store holds {value!r}")
    if counts.get("samples") != check.planned:
        problems.append(f"manifest counts {counts.get('samples')} samples, the plan has {check.planned}")
