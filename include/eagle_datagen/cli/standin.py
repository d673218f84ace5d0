"""`eagle-datagen serve-sim` and `build-standin-tokenizer`: the project's stand-ins for SGLang and the Kimi-K2.5
tokenizer."""

from __future__ import annotations

import argparse


def add_parsers(commands: argparse._SubParsersAction) -> None:
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


def _serve_sim(args: argparse.Namespace) -> int:
    from eagle_datagen.standin.sglang.cli import serve_sim

    return serve_sim(args)


def _build_standin(args: argparse.Namespace) -> int:
    from eagle_datagen.standin.kimi_tokenizer import build_standin_kimi_tokenizer

    print(build_standin_kimi_tokenizer(args.output))
    return 0
