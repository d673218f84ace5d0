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
        "spec_verify_ct, ...), and report per category the accept length (total output tokens / total verify "
        "steps, as drafter cards print it; also without the prefill token, and the mean over prompts) and accept "
        "rate with 95% intervals from a bootstrap over prompts, verify steps, the accepted-drafts histogram, output "
        "tokens/s and latency; with --compare-url or --baseline, the paired difference per category (an A/B that "
        "measured nothing on B's side, or no prompt on both, exits 1). Writes the results' JSON, one record per "
        "request and an HTML report (ROOT/evaluations/eval=<id>.*, or beside --to). An endpoint that is not "
        "speculative is refused before any request. docs/internals/evaluation.md.",
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
    value = None if not stat else stat.get("value", stat.get("mean"))
    if value is None:
        return "-"
    text = f"{value:+.3f}" if signed else f"{value:.3f}"
    ci = stat.get("ci95")
    return f"{text} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else text


def _row(name: str, block: dict[str, Any]) -> str:
    return (
        f"{name:<24} {block['prompts']:>8,} {block['failed']:>7,}  {_stat(block.get('accept_length_total')):<24} "
        f"{_stat(block.get('accept_length_no_prefill')):<24} {_stat(block['accept_length']):<24} "
        f"{_stat(block['accept_rate'])}"
    )


def format_evaluation(results: dict[str, Any], json_location: str, report_location: str) -> str:
    """The headline first (output tokens / verify steps, what drafter cards print), then the same without the
    prefill token, the mean over prompts of SGLang's per-request figure, and the accept rate; warnings last."""
    overall = results["overall"]
    lines = [
        f"evaluation {results['eval_id']}: {results['label']}: {overall['prompts']:,} prompts, "
        f"{overall['requests']:,} requests, {overall['failed']:,} failed, {overall['unmeasured']:,} unmeasured",
        f"{'category':<24} {'prompts':>8} {'failed':>7}  {'accept length [95%]':<24} {'without prefill':<24} "
        f"{'mean over prompts':<24} accept rate",
    ]
    blocks = [*results["categories"].items(), ("all", overall)]
    modes = results.get("modes") or {}
    if len(modes) > 1:  # thinking and instant prompts: each mode's own line
        blocks += [(f"all, {mode}", block) for mode, block in modes.items()]
    lines += [_row(name, block) for name, block in blocks]
    warnings = [
        f"{name}: {block['accept_length_total']['warning']}"
        for name, block in blocks
        if (block.get("accept_length_total") or {}).get("warning")
    ]
    comparison = results.get("comparison")
    if comparison:
        lines.append(f"A - B, B = {comparison['label']} ({comparison['source']}), paired by prompt:")
        for name, block in [*comparison["categories"].items(), ("all", comparison["overall"])]:
            lines.append(
                f"{name:<24} {block['paired_prompts']:>8,}          "
                f"{_stat(block.get('accept_length_total_diff'), True):<24} "
                f"{_stat(block.get('accept_length_no_prefill_diff'), True):<24} "
                f"{_stat(block['accept_length_diff'], True):<24} {_stat(block['accept_rate_diff'], True)}"
            )
            if block.get("warning"):
                warnings.append(f"A - B, {name}: {block['warning']}")
        warnings += [f"accepted difference: {d}" for d in comparison.get("accepted_differences") or []]
    lines += [f"warning: {w}" for w in warnings]
    lines.append(
        "accept length: output tokens / verify steps over the prompts (as drafter cards print it); 95% intervals "
        "by a bootstrap over prompts"
    )
    lines.append(f"results: {json_location}; report: {report_location}")
    return "\n".join(lines)
