"""`eagle-datagen evaluate`: a drafter's acceptance per category on a speculative SGLang deployment."""

from __future__ import annotations

import argparse
from typing import Any

from eagle_datagen import settings
from eagle_datagen.cli.arguments import EPILOG
from eagle_datagen.cli.flags import add_flags

EVALUATE_GROUPS = (
    settings.EVAL_PROMPTS,
    settings.MODEL,
    settings.EVAL_DEPLOYMENT,
    settings.EVAL_COMPARISON,
    settings.SAMPLING_FLAGS,
    settings.EVAL_RESULTS,
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    evaluate = commands.add_parser(
        "evaluate",
        help="measure a drafter's acceptance per category on speculative SGLang endpoints (optionally against "
        "another drafter), on the held-out prompts of ROOT",
        description="Send a prompt set (by default the held-out prompts of --output's published runs, which no "
        "export holds) to a speculative SGLang deployment (--speculative-algorithm EAGLE3 ...) exactly as a run "
        "sends its samples, read each answer's speculative metrics (meta_info.spec_accept_length, spec_accept_rate, "
        "spec_verify_ct, ...), and report per category the mean accept length and accept rate with 95% intervals "
        "over prompts, verify steps, the accepted-drafts histogram, output tokens/s and latency; with --compare-url "
        "or --baseline, the paired difference per category. Writes the results' JSON, one record per request and an "
        "HTML report (ROOT/evaluations/eval=<id>.*, or beside --to). An endpoint that is not speculative is refused "
        "before any request. docs/evaluation.md.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # every flag is built from its declaration (settings.EVALUATE_SETTINGS: the run's shared ones and its own)
    add_flags(evaluate, *EVALUATE_GROUPS, table=settings.EVALUATE_SETTINGS)
    evaluate.set_defaults(handler=handle)


def evaluate_config(args: argparse.Namespace) -> Any:
    from eagle_datagen.evaluation.options import EvaluateConfig

    return EvaluateConfig(**settings.from_flags(vars(args), settings.EVALUATE_SETTINGS), front_end="cli")


def handle(args: argparse.Namespace) -> int:
    from eagle_datagen.evaluation.stage import evaluate_all

    summary = evaluate_all(evaluate_config(args))
    print(format_evaluation(summary["results"], summary["json"], summary["report"]))
    return 0


def _stat(stat: dict[str, Any] | None, signed: bool = False) -> str:
    if not stat or stat.get("mean") is None:
        return "-"
    mean = f"{stat['mean']:+.3f}" if signed else f"{stat['mean']:.3f}"
    ci = stat.get("ci95")
    return f"{mean} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else mean


def format_evaluation(results: dict[str, Any], json_location: str, report_location: str) -> str:
    overall = results["overall"]
    lines = [
        f"evaluation {results['eval_id']}: {results['label']}: {overall['prompts']:,} prompts, "
        f"{overall['requests']:,} requests, {overall['failed']:,} failed, {overall['unmeasured']:,} unmeasured",
        f"{'category':<24} {'prompts':>8} {'failed':>7}  {'accept length [95%]':<26} accept rate [95%]",
    ]
    for name, block in [*results["categories"].items(), ("all", overall)]:
        lines.append(
            f"{name:<24} {block['prompts']:>8,} {block['failed']:>7,}  {_stat(block['accept_length']):<26} "
            f"{_stat(block['accept_rate'])}"
        )
    modes = results.get("modes") or {}
    if len(modes) > 1:  # thinking and instant prompts: each mode's own line
        for mode, block in modes.items():
            lines.append(
                f"{'all, ' + mode:<24} {block['prompts']:>8,} {block['failed']:>7,}  "
                f"{_stat(block['accept_length']):<26} {_stat(block['accept_rate'])}"
            )
    comparison = results.get("comparison")
    if comparison:
        lines.append(f"A - B, B = {comparison['label']} ({comparison['source']}), paired by prompt:")
        for name, block in [*comparison["categories"].items(), ("all", comparison["overall"])]:
            lines.append(
                f"{name:<24} {block['paired_prompts']:>8,}          {_stat(block['accept_length_diff'], True):<26} "
                f"{_stat(block['accept_rate_diff'], True)}"
            )
    lines.append(f"results: {json_location}; report: {report_location}")
    return "\n".join(lines)
