"""`eagle-datagen gc`: remove the checkpoints and plan shards of published runs (generation/gc.py)."""

from __future__ import annotations

import argparse
import json


def add_parser(commands: argparse._SubParsersAction) -> None:
    gc = commands.add_parser(
        "gc",
        help="remove the checkpoints and plan shards of published runs",
        description="Remove the work files of runs that have a manifest: checkpoint chunks and their indexes, "
        "the plan's shard files and the processes' heartbeats. Kept: the manifest and what it lists, plan.json, the "
        "claim (every planned sample id, for an audit), the endpoint journal and the rejects. Runs without a manifest "
        "are never touched.",
    )
    gc.add_argument("--output", required=True, metavar="ROOT", help="the output root (folder or s3://)")
    gc.add_argument("--run-id", action="append", metavar="ID", help="only this published run (repeatable)")
    gc.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    gc.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from eagle_datagen.generation.gc import collect_garbage
    from eagle_datagen.storage.output_root import open_output_root

    summary = collect_garbage(open_output_root(args.output), args.run_id, args.dry_run)
    print(json.dumps(asdict(summary)))
    return 0
