"""`eagle-datagen serve-sim`: run the stand-in SGLang server in the foreground until Ctrl-C or SIGTERM.

Once listening it prints exactly one line to stdout, `serving SGLang stand-in on http://HOST:PORT`, so a
script (or a test) that passes `--port 0` can read the port it got.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import signal
import sys
from typing import Any

from eagle_datagen.standin.sglang.config import PROFILES, TOKENIZE_APIS, FaultRates, SimConfig
from eagle_datagen.standin.sglang.runner import start_sim_server
from eagle_datagen.standin.sglang.speculative import SpeculativeConfig

FAULT_FLAGS = {
    "error_503": "answer 503 'The request queue is full.' (SGLang's overload answer)",
    "error_429": "answer 429 'router queue is full', as the SGLang router does",
    "error_408": "answer 408 'Request timed out in router queue', as the SGLang router does",
    "abort": "answer HTTP 200 with finish_reason abort ('Abort before prefill') and no output",
    "drop": "close the connection without an answer (streams: after the first event)",
    "slow": "answer --slow-seconds late",
    "no_think_end": "leave </think> out of the output",
    "echo": "the SGLang 0.5.0-0.5.4 bug: output_ids start with 1-5 ids copied from the prompt's end",
    "strip_think": "remove <think>/</think> from output_ids, as a proxy or gateway that rewrites answers would",
    "lose": "accept the request and never answer it (the connection stays open, /health stays 200, /v1/loads "
    "does not count it), as when a request is lost inside a server",
    "prompt_tokens": "report a prompt_tokens that disagrees with the ids sent, as a server or proxy that "
    "re-tokenized the prompt with another tokenizer would",
    "logprobs_shape": "with return_logprob: output_top_logprobs one position short of output_ids",
    "think_in_instant": "answer an instant prompt (one ending in <think></think>) with reasoning and </think> "
    "anyway, as a model that ignores the template's switch would",
}


def _number(kind: type, minimum: float, text: str, strict: bool = False) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a{'n integer' if kind is int else ' number'}") from None
    if value < minimum or (strict and value == minimum):
        raise argparse.ArgumentTypeError(f"{text!r} must be {'greater than' if strict else 'at least'} {minimum}")
    return value


def _rate(text: str) -> float:
    value = _number(float, 0.0, text)
    if value > 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 1 (a probability per request, e.g. 0.05)")
    return value


def _port(text: str) -> int:
    value = int(_number(int, 0, text))
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0-65535)")
    return value


def _output_tokens(text: str) -> tuple[int, int]:
    low, sep, high = text.partition("-")
    try:
        bounds = (int(low), int(high) if sep else int(low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not MIN-MAX (e.g. 200-600)") from None
    if not 2 <= bounds[0] <= bounds[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: need 2 <= MIN <= MAX (room for </think> and EOS)")
    return bounds


def add_serve_sim_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `eagle-datagen serve-sim`."""
    d = SimConfig()
    non_negative = lambda text: _number(float, 0.0, text)  # noqa: E731
    positive = lambda text: _number(float, 0.0, text, strict=True)  # noqa: E731
    positive_int = lambda text: int(_number(int, 1, text))  # noqa: E731

    net = parser.add_argument_group("server")
    net.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    net.add_argument("--port", type=_port, default=30000, help="port to listen on; 0 picks a free one (default: 30000)")
    net.add_argument(
        "--startup-seconds",
        type=non_negative,
        default=d.startup_seconds,
        metavar="S",
        help="/health_generate answers 503 for S seconds after every (re)start (default: 0)",
    )
    net.add_argument(
        "--api-key",
        metavar="KEY",
        help="as SGLang's --api-key: every route but /health*, /ready* and /metrics answers 401 without "
        "'Authorization: Bearer KEY' (a test server's key: the flag shows in ps)",
    )
    net.add_argument("--tls-cert", metavar="PEM", help="serve https with this certificate (chain)")
    net.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert (default: in its file)")

    model = parser.add_argument_group("reported model")
    model.add_argument(
        "--model-path", default=d.model_path, metavar="PATH", help=f"model path to report (default: {d.model_path})"
    )
    model.add_argument(
        "--tokenizer-path",
        metavar="TOK",
        help="tokenizer directory (or standin:kimi-k2.5) to decode `text` with; without it `text` is empty",
    )
    model.add_argument(
        "--tool-calls",
        action="store_true",
        help="with --tokenizer-path: answer prompts that declare tools with Kimi-format tool calls, one "
        "declared tool after the other, then a plain answer (tool_calls.py)",
    )
    model.add_argument(
        "--tokenize-api",
        choices=TOKENIZE_APIS,
        default=d.tokenize_api,
        help="/v1/tokenize as served: messages (SGLang 0.5.23: a prompt or chat messages), prompt (before 0.5.23: "
        "a body without `prompt` refused 400), none (no /v1/tokenize or /v1/detokenize route: 404) "
        f"(default: {d.tokenize_api})",
    )
    model.add_argument(
        "--weight-version", default=d.weight_version, metavar="V", help="weight version to report (default: default)"
    )
    model.add_argument(
        "--version",
        default=d.version,
        metavar="V",
        help=f"SGLang version that /get_server_info reports (default: {d.version})",
    )
    model.add_argument(
        "--enable-deterministic-inference",
        action="store_true",
        help="report enable_deterministic_inference true in /server_info, as SGLang started with this flag does "
        "(outputs are deterministic from sampling_seed either way; real SGLang ignores the seed without it)",
    )
    model.add_argument(
        "--enable-watermark",
        action="store_true",
        help="report enable_watermark true in /server_info, as SGLang 0.5.23 started with --enable-watermark does "
        "(the stand-in's outputs are not watermarked; preflight refuses such a server)",
    )
    model.add_argument(
        "--server-arg",
        action="append",
        type=_server_arg,
        default=[],
        metavar="KEY=JSON",
        help="report this server argument in /server_info, as SGLang started with it does, e.g. "
        "reasoning_parser='\"kimi_k2\"' or allow_auto_truncate=true (outputs do not change; repeatable)",
    )
    model.add_argument(
        "--context-length",
        type=positive_int,
        default=d.context_length,
        metavar="N",
        help=f"context length in tokens; longer prompts get 400 (default: {d.context_length})",
    )
    model.add_argument(
        "--vocab-size",
        type=positive_int,
        default=d.vocab_size,
        metavar="N",
        help=f"vocabulary size; larger prompt ids get 400 (default: {d.vocab_size})",
    )

    spec = parser.add_argument_group(
        "speculative decoding (a server with a drafter: /server_info says so, every answer carries known metrics)"
    )
    spec.add_argument(
        "--speculative-algorithm",
        metavar="NAME",
        help="report a drafter of this algorithm (EAGLE3, as SGLang's flag) and add SGLang's per-request spec_* "
        "metrics to every finished answer's meta_info, drawn from --speculative-accept-rate (default: no drafter)",
    )
    spec.add_argument(
        "--speculative-draft-model-path",
        default=SpeculativeConfig.draft_model_path,
        metavar="PATH",
        help=f"draft model path to report (default: {SpeculativeConfig.draft_model_path})",
    )
    for name, help_text in (
        ("num_steps", "draft steps per verify step"),
        ("eagle_topk", "branching of the draft tree"),
        ("num_draft_tokens", "tokens verified per step, the bonus included"),
    ):
        default = getattr(SpeculativeConfig, name)
        spec.add_argument(
            "--speculative-" + name.replace("_", "-"),
            type=positive_int,
            default=default,
            metavar="N",
            help=f"{help_text}, as SGLang's flag (default: {default})",
        )
    spec.add_argument(
        "--speculative-accept-rate",
        type=_rate,
        default=SpeculativeConfig.accept_rate,
        metavar="P",
        help="the stand-in's own: probability that a draft token is accepted after an accepted one; each "
        f"request's draws are seeded by its sampling_seed (default: {SpeculativeConfig.accept_rate})",
    )

    speed = parser.add_argument_group("capacity and speed")
    speed.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        help="speed shortcut: realistic (25 ms/token, 200-600 tokens), fast (2 ms/token, 50-150 tokens), "
        "instant (no latency, 50-150 tokens); the flags below override it",
    )
    speed.add_argument(
        "--max-running-requests",
        type=positive_int,
        default=d.max_running_requests,
        metavar="N",
        help=f"slots: requests generated at once (default: {d.max_running_requests})",
    )
    speed.add_argument(
        "--max-queued-requests",
        type=lambda text: int(_number(int, 0, text)),
        default=d.max_queued_requests,
        metavar="N",
        help=f"requests that may wait for a slot; more get 503 (default: {d.max_queued_requests})",
    )
    speed.add_argument(
        "--prefix-cache-tokens",
        type=lambda text: int(_number(int, 0, text)),
        default=d.prefix_cache_tokens,
        metavar="N",
        help=f"KV kept for prefix reuse (SGLang's radix cache), in tokens, LRU-evicted; cached prompt tokens skip "
        f"prefill and are reported as meta_info.cached_tokens (default: {d.prefix_cache_tokens:,}, what an "
        "8 x H200 Kimi-K2.5 replica has left beside 64 running requests)",
    )
    speed.add_argument(
        "--disable-radix-cache",
        action="store_true",
        help="no prefix cache: every prompt is prefilled in full, cached_tokens is 0 (as SGLang's flag)",
    )
    speed.add_argument(
        "--prefill-ms-per-1k-tokens",
        type=non_negative,
        metavar="MS",
        help=f"prefill time per 1000 prompt tokens (default: {d.prefill_s_per_token * 1e6:g}, or the profile's)",
    )
    speed.add_argument(
        "--decode-ms-per-token",
        type=non_negative,
        metavar="MS",
        help=f"decode time per output token; 0: no latency (default: {d.decode_s_per_token * 1e3:g}, or the profile's)",
    )
    speed.add_argument(
        "--output-tokens",
        type=_output_tokens,
        metavar="MIN-MAX",
        help=f"natural output length range (default: {d.output_tokens_min}-{d.output_tokens_max}, or the profile's)",
    )

    faults = parser.add_argument_group("faults (each a probability per request, 0 to 1; default 0)")
    for kind, text in FAULT_FLAGS.items():
        flag = "--fault-" + kind.removeprefix("error_").replace("_", "-")
        faults.add_argument(flag, dest=f"fault_{kind}", type=_rate, default=0.0, metavar="P", help=text)
    faults.add_argument(
        "--lose-after",
        type=positive_int,
        metavar="N",
        help="lose every /generate request after the first N (accepted, never answered; /health stays 200)",
    )
    faults.add_argument(
        "--fault-loads",
        choices=("hang", "error"),
        help="GET /v1/loads never answers (hang) or answers 500 (error); generation is unaffected",
    )
    faults.add_argument(
        "--stuck-after",
        type=positive_int,
        metavar="N",
        help="the scheduler stops after N /generate requests: later ones are never answered, /v1/loads hangs, "
        "/health_generate answers 503 after 20 s (/health stays 200)",
    )
    faults.add_argument(
        "--slow-seconds",
        type=non_negative,
        default=d.slow_seconds,
        metavar="S",
        help=f"extra delay of a slow answer (default: {d.slow_seconds:g})",
    )
    faults.add_argument(
        "--fault-seed", type=int, default=d.fault_seed, metavar="N", help="seed of the fault draws (default: 0)"
    )
    faults.add_argument(
        "--restart-every",
        type=positive,
        metavar="S",
        help="restart the server every S seconds: connections cut, port closed for --restart-downtime (default: never)",
    )
    faults.add_argument(
        "--restart-downtime",
        type=non_negative,
        default=d.restart_downtime_s,
        metavar="S",
        help=f"seconds the server stays away on each restart (default: {d.restart_downtime_s:g})",
    )


