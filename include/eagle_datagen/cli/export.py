"""`eagle-datagen export`: a published run or release in the format an EAGLE-3 trainer reads."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from eagle_datagen.cli.arguments import category_list, positive_int
from eagle_datagen.errors import ConfigError

if TYPE_CHECKING:
    from eagle_datagen.export.mix import ExportMix


def add_parser(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser(
        "export",
        help="write a published run or release in the format an EAGLE-3 trainer reads (jsonl, speculators, "
        "specforge, torchspec, hf)",
        description="Read the data files a run's manifest (or a release) lists, checksums checked, shard by shard, "
        "and write training rows: input_ids (prompt_ids + output_ids) and loss_mask (0 over the prompt, 1 over "
        "the output), in the format a trainer reads, with the draft vocabulary maps it needs, a sample_id index "
        "(sample_ids.txt), export_info.yaml and a README with the command that starts training. "
        "docs/internals/training.md "
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
        "--to",
        required=True,
        metavar="PATH",
        help="file to write for jsonl (- for stdout), a new folder otherwise; or s3://bucket/path/name: the same, "
        "as objects written once (a folder format's files under name/)",
    )
    export.add_argument("--categories", type=category_list, metavar="a,b", help="only these categories (default: all)")
    export.add_argument(
        "--max-seq-len",
        type=positive_int,
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
        "--mix",
        metavar="CATEGORY=W,...|NAME",
        help="a training mix: per-category weights (math=2,chat=0.5: 2 copies of every math row, half of the chat "
        "rows, chosen by a seeded hash of the sample id; a category not named keeps 1, 0 leaves it out; "
        "fractions give floor(w) copies plus one more of round(frac(w) x n) rows), or the name of a mix of "
        "--recipe's mixes: (docs/internals/training.md, \"Mixes\")",
    )
    export.add_argument(
        "--modes",
        metavar="thinking,instant",
        help="only rows of these modes (rows written before the mode column are thinking; default: every mode)",
    )
    export.add_argument(
        "--mix-seed",
        type=int,
        metavar="N",
        help="seed of the rows a fractional weight selects (default: the named mix's, else 0)",
    )
    export.add_argument("--recipe", metavar="FILE", help="the recipe whose mixes: --mix NAME names")
    export.add_argument(
        "--logprobs",
        action="store_true",
        help="carry the soft targets (the top-k logprobs a run stored with --top-logprobs K): jsonl lines get "
        "top_logprobs_k, top_logprob_ids, top_logprobs and output_logprobs of the kept output positions; hf has "
        "the contract's columns (the other formats' trainers compute the target's distribution themselves)",
    )
    export.add_argument(
        "--draft-vocab-size",
        type=positive_int,
        metavar="K",
        help="build the draft vocabulary (d2t/t2d) of the K most frequent supervised tokens of the exported rows "
        "(default: the run's or release's own draft vocabulary)",
    )
    export.set_defaults(handler=handle)


def export_mix(mix: str | None, modes: str | None, seed: int | None, recipe: str | None) -> ExportMix:
    """The mix of --mix (weights, or a name of --recipe's mixes), --modes and --mix-seed."""
    from dataclasses import replace

    from eagle_datagen.export.mix import ExportMix, parse_modes, parse_weights, recipe_mix
    from eagle_datagen.sources.recipe import load_recipe

    chosen = ExportMix()
    if mix is not None and "=" in mix:
        chosen = ExportMix(weights=parse_weights(mix))
    elif mix is not None:
        if recipe is None:
            raise ConfigError(f"--mix {mix}: a mix name needs --recipe FILE (or give weights: --mix math=2,chat=0.5)")
        chosen = recipe_mix(load_recipe(recipe), mix)
    if modes is not None:
        chosen = replace(chosen, modes=parse_modes(modes))
    if seed is not None:
        chosen = replace(chosen, seed=seed)
    return chosen


def handle(args: argparse.Namespace) -> int:
    import shlex

    from eagle_datagen.export.rows import SeqLimit
    from eagle_datagen.export.stage import ExportOptions, run_export
    from eagle_datagen.generation.stage import check_run_id
    from eagle_datagen.storage.output_root import open_output_root

    check_run_id(args.run_id or args.release_id)
    mix = export_mix(args.mix, args.modes, args.mix_seed, args.recipe)
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
        mix=mix,
        logprobs=args.logprobs,
    )
    what = f"run {args.run_id}" if args.run_id else f"release {args.release_id}"
    if args.to.startswith("s3://"):
        from eagle_datagen.export.upload import export_to_store, split_store_uri

        base, prefix, jsonl_name = split_store_uri(args.to, args.format)
        stored = export_to_store(open_output_root(args.output), options, open_output_root(base), prefix, jsonl_name)
        print(
            f"exported {stored['rows']:,} samples of {what} as {args.format} to {stored['location']} "
            f"({len(stored['files'])} objects)",
            file=sys.stderr,
        )
        return 0
    try:
        summary = run_export(open_output_root(args.output), options)
    except BrokenPipeError:  # `--to - | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    vocab = f", draft vocabulary of {summary.draft_vocab_k:,}" if summary.draft_vocab_k else ""
    print(f"exported {summary.rows:,} samples of {what} as {args.format} to {args.to}{vocab}", file=sys.stderr)
    return 0
