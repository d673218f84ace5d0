"""`eagle-datagen check`: the deployment checklist (generation/checklist.py) before a first night, one line per item."""

from __future__ import annotations

import argparse
import json

from eagle_datagen import settings
from eagle_datagen.cli.arguments import EPILOG
from eagle_datagen.cli.flags import add_flags


def add_parser(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "check",
        help="check a deployment end to end with the settings of `run` (endpoints, server arguments, tokenizer, "
        "output root, prompt sources); exit 0 only when nothing is refused",
        description="Check everything a run with these settings needs, without generating: the recipe; the "
        "tokenizer (loads, remote code allowed); every SGLang endpoint as a run's preflight checks it (reachable, the "
        "served model, the server arguments a run refuses or warns about, a canary generation, the tokenizer "
        "agreeing with the server's); the output root (a probe object checks/eagle-datagen-check-probe.json is "
        "written, read back and listed, and left there); each prompt source (found, its records counted). Prints "
        "one line per item: ok, warn or refused, with why and the fix. Exit status 0 when nothing is refused, 1 "
        "otherwise. The server arguments and why: docs/server-checklist.md.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # the settings of `run`, built from their declarations, so that `run` can be swapped for `check` in a command
    add_flags(check, *settings.RUN_FLAG_GROUPS)
    own = check.add_argument_group("check")
    own.add_argument("--json", action="store_true", help="print the lines as one JSON object instead of text")
    own.add_argument(
        "--no-count", action="store_true", help="find the prompt sources without reading them to count records"
    )
    check.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from eagle_datagen.cli.run import run_config
    from eagle_datagen.generation.checklist import refused, run_checklist

    lines = run_checklist(run_config(args).options(), count_records=not args.no_count)
    bad = refused(lines)
    if args.json:
        print(json.dumps({"ok": not bad, "lines": [line.to_json() for line in lines]}, indent=1))
    else:
        print("\n".join(line.text() for line in lines))
        warned = sum(line.verdict == "warn" for line in lines)
        print(f"{len(lines)} checks: {len(bad)} refused, {warned} warning(s)")
    return 1 if bad else 0
