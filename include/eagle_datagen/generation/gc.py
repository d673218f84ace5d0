"""Garbage collection: the work files of published runs, which nothing reads again once a run's manifest is
written, removed from the output root.

Removed, for a run with a manifest: its checkpoint chunks and their indexes
(`checkpoints/run=<id>/shard=*/`: about 4.6 bytes per output token, more than the data itself), its plan's
shard files (`plans/run=<id>/shard-*.parquet`: the prompts' ids, which the data shards hold too) and its
processes' heartbeats (`claims/run=<id>.heartbeat.*`: one per process that worked for it, which every incremental
run's listing of `claims/` would otherwise read forever).

Kept, for a retry and an audit: the manifest and everything it lists (data, quarantine, statistics, report),
`plans/run=<id>/plan.json` (the run's settings and shard list: a rerun of the run id finds its plan, then its
manifest, and stops at once), the claim (`claims/run=<id>.parquet`: every sample id the run planned, to check that
each was published once), the endpoint journal (`checkpoints/run=<id>/endpoints/`: which replica was ejected
and why) and the prompt rejects. A run without a manifest (in flight, failed, or withdrawn) is never touched: its
checkpoints are what a resume continues from.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from eagle_datagen.generation.checkpoint import checkpoint_prefix
from eagle_datagen.generation.claims import heartbeat_key
from eagle_datagen.storage.manifest import manifest_run_ids
from eagle_datagen.storage.output_root import OutputRoot

log = logging.getLogger(__name__)


@dataclass
class GcSummary:
    runs: list[str] = field(default_factory=list)  # published runs looked at
    removed: int = 0  # objects removed (or that would be, with dry_run)
    bytes: int = 0  # their size, where the listing tells it (local roots)
    dry_run: bool = False


def work_files(root: OutputRoot, run_id: str) -> list[str]:
    """The keys gc removes for a published run: checkpoint chunks and indexes, plan shard files, heartbeats."""
    shards = checkpoint_prefix(run_id, 0).rsplit("shard=", 1)[0] + "shard="
    keys = [k for k in root.list(f"checkpoints/run={run_id}/") if k.startswith(shards)]
    keys += [k for k in root.list(f"plans/run={run_id}/") if k.rsplit("/", 1)[-1].startswith("shard-")]
    keys += root.list(heartbeat_key(run_id))
    return keys


def collect_garbage(root: OutputRoot, run_ids: list[str] | None = None, dry_run: bool = False) -> GcSummary:
    """Remove the work files of the published runs among `run_ids` (None: every published run)."""
    published = set(manifest_run_ids(root))
    chosen = sorted(published if run_ids is None else published & set(run_ids))
    summary = GcSummary(runs=chosen, dry_run=dry_run)
    for run_id in chosen:
        keys = work_files(root, run_id)
        sizes = _sizes(root, run_id)
        for key in keys:
            summary.bytes += sizes.get(key, 0)
            if not dry_run:
                root.delete(key)
        summary.removed += len(keys)
        if keys:
            log.info("run %s: %s %d work file(s)", run_id, "would remove" if dry_run else "removed", len(keys))
    return summary


def _sizes(root: OutputRoot, run_id: str) -> dict[str, int]:
    path = getattr(root, "path", None)
    if path is None:
        return {}
    sizes = {}
    for prefix in (f"checkpoints/run={run_id}/", f"plans/run={run_id}/"):
        for key in root.list(prefix):
            try:
                sizes[key] = (path / key).stat().st_size
            except OSError:
                pass
    return sizes
