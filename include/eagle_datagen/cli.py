"""The `eagle-datagen` command line.

Expected failures (bad flags, a missing source, a tokenizer that does not fit the profile, too many
rejected records) print one line on stderr and exit 1; usage errors exit 2, as argparse does.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from eagle_datagen.conversation import TURNS
from eagle_datagen.errors import DataGenError
from eagle_datagen.inference.affinity import BALANCE_POLICIES
from eagle_datagen.sources.formats import FORMAT_NAMES, HISTORY_POLICIES

if TYPE_CHECKING:
    from eagle_datagen.tokenization.stage import TokenizeOptions

EPILOG = """\
SRC is a file (.jsonl, .jsonl.gz, .parquet, .csv), a folder, a quoted glob or an s3:// URI (a key, a prefix
or a glob), or a Hugging Face dataset: a save_to_disk folder, a folder of Parquet or Arrow files in a dataset's
layout, or hf://datasets/OWNER/NAME[?config=C&split=S] (offline: from the local cache). Records may be
messages, ShareGPT, Alpaca or prompt-column records (docs/prompt-sources.md). S3 endpoint and credentials
come from the standard AWS environment variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
TOK is a tokenizer directory, a hub id, or standin:kimi-k2.5 for the stand-in tokenizer the project builds
itself (tests and the demo use it).
"""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive integer")
    return value


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):  # float() takes "nan" and "inf"; neither is a setting
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _positive_float(text: str) -> float:
    if (value := _float(text)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def _non_negative_float(text: str) -> float:
    if (value := _float(text)) < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def _probability(text: str) -> float:
    if not 0 < (value := _float(text)) <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in (0, 1]")
    return value


def _rate(text: str) -> float:
    value = _float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 1 (a fraction, e.g. 0.05)")
    return value


def _max_rate(text: str) -> tuple[str, float]:
    from eagle_datagen.validation.diagnosis import parse_rates

    reason, sep, rate = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not REASON=RATE (e.g. prompt_echo=0.05)")
    try:
        return next(iter(parse_rates({reason.strip(): _rate(rate)}, f"--max-rate {text}").items()))
    except DataGenError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _top_k(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1 and value != -1:
        raise argparse.ArgumentTypeError(f"{text!r} must be -1 (off) or at least 1")
    return value


def _source_spec(text: str) -> str:
    if not text.strip() or "\x00" in text:  # an empty spec would name the current folder
        raise argparse.ArgumentTypeError(f"{text!r} names no prompt source: give a file, folder, glob or s3:// URI")
    return text


def _column_mapping(text: str) -> tuple[str, str]:
    from eagle_datagen.sources.formats import MAPPABLE_FIELDS

    name, _, column = text.partition("=")
    if name not in MAPPABLE_FIELDS or not column:
        raise argparse.ArgumentTypeError(f"{text!r}: give FIELD=COLUMN with FIELD one of {', '.join(MAPPABLE_FIELDS)}")
    return name, column


def _categories(text: str) -> list[str]:
    from eagle_datagen.records import CATEGORY_PATTERN

    names = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in names if not CATEGORY_PATTERN.fullmatch(c)]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"bad category list {text!r}: give lowercase names separated by commas")
    return names


def _add_source_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("prompt sources (give --recipe or --prompts)")
    group.add_argument(
        "--prompts",
        action="append",
        default=[],
        type=_source_spec,
        metavar="SRC",
        help="prompt records (data contract v1) to read; repeat for several sources. "
        "Each record must carry its own category.",
    )
    group.add_argument(
        "--prompts-format",
        choices=FORMAT_NAMES,
        metavar="FORMAT",
        help=f"format of every --prompts source: {', '.join(FORMAT_NAMES)} (default: detected per record; a recipe "
        "names format: per source). See docs/prompt-sources.md",
    )
    group.add_argument(
        "--prompts-column",
        action="append",
        type=_column_mapping,
        default=[],
        metavar="FIELD=COLUMN",
        help="read a format's FIELD (prompt, instruction, conversations, messages, id, category, system, ...) from "
        "the sources' COLUMN; repeatable",
    )
    group.add_argument(
        "--prompts-history",
        choices=HISTORY_POLICIES,
        help="earlier assistant replies of a conversation: keep them as history (default) or drop them and "
        "everything after the first user turn; trailing replies are always cut",
    )
    group.add_argument(
        "--recipe",
        metavar="FILE",
        help="recipe YAML mapping categories to sources, caps and sampling (see include/recipes/)",
    )
    group.add_argument("--categories", type=_categories, metavar="a,b", help="only these categories (default: all)")
    group.add_argument(
        "--limit",
        type=_positive_int,
        metavar="N",
        help="at most N prompts per category, sampled deterministically (default: no limit)",
    )
    group.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="seed of the sampling under caps and --limit (default: the recipe's, else 0)",
    )
    group.add_argument(
        "--max-reject-rate",
        type=_rate,
        metavar="R",
        help="fail when more than this fraction of records is rejected (default: the recipe's, else 0.05)",
    )
    group.add_argument(
        "--benchmark",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="reject prompts whose user text shares a long n-gram with an item of this benchmark set (a file, "
        "folder or dataset of prompts), or equals one, as benchmark_overlap; repeatable; 'humaneval' alone is "
        "the shipped HumanEval set (beside the recipe's decontamination.benchmarks)",
    )
    group.add_argument(
        "--benchmark-ngram",
        type=_positive_int,
        metavar="N",
        help="words per n-gram of the benchmark overlap check (default: the recipe's, else 13)",
    )
    group.add_argument(
        "--near-duplicate-threshold",
        type=_probability,
        metavar="T",
        help="reject prompts whose MinHash similarity to a prompt kept before them is at least T, as "
        "near_duplicate (default: the recipe's near_duplicates, else off; 0.7 is its default threshold)",
    )
    group.add_argument(
        "--max-record-bytes",
        type=_positive_int,
        default=1_000_000,
        metavar="N",
        help="reject records whose prompt JSON is larger than N bytes (default: 1000000)",
    )


def _add_tokenizer_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument(
        "--tokenizer",
        required=True,
        metavar="TOK",
        help="tokenizer directory or hub id of the target model, or standin:kimi-k2.5",
    )
    group.add_argument(
        "--profile",
        default="kimi-k2.5",
        metavar="NAME|FILE",
        help="model profile: a shipped name (kimi-k2.5, qwen3, deepseek-r1) or a YAML file (default: kimi-k2.5)",
    )
    group.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow the tokenizer to run its own Python code (needed by the real Kimi "
        "tokenizer; only for sources you trust)",
    )
    group.add_argument(
        "--allow-special-token-text",
        action="store_true",
        default=None,
        help="keep records whose text (a user typing <|im_end|> or <think>) would become special tokens the chat "
        "template did not place; by default they are rejected as special_token_text (default: the recipe's, "
        "else off)",
    )
    group.add_argument(
        "--max-prompt-tokens",
        type=_positive_int,
        metavar="N",
        help="reject prompts longer than N tokens (default: the recipe's, else 32768)",
    )


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
    _add_source_arguments(tokenize)
    _add_tokenizer_arguments(tokenize)
    out = tokenize.add_argument_group("output and speed")
    out.add_argument(
        "--output",
        required=True,
        metavar="DIR",
        help="output folder (or s3://bucket/prefix) for tokenized parts, rejects and the summary",
    )
    out.add_argument(
        "--processes",
        type=_positive_int,
        metavar="N",
        help="worker processes for tokenization (default: one per 2000 prompts, up to the CPU count)",
    )
    tokenize.set_defaults(handler=_tokenize)

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
    _add_source_arguments(run)
    _add_tokenizer_arguments(run)
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
        type=_positive_int,
        metavar="N",
        help="requests in flight per endpoint (default: 1.25 x the server's max_running_requests)",
    )
    servers.add_argument(
        "--balance",
        choices=BALANCE_POLICIES,
        default="prefix-affinity",
        help="how requests are spread over several --sglang-url replicas: prefix-affinity sends a prompt's "
        "samples and prompts sharing leading ids to one replica (bounded load), so its prefix cache serves "
        "them; least-outstanding ignores the prompt (default: prefix-affinity; one URL, such as a router: "
        "no effect)",
    )
    servers.add_argument(
        "--max-attempts",
        type=_positive_int,
        default=8,
        metavar="N",
        help="attempts per sample for transient failures (503, 429, 408, 5xx, aborts, disconnects, "
        "timeouts) before it is left for a rerun (default: 8)",
    )
    servers.add_argument(
        "--request-timeout",
        type=_positive_float,
        default=3600.0,
        metavar="S",
        help="seconds one /generate request may take (default: 3600)",
    )
    servers.add_argument(
        "--give-up-after",
        type=_positive_float,
        default=600.0,
        metavar="S",
        help="when every endpoint has been failing for S seconds, stop and leave the remaining samples for a "
        "rerun (default: 600)",
    )
    servers.add_argument(
        "--wait-ready",
        type=_non_negative_float,
        default=30.0,
        metavar="S",
        help="how long the preflight waits for a server that is still starting (default: 30)",
    )
    servers.add_argument(
        "--no-canary",
        action="store_true",
        help="skip the canary generation of the preflight (health, model and version are still checked)",
    )
    sampling = run.add_argument_group("sampling (override the recipe for every category)")
    sampling.add_argument(
        "--max-new-tokens",
        type=_positive_int,
        metavar="N",
        help="most tokens generated per sample (default: the recipe's, else 8192)",
    )
    sampling.add_argument(
        "--temperature",
        type=_non_negative_float,
        metavar="T",
        help="sampling temperature (default: the recipe's, else the profile's: 1.0 for Kimi)",
    )
    sampling.add_argument(
        "--top-p",
        type=_probability,
        metavar="P",
        help="nucleus sampling (default: the recipe's, else the profile's: 0.95 for Kimi)",
    )
    sampling.add_argument("--top-k", type=_top_k, metavar="K", help="top-k sampling, -1 for off (default: off)")
    sampling.add_argument(
        "--samples-per-prompt",
        type=_positive_int,
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
        type=_positive_float,
        metavar="S",
        help="with --incremental: the samples planned by another run under ROOT that has not published yet "
        "count as existing while that run wrote something in the last S seconds (default: 3600, longer than a "
        "live run stays silent); an older run's samples are generated again",
    )
    output.add_argument(
        "--shard-size", type=_positive_int, default=1000, metavar="N", help="prompts per shard (default: 1000)"
    )
    output.add_argument(
        "--checkpoint-every",
        type=_positive_int,
        default=64,
        metavar="N",
        help="write finished samples to ROOT/checkpoints when N are waiting (default: 64)",
    )
    output.add_argument(
        "--checkpoint-interval",
        type=_positive_float,
        default=2.0,
        metavar="S",
        help="... or when the oldest has waited S seconds (default: 2)",
    )
    output.add_argument(
        "--processes",
        type=_positive_int,
        metavar="N",
        help="worker processes for tokenization (default: one per 2000 prompts)",
    )
    publish = run.add_argument_group("validation and publishing")
    publish.add_argument(
        "--draft-vocab-size",
        type=_positive_int,
        metavar="K",
        help="tokens in the EAGLE-3 draft vocabulary (d2t/t2d) built from the run's trained tokens; fails when "
        "the run has fewer distinct tokens (default: 32000, skipped with a warning for such a run)",
    )
    publish.add_argument(
        "--max-reasoning-tokens",
        type=_positive_int,
        metavar="N",
        help="quarantine samples whose reasoning (before </think>) is longer than N tokens (default: no limit)",
    )
    publish.add_argument(
        "--max-rate",
        action="append",
        default=[],
        type=_max_rate,
        metavar="REASON=RATE",
        help="the highest acceptable share of samples with this reject reason (repeatable, e.g. "
        "prompt_echo=0.05); above it the run stops with its diagnosis, as soon as the answers show it. For a "
        "server fault (prompt_echo, completion_tokens_mismatch, prompt_tokens_mismatch, id_out_of_range) it is "
        "the share of an endpoint's last 50 answers above which the endpoint is taken out (at least 3 of "
        "them). Default: the recipe's max_rates, else validation/diagnosis.py's",
    )
    run.set_defaults(handler=_run)

    export = commands.add_parser(
        "export",
        help="write a published run or release in the format an EAGLE-3 trainer reads (jsonl, speculators, "
        "specforge, torchspec, hf)",
        description="Read the data files a run's manifest (or a release) lists, checksums checked, shard by shard, "
        "and write training rows: input_ids (prompt_ids + output_ids) and loss_mask (0 over the prompt, 1 over "
        "the output), in the format a trainer reads, with the draft vocabulary maps it needs, a sample_id index "
        "(sample_ids.txt), export_info.yaml and a README with the command that starts training. docs/training.md "
        "describes each format and trainer.",
    )
    which = export.add_mutually_exclusive_group(required=True)
    which.add_argument("--run-id", metavar="ID", help="the published run to export")
    which.add_argument("--release-id", metavar="ID", help="the release (releases/release=ID.json) to export")
    export.add_argument("--output", required=True, metavar="ROOT", help="the output root (folder or s3://)")
    from eagle_datagen.export import FORMATS

    export.add_argument(
        "--format",
        choices=FORMATS,
        default="jsonl",
        help="jsonl (a file: sample_id, category, input_ids, loss_mask per line; the default), speculators (the "
        "folder `speculators prepare-data` writes, with d2t-K.npy and t2d-K.npy), specforge (train.jsonl for "
        "data.prompts_path and vocab_mapping.pt), torchspec (train.parquet), hf (an HF Arrow dataset folder with "
        "every data-contract column)",
    )
    export.add_argument(
        "--to", required=True, metavar="PATH", help="file to write for jsonl (- for stdout), a new folder otherwise"
    )
    export.add_argument("--categories", type=_categories, metavar="a,b", help="only these categories (default: all)")
    export.add_argument(
        "--max-seq-len",
        type=_positive_int,
        metavar="N",
        help="cut rows to N tokens on the right, as the trainers do, and drop rows left without a supervised "
        "token (pass the trainer's own limit; default: no cut)",
    )
    export.add_argument(
        "--overlong",
        choices=("cut", "drop"),
        default="cut",
        help="with --max-seq-len: cut longer rows (default) or drop them whole, so that no response is trained "
        "half-way",
    )
    export.add_argument(
        "--shuffle-seed",
        type=int,
        metavar="N",
        help="shuffle the rows as `speculators prepare-data --seed N` does (its default seed is 0): the same "
        "order, row for row; default: the manifest's order",
    )
    export.add_argument(
        "--draft-vocab-size",
        type=_positive_int,
        metavar="K",
        help="build the draft vocabulary (d2t/t2d) of the K most frequent supervised tokens of the exported rows "
        "(default: the run's or release's own draft vocabulary)",
    )
    export.set_defaults(handler=_export)

    from eagle_datagen.standin.sglang.cli import add_serve_sim_arguments

    serve_sim = commands.add_parser(
        "serve-sim",
        help="run the stand-in SGLang server (real HTTP contract, throughput model, fault injection)",
        description="Serve SGLang's native HTTP API from a stand-in: deterministic Kimi-shaped outputs "
        "(reasoning, </think>, answer, <|im_end|>), a GPU-like throughput model (slots, queue, prefill and decode "
        "time) and injectable faults. Binds 127.0.0.1 unless --host says otherwise. For tests, the demo and "
        "benchmarks; not a model.",
    )
    add_serve_sim_arguments(serve_sim)
    serve_sim.set_defaults(handler=_serve_sim)

    standin = commands.add_parser(
        "build-standin-tokenizer",
        help="write the stand-in Kimi-K2.5 tokenizer to a folder",
        description="Build the project's stand-in for the Kimi-K2.5 tokenizer (real special ids and chat "
        "template shape, a small BPE) into DIR, loadable with transformers.AutoTokenizer.",
    )
    standin.add_argument("output", metavar="DIR", help="folder to write the tokenizer files into")
    standin.set_defaults(handler=_build_standin)
    return parser


def _tokenize_options(args: argparse.Namespace) -> TokenizeOptions:
    from eagle_datagen.tokenization.stage import TokenizeOptions

    return TokenizeOptions(
        output=args.output,
        tokenizer=args.tokenizer,
        prompts=args.prompts,
        recipe=args.recipe,
        profile=args.profile,
        categories=args.categories,
        limit=args.limit,
        max_prompt_tokens=args.max_prompt_tokens,
        max_reject_rate=args.max_reject_rate,
        max_record_bytes=args.max_record_bytes,
        seed=args.seed,
        processes=args.processes,
        trust_remote_code=args.trust_remote_code,
        allow_special_token_text=args.allow_special_token_text,
        prompts_format=args.prompts_format,
        prompts_columns=dict(args.prompts_column),
        prompts_history=args.prompts_history,
        benchmarks=args.benchmark,
        benchmark_ngram=args.benchmark_ngram,
        near_duplicate_threshold=args.near_duplicate_threshold,
    )


def _tokenize(args: argparse.Namespace) -> int:
    from eagle_datagen.tokenization.stage import run_tokenize

    summary = run_tokenize(_tokenize_options(args))
    print(format_tokenize_summary(summary.to_json()))
    return 0


def _run(args: argparse.Namespace) -> int:
    from eagle_datagen.generation.checkpoint import CheckpointPolicy
    from eagle_datagen.generation.claims import DEFAULT_CLAIM_TTL_S
    from eagle_datagen.generation.publish import PublishOptions
    from eagle_datagen.generation.stage import RunOptions, SamplingOverrides, run_generation
    from eagle_datagen.inference.endpoints import BreakerPolicy
    from eagle_datagen.inference.retry import RetryPolicy
    from eagle_datagen.validation.rules import ValidationLimits

    summary = run_generation(
        RunOptions(
            prompts=_tokenize_options(args),
            sglang_urls=args.sglang_url,
            run_id=args.run_id,
            model=args.model,
            allow_model_mismatch=args.allow_model_mismatch,
            sampling=SamplingOverrides(
                max_new_tokens=args.max_new_tokens,
                temperature=args.temperature,
                top_p=args.top_p,
                top_k=args.top_k,
                samples_per_prompt=args.samples_per_prompt,
                turns=args.turns,
            ),
            shard_size=args.shard_size,
            concurrency=args.concurrency,
            balance=args.balance,
            retry=RetryPolicy(max_attempts=args.max_attempts, request_timeout_s=args.request_timeout),
            breaker=BreakerPolicy(give_up_after_s=args.give_up_after),
            checkpoint=CheckpointPolicy(max_samples=args.checkpoint_every, max_age_s=args.checkpoint_interval),
            canary=not args.no_canary,
            incremental=args.incremental,
            per_weight_version=args.per_weight_version,
            claim_ttl_s=args.claim_ttl or DEFAULT_CLAIM_TTL_S,
            preflight_wait_s=args.wait_ready,
            max_rates=dict(args.max_rate),
            publish=PublishOptions(
                limits=ValidationLimits(max_reasoning_tokens=args.max_reasoning_tokens),
                draft_vocab_size=args.draft_vocab_size or 32000,
                draft_vocab_required=args.draft_vocab_size is not None,
            ),
        )
    )
    print(format_run_summary(summary.to_json()))
    return 0 if summary.pending == 0 else 3


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


def _export(args: argparse.Namespace) -> int:
    import shlex

    from eagle_datagen.export.rows import SeqLimit
    from eagle_datagen.export.stage import ExportOptions, run_export
    from eagle_datagen.generation.stage import check_run_id
    from eagle_datagen.storage.output_root import open_output_root

    check_run_id(args.run_id or args.release_id)
    options = ExportOptions(
        format=args.format,
        to=args.to,
        run_id=args.run_id,
        release_id=args.release_id,
        categories=args.categories,
        limit=SeqLimit(args.max_seq_len, args.overlong),
        shuffle_seed=args.shuffle_seed,
        draft_vocab_size=args.draft_vocab_size,
        command=shlex.join(["eagle-datagen", *sys.argv[1:]]) if sys.argv[1:2] == ["export"] else "",
    )
    try:
        summary = run_export(open_output_root(args.output), options)
    except BrokenPipeError:  # `--to - | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    what = f"run {args.run_id}" if args.run_id else f"release {args.release_id}"
    vocab = f", draft vocabulary of {summary.draft_vocab_k:,}" if summary.draft_vocab_k else ""
    print(f"exported {summary.rows:,} samples of {what} as {args.format} to {args.to}{vocab}", file=sys.stderr)
    return 0


def _serve_sim(args: argparse.Namespace) -> int:
    from eagle_datagen.standin.sglang.cli import serve_sim

    return serve_sim(args)


def _build_standin(args: argparse.Namespace) -> int:
    from eagle_datagen.standin.kimi_tokenizer import build_standin_kimi_tokenizer

    print(build_standin_kimi_tokenizer(args.output))
    return 0


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
        return 1
    except KeyboardInterrupt:
        print("eagle-datagen: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
