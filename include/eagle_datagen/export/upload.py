"""Exports stored under the output root, beside what they were made from: `exports/<kind>=<id>/<format>/`.

For the release DAG: the export is written to a local temporary folder (the writers stream to files),
then each file is committed write-once (`put_once`), so that a training job can copy the folder from the
object store. Each file is read whole to upload it; an export lives on one worker's disk meanwhile.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from eagle_datagen.errors import ConfigError
from eagle_datagen.export.stage import ExportOptions, run_export
from eagle_datagen.sources.recipe import ALL_MIX
from eagle_datagen.storage.objects import ObjectCollision, put_once
from eagle_datagen.storage.output_root import OutputRoot


def export_prefix(options: ExportOptions) -> str:
    """`exports/<kind>=<id>/<format>/`; a named mix's under `exports/<kind>=<id>/mix=<name>/<format>/`."""
    kind, ident = ("release", options.release_id) if options.release_id else ("run", options.run_id)
    mix = f"mix={options.mix.name}/" if options.mix.name and options.mix.name != ALL_MIX else ""
    return f"exports/{kind}={ident}/{mix}{options.format}/"


def export_into_root(root: OutputRoot, options: ExportOptions) -> dict[str, Any]:
    """Export (options.to is ignored) and commit the files under export_prefix; returns what was stored."""
    return export_to_store(root, options, root, export_prefix(options))


def export_to_store(
    source: OutputRoot, options: ExportOptions, target: OutputRoot, prefix: str, jsonl_name: str = "train.jsonl"
) -> dict[str, Any]:
    """Export what `source` holds (options.to is ignored) and commit each file write-once under `prefix` of
    `target` (the jsonl file as `jsonl_name`): a rerun of the same export stores nothing new, a different one
    under the same prefix is refused (`ObjectCollision`). Returns what was stored."""
    with tempfile.TemporaryDirectory(prefix="eagle-datagen-export-") as tmp:
        local = Path(tmp) / (jsonl_name if options.format == "jsonl" else options.format)
        location = target.location(prefix + local.name if options.format == "jsonl" else prefix.rstrip("/"))
        summary = run_export(source, replace(options, to=str(local), location=location))
        folder = local.parent if options.format == "jsonl" else local
        stored = []
        for path in sorted(p for p in folder.iterdir() if p.is_file()):
            try:
                stored.append(put_once(target, prefix + path.name, path.read_bytes()).key)
            except ObjectCollision:
                raise ObjectCollision(
                    f"{target.location(prefix + path.name)} already holds another export's file: exports are "
                    "written once; export to a new name"
                ) from None
    return {"format": options.format, "location": location, "rows": summary.rows, "files": stored}


def split_store_uri(uri: str, fmt: str) -> tuple[str, str, str]:
    """`--to s3://bucket/path/name` as (root URI, prefix, jsonl file name): a jsonl export is the object
    `name` under `s3://bucket/path`, a folder export the objects under `name/` there."""
    base, _, name = uri.rstrip("/").rpartition("/")
    if not name or base in ("s3:", "s3:/"):
        raise ConfigError(f"--to {uri}: give the export a name under the bucket, e.g. s3://bucket/exports/run-1")
    if fmt == "jsonl":
        return base, "", name
    return base, name + "/", "train.jsonl"
