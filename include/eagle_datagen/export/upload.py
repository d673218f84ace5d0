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

from eagle_datagen.export.stage import ExportOptions, run_export
from eagle_datagen.storage.objects import put_once
from eagle_datagen.storage.output_root import OutputRoot


def export_prefix(options: ExportOptions) -> str:
    kind, ident = ("release", options.release_id) if options.release_id else ("run", options.run_id)
    return f"exports/{kind}={ident}/{options.format}/"


def export_into_root(root: OutputRoot, options: ExportOptions) -> dict[str, Any]:
    """Export (options.to is ignored) and commit the files under export_prefix; returns what was stored."""
    prefix = export_prefix(options)
    with tempfile.TemporaryDirectory(prefix="eagle-datagen-export-") as tmp:
        local = Path(tmp) / ("train.jsonl" if options.format == "jsonl" else options.format)
        location = root.location(prefix + local.name if options.format == "jsonl" else prefix.rstrip("/"))
        summary = run_export(root, replace(options, to=str(local), location=location))
        folder = local.parent if options.format == "jsonl" else local
        stored = []
        for path in sorted(p for p in folder.iterdir() if p.is_file()):
            stored.append(put_once(root, prefix + path.name, path.read_bytes()).key)
    return {"format": options.format, "location": location, "rows": summary.rows, "files": stored}
