"""`eagle-datagen run`: source, tokenize and generate against SGLang's /generate, then validate and publish."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from eagle_datagen import settings
from eagle_datagen.cli.arguments import (
    EPILOG,
    add_source_arguments,
    add_tokenizer_arguments,
    max_rate,
    non_negative_float,
    positive_float,
    positive_int,
    probability,
    top_k,
)
from eagle_datagen.conversation import TURNS
from eagle_datagen.inference.affinity import BALANCE_POLICIES

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
    add_source_arguments(run)
    add_tokenizer_arguments(run)
    servers = run.add_argument_group("SGLang")
    servers.add_argument(
        "--sglang-url",
        action="append",
        default=[],
        required=True,
        metavar="URL",
        help="base URL of an SGLang server or router (http://host:30000); repeat for replicas",
    )
    servers.add_argument(
        "--model",
        metavar="NAME",
        help="the model the servers must serve (default: the profile's, e.g. moonshotai/Kimi-K2.5)",
    )
    servers.add_argument(
        "--allow-model-mismatch",
        action="store_true",
        help="go on when /get_model_info reports another model than --model",
    )
    servers.add_argument(
        "--concurrency",
        type=positive_int,
        metavar="N",
        help="requests in flight per endpoint (default: 1.25 x the server's max_running_requests)",
    )
    servers.add_argument(
        "--balance",
        choices=BALANCE_POLICIES,
        default=settings.BALANCE,
        help="how requests are spread over several --sglang-url replicas: prefix-affinity sends a prompt's "
        "samples and prompts sharing leading ids to one replica (bounded load), so its prefix cache serves "
        "them; least-outstanding ignores the prompt (default: prefix-affinity; one URL, such as a router: "
        "no effect)",
    )
    servers.add_argument(
        "--max-attempts",
        type=positive_int,
        default=settings.MAX_ATTEMPTS,
        metavar="N",
        help="attempts per sample for transient failures (503, 429, 408, 5xx, aborts, disconnects, "
        f"timeouts) before it is left for a rerun (default: {settings.MAX_ATTEMPTS})",
    )
    servers.add_argument(
        "--request-timeout",
        type=positive_float,
        default=settings.REQUEST_TIMEOUT_S,
        metavar="S",
        help=f"seconds one /generate request may take (default: {settings.REQUEST_TIMEOUT_S:g})",
    )
    servers.add_argument(
        "--lost-after",
        type=positive_float,
        default=settings.LOST_AFTER_S,
        metavar="S",
        help="when a server counts fewer requests (its /v1/loads) than the run has there for S seconds, the "
        "difference is lost: the oldest are sent again elsewhere, the first answer kept "
        f"(default: {settings.LOST_AFTER_S:g})",
    )
    servers.add_argument(
        "--give-up-after",
        type=positive_float,
        default=settings.GIVE_UP_AFTER_S,
        metavar="S",
        help="when every endpoint has been failing for S seconds, stop and leave the remaining samples for a "
        f"rerun (default: {settings.GIVE_UP_AFTER_S:g})",
    )
    servers.add_argument(
        "--wait-ready",
        type=non_negative_float,
        default=settings.WAIT_READY_S,
        metavar="S",
        help=f"how long the preflight waits for a server that is still starting (default: {settings.WAIT_READY_S:g})",
    )
    servers.add_argument(
        "--min-endpoints",
        type=positive_int,
        metavar="N",
        help="endpoints that must pass preflight; one that fails (unreachable, wrong model, a reasoning parser, "
        "the echo bug, watermarking) is left out with a warning, and the run stops only when fewer than N pass "
        f"(default: the recipe's min_endpoints, else {settings.MIN_ENDPOINTS})",
    )
    servers.add_argument(
        "--no-canary",
        action="store_true",
        help="skip the canary generation of the preflight (health, model and version are still checked)",
    )
    sampling = run.add_argument_group("sampling (override the recipe for every category)")
    sampling.add_argument(
        "--max-new-tokens",
        type=positive_int,
        metavar="N",
        help="most tokens generated per sample (default: the recipe's, else 8192)",
    )
    sampling.add_argument(
        "--temperature",
        type=non_negative_float,
        metavar="T",
        help="sampling temperature (default: the recipe's, else the profile's: 1.0 for Kimi)",
    )
    sampling.add_argument(
        "--top-p",
        type=probability,
        metavar="P",
        help="nucleus sampling (default: the recipe's, else the profile's: 0.95 for Kimi)",
    )
    sampling.add_argument("--top-k", type=top_k, metavar="K", help="top-k sampling, -1 for off (default: off)")
    sampling.add_argument(
        "--samples-per-prompt",
        type=positive_int,
        metavar="K",
        help="samples per prompt, each with its own seed (default: the recipe's, else 1)",
    )
    sampling.add_argument(
        "--turns",
        choices=TURNS,
        help="last: one sample per record (the last answer); each: one sample per assistant turn, generated "
        "on-policy with tool loops continued from recorded results (default: the recipe's, else last; "
        "docs/multi-turn.md)",
    )
    output = run.add_argument_group("output, shards and resume")
    output.add_argument(
        "--output", required=True, metavar="ROOT", help="output root: a local folder or s3://bucket/prefix"
    )
    output.add_argument(
        "--run-id", metavar="ID", help="name of the run (default: a new UTC timestamp id); reuse it to resume a run"
    )
    output.add_argument(
        "--incremental",
        action="store_true",
        help="generate only samples that no run under ROOT has yet (same prompt, sample index, model and "
        "sampling): the nightly refresh",
    )
    output.add_argument(
        "--per-weight-version",
        action="store_true",
        help="with --incremental: samples made with other weights do not count, so new weights regenerate",
    )
    output.add_argument(
        "--claim-ttl",
        type=positive_float,
        metavar="S",
        help="with --incremental: the samples planned by another run under ROOT that has not published yet "
        "count as existing while that run wrote something in the last S seconds (default: 3600, longer than a "
        "live run stays silent); an older run's samples are generated again",
    )
    output.add_argument(
        "--shard-size",
        type=positive_int,
        default=settings.SHARD_SIZE,
        metavar="N",
        help=f"prompts per shard (default: {settings.SHARD_SIZE})",
    )
    output.add_argument(
        "--checkpoint-every",
        type=positive_int,
        default=settings.CHECKPOINT_EVERY,
        metavar="N",
        help=f"write finished samples to ROOT/checkpoints when N are waiting (default: {settings.CHECKPOINT_EVERY})",
    )
    output.add_argument(
        "--checkpoint-interval",
        type=positive_float,
        default=settings.CHECKPOINT_INTERVAL_S,
        metavar="S",
        help=f"... or when the oldest has waited S seconds (default: {settings.CHECKPOINT_INTERVAL_S:g})",
    )
    output.add_argument(
        "--processes",
        type=positive_int,
        metavar="N",
        help="worker processes for tokenization (default: one per 2000 prompts)",
    )
    publish = run.add_argument_group("validation and publishing")
    publish.add_argument(
        "--draft-vocab-size",
        type=positive_int,
        metavar="K",
        help="tokens in the EAGLE-3 draft vocabulary (d2t/t2d) built from the run's trained tokens; fails when "
        "the run has fewer distinct tokens (default: 32000, skipped with a warning for such a run)",
    )
    publish.add_argument(
        "--max-reasoning-tokens",
        type=positive_int,
        metavar="N",
        help="quarantine samples whose reasoning (before </think>) is longer than N tokens (default: no limit)",
    )
    publish.add_argument(
        "--max-rate",
        action="append",
        default=[],
        type=max_rate,
        metavar="REASON=RATE",
        help="the highest acceptable share of samples with this reject reason (repeatable, e.g. "
        "prompt_echo=0.05); above it the run stops with its diagnosis, as soon as the answers show it. For a "
        "server fault (prompt_echo, completion_tokens_mismatch, prompt_tokens_mismatch, id_out_of_range) it is "
        "the share of an endpoint's last 50 answers above which the endpoint is taken out (at least 3 of "
        "them). Default: the recipe's max_rates, else validation/diagnosis.py's",
    )
    run.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from eagle_datagen.generation.steps import run_generation

    summary = run_generation(run_config(args).options())
    print(format_run_summary(summary.to_json()))
    return 0 if summary.pending == 0 else 3


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
    return "\n".join(lines)
