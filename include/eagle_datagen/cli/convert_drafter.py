"""`eagle-datagen convert-drafter`: a trained speculators EAGLE-3 checkpoint -> the folder SGLang serves."""

from __future__ import annotations

import argparse
import shlex
import sys

from eagle_datagen.cli.arguments import positive_int


def add_parser(commands: argparse._SubParsersAction) -> None:
    convert = commands.add_parser(
        "convert-drafter",
        help="turn a trained speculators EAGLE-3 checkpoint into the drafter folder SGLang serves with "
        "--speculative-algorithm EAGLE3, and print the server flags it needs",
        description="Read a `speculators train` checkpoint and the target's config.json; write the layout SGLang's "
        "LlamaForCausalLMEagle3 loads (midlayer.*, fc, norm, lm_head, d2t/t2d; draft_vocab_size and "
        "eagle_config.eagle_aux_hidden_state_layer_ids in SGLang's numbering for the target's class), in the "
        "target's dtype; refuse, in one line, what SGLang cannot serve. Prints the SGLang flags on stdout. "
        "docs/internals/training.md describes it.",
    )
    convert.add_argument("--checkpoint", required=True, metavar="DIR",
                         help="the folder `speculators train` saved (config.json, model.safetensors)")
    convert.add_argument("--target-config", required=True, metavar="PATH",
                         help="the target model's folder or its config.json (only the config is read)")
    convert.add_argument("--output", required=True, metavar="DIR", help="the drafter folder to write (new or empty)")
    convert.add_argument(
        "--dtype",
        choices=("auto", "bfloat16", "float16", "float32"),
        default="auto",
        help="the drafter's dtype (default auto: the target's, which SGLang needs to serve both; another one adds "
        "--dtype to the printed server flags)",
    )
    convert.add_argument("--num-steps", type=positive_int, metavar="N",
                         help="draft steps in the printed flags (default: the steps it was trained for, else 3)")
    convert.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from eagle_datagen.drafter.convert import convert_drafter

    done = convert_drafter(args.checkpoint, args.target_config, args.output, args.dtype, args.num_steps)
    print(
        f"converted {args.checkpoint} into {done.output}: draft vocabulary {done.draft_vocab_size}, {done.dtype}, "
        f"aux layers {list(done.aux.speculators)} (speculators) -> {list(done.aux.sglang)} (SGLang, "
        f"{done.target.architecture}: {done.aux.rule})",
        file=sys.stderr,
    )
    if done.server_dtype:
        print(f"note: SGLang would serve this {done.dtype} drafter in another dtype than the target "
              f"({done.target.served_dtype}); the flags below serve both in {done.server_dtype}", file=sys.stderr)
    print(shlex.join(done.launch_flags()))
    return 0
