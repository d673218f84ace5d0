"""`eagle-datagen tokenize`: read, validate, deduplicate and tokenize prompts."""

from __future__ import annotations

import argparse
import sys

from eagle_datagen import settings
from eagle_datagen.cli.arguments import EPILOG, positive_int, tokenize_options
from eagle_datagen.cli.flags import add_flags


def add_parser(commands: argparse._SubParsersAction) -> None:
    tokenize = commands.add_parser(
        "tokenize",
        help="read, validate, deduplicate and tokenize prompts with the model's chat template",
        description="Read prompt records, validate and deduplicate them, render them with the model's chat "
        "template and tokenize them. Writes DIR/tokenized/category=<c>/part-*.parquet "
        "(record_id, prompt_id, category, prompt_ids), DIR/rejects/rejects.jsonl (one reason per "
        "rejected record) and DIR/tokenized/_summary.json.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_flags(tokenize, settings.SOURCES, settings.MODEL)  # the prompt-source and model flags `run` has too
    out = tokenize.add_argument_group("output and speed")
    out.add_argument(
        "--output",
        required=True,
        metavar="DIR",
        help="output folder (or s3://bucket/prefix) for tokenized parts, rejects and the summary",
    )
    out.add_argument(
        "--processes",
        type=positive_int,
        metavar="N",
        help="worker processes for tokenization (default: one per 2000 prompts, up to the CPU count)",
    )
    tokenize.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from eagle_datagen.tokenization.stage import run_tokenize

    summary = run_tokenize(tokenize_options(args))
    print(format_tokenize_summary(summary.to_json()))
    if not summary.records_read:  # empty sources are no success (`run` refuses them too); rejects are output
        print(
            "eagle-datagen: error: the sources hold no prompt record: nothing tokenized; check the sources and "
            "--categories",
            file=sys.stderr,
        )
        return 1
    return 0


def format_tokenize_summary(summary: dict) -> str:
    lines = [
        f"tokenized {summary['prompts']:,} prompts from {summary['records_read']:,} records "
        f"({summary['rejected']:,} rejected, {summary['duplicates']:,} duplicates, "
        f"{summary.get('filtered', 0):,} filtered, {summary['capped']:,} over caps)",
        f"{'category':<16}{'prompts':>9}{'rejected':>10}{'median tokens':>15}{'max tokens':>12}",
    ]
    for name, c in summary["categories"].items():
        lines.append(
            f"{name:<16}{c['prompts']:>9,}{c['rejected']:>10,}{c['prompt_tokens_median']:>15,.0f}"
            f"{c['prompt_tokens_max']:>12,}"
        )
    for source, counts in summary.get("sources", {}).items():
        if counts["rejects"]:
            reasons = ", ".join(f"{reason} {n:,}" for reason, n in counts["rejects"].items())
            overlaps = ", ".join(f"{name} {n:,}" for name, n in counts["benchmark_overlaps"].items())
            lines.append(f"rejects of {source}: {reasons}" + (f" (benchmark overlaps: {overlaps})" if overlaps else ""))
    lines.append(f"output: {summary['output']} ({len(summary['files'])} parquet part(s))")
    if summary["rejects_file"]:
        lines.append(f"rejects: {summary['output'].rstrip('/')}/{summary['rejects_file']}")
    lines.append(f"chat template sha256: {summary['tokenizer']['chat_template_sha256']}")
    return "\n".join(lines)
