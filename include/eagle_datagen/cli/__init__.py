"""The `eagle-datagen` command line.

Exit status: 0 when the command's output is written (for `run`: the run is published, or an incremental run found
nothing new and says so); 1 for an expected failure to fix (bad flags, a missing source, a tokenizer that does not
fit the profile, too many rejected records, a failed diagnosis), with one line on stderr; 2 for a usage error, as
argparse does; 3 for a run that is not published yet with nothing to fix (samples out of retries, an incomplete
shard, samples held by another run in flight), with one line on stderr saying what is missing and how a rerun
finishes it; 130 when interrupted. `check` exits 1 when any item is refused.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from eagle_datagen.cli import check, convert_drafter, evaluate, export, gc, release, run, standin, tokenize
from eagle_datagen.cli.arguments import EPILOG
from eagle_datagen.cli.run import format_run_summary
from eagle_datagen.cli.tokenize import format_tokenize_summary
from eagle_datagen.errors import DataGenError

__all__ = ["build_parser", "format_run_summary", "format_tokenize_summary", "main", "one_line"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eagle-datagen",
        description="Token-exact EAGLE-3 drafter training data: prompts -> chat template -> SGLang /generate "
        "-> validated Parquet shards.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--log-level",
        default=os.environ.get("EAGLE_DATAGEN_LOG_LEVEL", "INFO"),  # a string default goes through type too
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging detail on stderr (default: INFO)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    tokenize.add_parser(commands)
    run.add_parser(commands)
    check.add_parser(commands)
    export.add_parser(commands)
    convert_drafter.add_parser(commands)
    evaluate.add_parser(commands)
    release.add_parser(commands)
    gc.add_parser(commands)
    standin.add_parsers(commands)
    return parser


def one_line(text: str) -> str:
    """The message with control characters escaped: a newline or NUL from a bad path stays visible, and the
    error stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    args = build_parser().parse_args(argv)
    from eagle_datagen.redaction import RedactingFormatter, redact

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=args.log_level, handlers=[handler])
    try:
        return args.handler(args)
    except DataGenError as exc:
        print(f"eagle-datagen: error: {one_line(redact(str(exc)))}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        print("eagle-datagen: interrupted", file=sys.stderr)
        return 130
