"""Publish a run: validate every sample, write data and quarantine shards, statistics, the draft
vocabulary and the report, and commit the manifest last.

Two steps, so that Airflow can map the first over shards on any worker:
- `publish_shard` validates one finished shard and commits `data/...` and `quarantine/...` with
  `put_once` (deterministic bytes: a rerun after a crash finds them already there and goes on);
- `finalize_run` reads what the shards committed, applies the run-level diagnosis (a run whose samples
  mostly lack `</think>` fails here, with the likely cause, and gets no manifest), derives statistics,
  draft vocabulary and report, and writes `manifests/run=<id>.json` last.
Publishing a run that already has a manifest is a no-op.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from eagle_datagen import settings
from eagle_datagen.errors import DataGenError
from eagle_datagen.generation.endpoint_journal import endpoint_report
from eagle_datagen.generation.plan import CategorySettings, RunPlan
from eagle_datagen.generation.shard_samples import ShardIncomplete as ShardIncomplete  # steps.py catches it here
from eagle_datagen.generation.shard_samples import shard_row_batches
from eagle_datagen.generation.shard_samples import shard_rows as shard_rows  # the whole shard, for tests
from eagle_datagen.heldout import HeldoutPolicy, heldout_rows
from eagle_datagen.inference.logprobs import columns as logprob_columns
from eagle_datagen.modes import MIX, sample_modes
from eagle_datagen.profile import ModelProfile
from eagle_datagen.stats.conversations import tool_loop_drift_warning
from eagle_datagen.stats.draft_vocab import build_draft_vocab
from eagle_datagen.stats.prompt_rejects import count_prompt_rejects
from eagle_datagen.stats.report import render_report, report_summary
from eagle_datagen.stats.statistics import TokenCounter, compute_statistics
from eagle_datagen.storage.local_copy import local_copy
from eagle_datagen.storage.manifest import (
    Manifest,
    ManifestFile,
    manifest_key,
    read_manifest,
    run_artifact_key,
    write_manifest,
)
from eagle_datagen.storage.objects import ObjectCollision, StoredObject, put_file_once, sha256_hex
from eagle_datagen.storage.output_root import OutputRoot
from eagle_datagen.storage.parquet import QUARANTINE_SCHEMA, SAMPLE_SCHEMA, shard_row_groups
from eagle_datagen.storage.staged_shard import StagedShard
from eagle_datagen.validation.diagnosis import DiagnosisThresholds, check_run
from eagle_datagen.validation.rules import ValidationLimits, reasoning_length, validate_sample

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PublishOptions:
    limits: ValidationLimits = field(default_factory=ValidationLimits)
    thresholds: DiagnosisThresholds = field(default_factory=DiagnosisThresholds)
    draft_vocab_size: int = settings.DRAFT_VOCAB_SIZE
    # True when the user asked for this K: a run with fewer distinct tokens then fails with a clear error.
    # False (the default K): such a run (a small nightly increment) is published without a vocabulary; the
    # release, over many runs, builds the one to train with.
    draft_vocab_required: bool = False
    front_end: str = "cli"  # messages name settings as this front end calls them (settings.named)


@dataclass
class PublishSummary:
    manifest: str
    already_published: bool
    data: int
    quarantine: int
    reasons: dict[str, int]
    files: int
    draft_vocab_size: int | None = None
    draft_vocab_coverage: float | None = None
    report: str | None = None
    ejected: list[str] = field(default_factory=list)  # endpoints the content breaker took out, with why


# the manifest's hedge counts per endpoint: of lost requests, of the drain (liveness.py), the copies aborted
HEDGE_COUNTS = ("hedges_sent", "hedges_won", "drain_hedges_sent", "drain_hedges_won", "aborted")


def data_key(run_id: str, category: str, shard: int) -> str:
    return f"data/category={category}/run={run_id}/part-{shard:05d}.parquet"


def quarantine_key(run_id: str, category: str, shard: int) -> str:
    return f"quarantine/category={category}/run={run_id}/part-{shard:05d}.parquet"


def rejects_key(run_id: str) -> str:
    return f"rejects/run={run_id}/rejects.jsonl"


def publish_shard(root: OutputRoot, plan: RunPlan, index: int, profile: ModelProfile, options: PublishOptions) -> int:
    """Validate one finished shard and commit its data and quarantine files; returns the rows written.

    Bounded memory at any shard size: the checkpoints are read a chunk at a time (generation/shard_samples.py),
    validated rows are staged on local disk and written row group by row group, in request order, to the bytes
    `encode_shard` gives the whole table (storage/staged_shard.py), and the files are uploaded a part at a time."""
    category = plan.shards[index].category
    with tempfile.TemporaryDirectory(prefix="eagle-datagen-publish-") as work:
        folder = Path(work)
        data, quarantine = StagedShard(folder), StagedShard(folder, quarantine=True)
        for batch in shard_row_batches(root, plan, index):
            valid: tuple[list[int], list[dict[str, Any]]] = ([], [])
            rejected: tuple[list[int], list[dict[str, Any]]] = ([], [])
            for place, row in batch:
                verdict = validate_sample(row, profile, options.limits)
                row["reasoning_tokens"] = reasoning_length(row["output_ids"], profile)
                row |= logprob_columns(row.get("logprobs"))  # soft targets, when asked: inference/logprobs.py
                if verdict is None:
                    valid[0].append(place)
                    valid[1].append({name: row.get(name) for name in SAMPLE_SCHEMA.names})
                else:
                    row["reject_reason"], row["reject_detail"] = verdict
                    rejected[0].append(place)
                    rejected[1].append({name: row.get(name) for name in QUARANTINE_SCHEMA.names})
            data.add(*valid)
            quarantine.add(*rejected)
        for staged, key in (
            (data, data_key(plan.run_id, category, index)),
            (quarantine, quarantine_key(plan.run_id, category, index)),
        ):
            if staged.rows:
                parquet = folder / f"{'quarantine' if staged.quarantine else 'data'}.parquet"
                staged.write_parquet(parquet)
                staged.staging.unlink()  # local disk: the Parquet file and the next staging, not both kinds
                try:
                    put_file_once(root, key, parquet)
                except ObjectCollision as exc:
                    raise exc.for_run(options.front_end) from None
                parquet.unlink()
    log.info("shard %d (%s): %d valid, %d quarantined", index, category, data.rows, quarantine.rows)
    return data.rows + quarantine.rows


def _committed_keys(root: OutputRoot, plan: RunPlan) -> set[str]:
    """The run's stored shard files: one listing per category and kind, not one per shard."""
    keys: set[str] = set()
    for category in {info.category for info in plan.shards}:
        for key in (data_key, quarantine_key):
            keys.update(root.list(key(plan.run_id, category, 0).rsplit("/", 1)[0] + "/"))
    return keys


