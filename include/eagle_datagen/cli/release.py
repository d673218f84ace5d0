"""`eagle-datagen release`: assemble the published runs under an output root into a release, as the release DAG
does (generation/release.py, the run's last step)."""

from __future__ import annotations

import argparse
import json

from eagle_datagen import settings
from eagle_datagen.cli.arguments import category_list, positive_int


def add_parser(commands: argparse._SubParsersAction) -> None:
    release = commands.add_parser(
        "release",
        help="assemble every category's published runs under ROOT into a release with one draft vocabulary",
        description="Take, per category, every published run under ROOT of the newest run's model and weight "
        "version, check each data file against its manifest, count each sample once (a newer run supersedes), "
        "build the draft vocabulary over the whole release and write releases/release=ID.json last, write-once "
        "(the release DAG's assemble_release task). `eagle-datagen export --release-id ID` reads it.",
    )
    release.add_argument("--output", required=True, metavar="ROOT", help="the output root (folder or s3://)")
    release.add_argument("--release-id", required=True, metavar="ID", help="the release's name")
    release.add_argument(
        "--categories",
        type=category_list,
        metavar="a,b",
        help="only these categories (default: every category with published data)",
    )
    release.add_argument(
        "--draft-vocab-size",
        type=positive_int,
        default=settings.DRAFT_VOCAB_SIZE,
        metavar="K",
        help=f"tokens in the release's draft vocabulary (default: {settings.DRAFT_VOCAB_SIZE})",
    )
    release.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from eagle_datagen.generation.release import assemble_release, published_categories
    from eagle_datagen.generation.stage import check_run_id
    from eagle_datagen.storage.output_root import open_output_root

    root = open_output_root(args.output)
    categories = args.categories or published_categories(root)
    release = assemble_release(
        root, check_run_id(args.release_id), categories, datetime.now(UTC).isoformat(), args.draft_vocab_size
    )
    print(json.dumps({"release_id": args.release_id, "categories": release["categories"], "counts": release["counts"]}))
    return 0