def _server_arg(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw  # a bare word: a string (reasoning_parser=kimi_k2)
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=JSON (e.g. allow_auto_truncate=true)")
    return key, value


def config_from_args(args: argparse.Namespace) -> SimConfig:
    config = SimConfig(
        model_path=args.model_path,
        tokenizer_path=args.tokenizer_path,
        tool_calls=args.tool_calls,
        tokenize_api=args.tokenize_api,
        weight_version=args.weight_version,
        version=args.version,
        enable_deterministic_inference=args.enable_deterministic_inference,
        enable_watermark=args.enable_watermark,
        server_args=dict(args.server_arg),
        speculative=SpeculativeConfig(
            algorithm=args.speculative_algorithm,
            draft_model_path=args.speculative_draft_model_path,
            num_steps=args.speculative_num_steps,
            eagle_topk=args.speculative_eagle_topk,
            num_draft_tokens=args.speculative_num_draft_tokens,
            accept_rate=args.speculative_accept_rate,
        )
        if args.speculative_algorithm
        else None,
        context_length=args.context_length,
        vocab_size=args.vocab_size,
        max_running_requests=args.max_running_requests,
        max_queued_requests=args.max_queued_requests,
        prefix_cache_tokens=0 if args.disable_radix_cache else args.prefix_cache_tokens,
        startup_seconds=args.startup_seconds,
        faults=FaultRates(**{kind: getattr(args, f"fault_{kind}") for kind in FAULT_FLAGS}),
        fault_seed=args.fault_seed,
        slow_seconds=args.slow_seconds,
        restart_every_s=args.restart_every,
        lose_after=args.lose_after,
        loads_fault=args.fault_loads,
        stuck_after=args.stuck_after,
        restart_downtime_s=args.restart_downtime,
        api_key=args.api_key,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
    )
    if args.profile:
        config = config.with_profile(args.profile)
    overrides = {}
    if args.prefill_ms_per_1k_tokens is not None:
        overrides["prefill_s_per_token"] = args.prefill_ms_per_1k_tokens / 1e6
    if args.decode_ms_per_token is not None:
        overrides["decode_s_per_token"] = args.decode_ms_per_token / 1e3
    if args.output_tokens is not None:
        overrides["output_tokens_min"], overrides["output_tokens_max"] = args.output_tokens
    return dataclasses.replace(config, **overrides)


async def _serve(config: SimConfig, host: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    server = await start_sim_server(config, host, port)
    try:
        print(f"serving SGLang stand-in on {server.url}", flush=True)
        await stop.wait()
    finally:
        await server.stop()


def serve_sim(args: argparse.Namespace) -> int:
    """Run until Ctrl-C or SIGTERM; 0 on a clean stop, 1 (with a one-line reason) if it cannot start."""
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"eagle-datagen: error: {exc}", file=sys.stderr)
        return 1
    try:
        asyncio.run(_serve(config, args.host, args.port))
    except OSError as exc:
        print(f"eagle-datagen: error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers were in place
        pass
    return 0
