"""`eagle-datagen run`: source, tokenize and generate against SGLang's /generate, then validate and publish."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from eagle_datagen import settings
from eagle_datagen.cli.arguments import EPILOG
from eagle_datagen.cli.flags import add_flags

if TYPE_CHECKING:
    from eagle_datagen.generation.steps import RunConfig


def add_parser(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "run",
        help="source, tokenize and generate against SGLang's /generate; resumable by --run-id",
        description="Source and tokenize prompts, check the SGLang servers (health, model, version, a canary "
        "generation), split the prompts into shards and generate every sample with SGLang's native /generate "
        "endpoint, token ids in and out. Finished samples are checkpointed under ROOT as they arrive; rerunning "
        "with the same --run-id continues where an interrupted run stopped. When every sample is done, each is "
        "validated at the token level into ROOT/data/ or ROOT/quarantine/ (category=<c>/run=<id>/part-NNNNN.parquet), "
        "then statistics, draft vocabulary, report and ROOT/manifests/run=<id>.json, written last.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # Every flag is built from its declaration in eagle_datagen/settings.py (cli/flags.py), in the table's order.
    groups = add_flags(run, *settings.RUN_FLAG_GROUPS)
    add_hand_written_flags(groups)
    run.set_defaults(handler=handle)


def add_hand_written_flags(groups: dict[str, argparse._ArgumentGroup]) -> None:
    """The one place for a flag written by hand: a setting declared with `cli` but without a `Flag` (none today).
    Add it to its group, e.g. `groups[settings.SGLANG].add_argument("--example", metavar="N", help="...")`; the
    per-setting tests still hold it to its declaration (flag name, attribute, default)."""


def handle(args: argparse.Namespace) -> int:
    """0 only when the run is published (or an incremental run found nothing new); 3, with one line on stderr
    saying what is missing, when it ended unpublished with nothing to fix (a rerun with its --run-id finishes it).
    Failures to fix raise DataGenError: 1 (cli.main)."""
    from eagle_datagen.generation.steps import run_generation

    config = run_config(args)
    try:
        summary = run_generation(config.options())
    except KeyboardInterrupt:
        print(
            f"eagle-datagen: interrupted: run {config.run_id} is not published; what was generated is checkpointed: "
            f"{settings.resume_hint('cli', config.run_id)} to continue",
            file=sys.stderr,
        )
        return 130
    print(format_run_summary(summary.to_json()))
    unfinished = summary.not_published()
    if unfinished is not None:
        print(f"eagle-datagen: {unfinished}", file=sys.stderr)
        return 3
    return 0


def run_config(args: argparse.Namespace) -> RunConfig:
    """The flags as a `generation.steps.RunConfig`, the settings carrier the Airflow steps take too, so that
    one `RunConfig.options()` builds the run's options for both front ends. The flags map to settings by the one
    declaration (settings.from_flags)."""
    from eagle_datagen.generation.stage import new_run_id
    from eagle_datagen.generation.steps import RunConfig

    values = settings.from_flags(vars(args))
    # an empty --run-id (an unset variable in a script) is refused, not replaced by a new run's id
    values.setdefault("run_id", new_run_id())
    # a vocabulary size the user asked for must be met; the default one is skipped for a run too small for it
    values["draft_vocab_required"] = args.draft_vocab_size is not None
    return RunConfig(**values, front_end="cli")


def format_run_summary(summary: dict) -> str:
    if summary.get("nothing_new"):  # an incremental run with every sample published: one line says so
        return summary["nothing_new"]
    finish = ", ".join(f"{kind} {n:,}" for kind, n in sorted(summary["finish"].items())) or "none"
    lines = [
        f"run {summary['run_id']}: {summary['samples']:,} samples in {summary['shards']} shard(s); "
        f"{summary['resumed']:,} resumed from checkpoints, {summary['generated']:,} generated now, "
        f"{summary['pending']:,} pending",
        f"finish reasons: {finish}",
        f"retries: {summary['retries']:,}; failed attempts: "
        + (", ".join(f"{k} {v:,}" for k, v in sorted(summary["failures"].items())) or "none"),
    ]
    published = summary["published"]
    if published:
        reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(published["reasons"].items())) or "none"
        lines.append(
            f"published: {published['data']:,} valid samples, {published['quarantine']:,} quarantined ({reasons}); "
            + ("already published before" if published["already_published"] else f"manifest {published['manifest']}")
        )
        for ejected in published.get("ejected") or []:
            lines.append(f"endpoint taken out during the run: {ejected}")
        if published["report"]:
            vocab = (
                f"draft vocabulary {published['draft_vocab_size']:,} tokens covering "
                f"{published['draft_vocab_coverage']:.1%}"
                if published["draft_vocab_size"]
                else "no draft vocabulary (too few distinct tokens for its size)"
            )
            lines.append(f"report: {summary['output'].rstrip('/')}/{published['report']}; {vocab}")
    elif summary.get("endpoints"):
        for counts in summary["endpoints"].values():
            if counts["ejected"]:
                lines.append(f"endpoint taken out during the run: {counts['ejected']}")
    lines.append(f"output: {summary['output']} in {summary['elapsed_s']:.1f}s")
    if summary["pending"]:
        lines.append(
            f"{summary['pending']:,} samples ran out of retries: rerun with --run-id {summary['run_id']} to finish them"
        )
    for shard in summary.get("incomplete") or []:
        lines.append(f"not published: {shard}")
    return "\n".join(lines)