def _shard_files(plan: RunPlan, committed: set[str]) -> list[tuple[str, str, str]]:
    """(kind, key, category) of the run's committed shard files, in plan order (data, then quarantine)."""
    files = []
    for info in plan.shards:
        for kind, key in (
            ("data", data_key(plan.run_id, info.category, info.index)),
            ("quarantine", quarantine_key(plan.run_id, info.category, info.index)),
        ):
            if key in committed:
                files.append((kind, key, info.category))
    return files


def _put_derived(root: OutputRoot, key: str, data: bytes) -> StoredObject:
    """Statistics, vocabulary and report are derived: rewritten on a rerun, trusted once the manifest lists
    their checksum."""
    root.write_bytes(key, data)
    return StoredObject(key, sha256_hex(data), len(data))


def published_summary(root: OutputRoot, run_id: str) -> PublishSummary | None:
    """The summary of a run that is already published, from its manifest alone (one read: no checkpoint, plan
    shard or data file); None when it has no manifest."""
    existing = read_manifest(root, run_id)
    if existing is None:
        return None
    counts = existing["counts"]
    return PublishSummary(
        manifest_key(run_id), True, counts["data"], counts["quarantine"], counts["reasons"], len(existing["files"])
    )


def finalize_run(root: OutputRoot, plan: RunPlan, profile: ModelProfile, options: PublishOptions) -> PublishSummary:
    existing = published_summary(root, plan.run_id)
    if existing is not None:
        return existing
    files: list[ManifestFile] = []
    reasons: Counter[str] = Counter()
    by_category: dict[str, Counter[str]] = {}
    heldout: dict[str, Counter[str]] = {}  # held-out rows (heldout.py) per category and kind
    tokens = TokenCounter(profile.vocab_size)
    committed = _committed_keys(root, plan)
    missing = [
        info.index
        for info in plan.shards
        if not any(key(plan.run_id, info.category, info.index) in committed for key in (data_key, quarantine_key))
    ]
    if missing:
        raise DataGenError(f"run {plan.run_id}: shards {missing[:10]} are not published yet: publish them first")
    shard_files = _shard_files(plan, committed)
    entries: dict[str, ManifestFile] = {}

    def tables(kind: str) -> Iterator[pa.Table]:
        """Each shard file of this kind once, a row group at a time (memory: one row group, not a shard)."""
        for file_kind, key, category in shard_files:
            if file_kind != kind:
                continue
            rows = 0
            with local_copy(root, key) as (path, sha256):
                for table in shard_row_groups(path):
                    rows += table.num_rows
                    if kind == "quarantine":
                        reasons.update(table.column("reject_reason").to_pylist())
                    if "heldout" in table.column_names:
                        heldout.setdefault(category, Counter())[kind] += pc.sum(table.column("heldout")).as_py() or 0
                    yield table
                stored = StoredObject(key, sha256, path.stat().st_size)
            entries[key] = ManifestFile.of(stored, kind, rows=rows, category=category)  # type: ignore[arg-type]

    policy = HeldoutPolicy.from_json(plan.heldout) if plan.heldout else None

    def trained(table: pa.Table) -> pa.Array | pa.ChunkedArray:
        """The rows the draft vocabulary counts: never a held-out one (heldout.py), whatever else reads them."""
        marks = table.column("heldout") if "heldout" in table.column_names else pa.nulls(table.num_rows, pa.bool_())
        if marks.null_count == 0:  # every row marked by its plan: no per-row work
            return pc.invert(marks)
        held = heldout_rows(marks.to_pylist(), table.column("prompt_id").to_pylist(), policy)
        return pa.array([not h for h in held])

    # one read of each file: the statistics, the token counts, the reasons and the manifest's checksums
    statistics = compute_statistics(tables("data"), tables("quarantine"), profile, counter=tokens, trained=trained)
    for _, key, _ in shard_files:
        entry = entries[key]
        files.append(entry)
        by_category.setdefault(entry.category or "?", Counter())[entry.kind] += entry.rows or 0
    total = sum(c["data"] + c["quarantine"] for c in by_category.values())
    by_mode = statistics["modes"]
    mode_totals = {mode: entry["samples"] for mode, entry in by_mode["all"].items()}
    check_run(dict(reasons), total, options.thresholds, profile, options.front_end, mode_totals)
    endpoints = endpoint_report(root, plan.run_id)
    rejects_payload = (
        root.read_bytes(rejects_key(plan.run_id))
        if rejects_key(plan.run_id) in root.list(rejects_key(plan.run_id))
        else None
    )
    statistics["prompt_rejects"] = count_prompt_rejects(rejects_payload or b"")
    drift = tool_loop_drift_warning(statistics.get("conversations"))
    if drift is not None:
        log.warning("run %s: %s", plan.run_id, drift)
    draft = None
    if tokens.distinct >= options.draft_vocab_size or options.draft_vocab_required:
        draft = build_draft_vocab(
            tokens.counts, options.draft_vocab_size, setting=settings.named("draft_vocab_size", options.front_end)
        )
    else:
        log.warning(
            "run %s: no draft vocabulary: %d distinct tokens, fewer than the default size %d (set %s to build a "
            "smaller one)",
            plan.run_id,
            tokens.distinct,
            options.draft_vocab_size,
            settings.named("draft_vocab_size", options.front_end),
        )
    meta = {
        "run id": plan.run_id,
        "model": plan.model,
        "profile": plan.profile,
        "weight version": (plan.provenance.get("servers") or [{}])[0].get("weight_version"),
        "sampling": {c: _sampling_entry(s) for c, s in plan.categories.items()},
        "draft vocabulary": f"{draft.k:,} tokens covering {draft.coverage:.1%} of trained tokens"
        if draft
        else f"not built: {tokens.distinct:,} distinct tokens < {options.draft_vocab_size:,}",
    }
    artifacts = [
        ("statistics", "statistics.json", json.dumps(statistics, indent=1).encode()),
        (
            "report",
            "report.html",
            render_report(statistics, tokens.counts, f"run {plan.run_id}", meta, endpoints).encode(),
        ),
        # kind statistics, not a kind of its own: readers of contract v1 refuse kinds they do not know
        ("statistics", "endpoints.json", json.dumps(endpoints, indent=1).encode()),
        ("summary", "summary.json", json.dumps(report_summary(statistics, tokens.counts, draft), indent=1).encode()),
    ]
    if draft is not None:
        artifacts.append(("draft_vocab", "draft_vocab.safetensors", draft.to_safetensors_bytes()))
    for kind, name, payload in artifacts:
        files.append(ManifestFile.of(_put_derived(root, run_artifact_key(plan.run_id, name), payload), kind))  # type: ignore[arg-type]
    if rejects_payload is not None:
        stored = StoredObject(rejects_key(plan.run_id), sha256_hex(rejects_payload), len(rejects_payload))
        files.append(ManifestFile.of(stored, "rejects", rows=rejects_payload.count(b"\n")))
    data_rows = sum(c["data"] for c in by_category.values())
    quarantine_rows = sum(c["quarantine"] for c in by_category.values())
    manifest = Manifest(
        run_id=plan.run_id,
        model=plan.model,
        profile=plan.profile,
        provenance=plan.provenance,
        sampling={
            c: {"sampling_params": s.sampling, "samples_per_prompt": s.samples_per_prompt} | _sampling_entry(s)
            for c, s in plan.categories.items()
        },
        counts={
            "samples": total,
            "data": data_rows,
            "quarantine": quarantine_rows,
            "reasons": dict(reasons),
            "by_category": {c: dict(v) for c, v in sorted(by_category.items())},
            # per mode (modes.py): samples, valid, quarantined, output tokens, reasons; per category too
            "modes": {mode: _mode_counts(entry) for mode, entry in by_mode["all"].items()},
            "by_category_mode": {
                c: {mode: _mode_counts(entry) for mode, entry in modes.items()}
                for c, modes in by_mode["categories"].items()
            },
            "trained_tokens": tokens.total,  # of the rows trained on: held-out rows left out, as the vocabulary does
            "endpoints": {
                url: {
                    "answers": e["answers"],
                    "valid": e["valid"],
                    "quarantined": e["quarantined"],
                    "server_faults_retried": e["server_faults"],
                    "lost_requests": e["liveness"].get("lost_detected", 0),
                    "hedges": {k: e["liveness"].get(k, 0) for k in HEDGE_COUNTS},
                    "watched_by": e["watched_by"],  # how lost requests were looked for (liveness.py)
                    "ejected": [{k: x[k] for k in ("reason", "kind", "answers", "by", "at")} for x in e["ejections"]],
                }
                for url, e in endpoints["endpoints"].items()
            },
        },
        files=files,
        heldout={
            "policy": plan.heldout,
            "in_draft_vocab": False,  # the run's draft vocabulary and trained_tokens count no held-out row
            "by_category": {
                c: {kind: heldout.get(c, Counter())[kind] for kind in ("data", "quarantine")}
                for c in sorted(by_category)
            },
        },
        validation={
            "max_rates": options.thresholds.rates(),
            "min_samples": options.thresholds.min_samples,
            "content_breaker": endpoints["policies"][-1] if endpoints["policies"] else None,
            "early_stops": len(endpoints["stops"]),
            "endpoints_left_out": [{"url": x["url"], "reason": x["reason"]} for x in endpoints["left_out"]],
            # how each endpoint's tokenizer was compared with the client's (the weakest over the run's preflights)
            "tokenizer_check": endpoints["tokenizer_check"],
            # the modes whose renderings every preflight compared (the run sends prompts in each)
            "tokenizer_check_modes": endpoints["tokenizer_check_modes"],
        },
    )
    try:
        write_manifest(root, manifest)
    except ObjectCollision as exc:
        raise exc.for_run(options.front_end) from None
    log.info(
        "run %s published: %d valid, %d quarantined; manifest %s",
        plan.run_id,
        data_rows,
        quarantine_rows,
        manifest_key(plan.run_id),
    )
    return PublishSummary(
        manifest_key(plan.run_id),
        False,
        data_rows,
        quarantine_rows,
        dict(reasons),
        len(files),
        draft.k if draft else None,
        draft.coverage if draft else None,
        run_artifact_key(plan.run_id, "report.html"),
        [
            f"{x['endpoint']} ({x['reason']}: {x['evidence']})"
            for e in endpoints["endpoints"].values()
            for x in e["ejections"]
        ],
    )


def _sampling_entry(settings: CategorySettings) -> dict[str, Any]:
    """A category's mode and, per mode it generates, its sampling (the manifest's and the report's)."""
    entry: dict[str, Any] = {"mode": settings.mode}
    if settings.mode == MIX:
        entry["instant_fraction"] = settings.instant_fraction
    entry["sampling_by_mode"] = {mode: settings.sampling_of(mode) for mode in sample_modes(settings.mode)}
    return entry


def _mode_counts(entry: dict[str, Any]) -> dict[str, Any]:
    """A mode's counts as the manifest keeps them (data and quarantine, as its other counts say)."""
    return {
        "samples": entry["samples"],
        "data": entry["valid"],
        "quarantine": entry["quarantined"],
        "trained_tokens": entry["output_tokens"],
        "reasons": entry["reject_reasons"],
    }


def publish_run(root: OutputRoot, plan: RunPlan, profile: ModelProfile, options: PublishOptions) -> PublishSummary:
    if read_manifest(root, plan.run_id) is None:
        for info in plan.shards:
            publish_shard(root, plan, info.index, profile, options)
    return finalize_run(root, plan, profile, options)
