"""`make demo-cli`: the main job without Airflow, end to end on this machine in seconds (`make demo` runs
the same job through Airflow: `eagle_datagen_stack.demo`).

Everything is local and embedded: the stand-in Kimi-K2.5 tokenizer (built once into the cache), the demo
prompt set (include/data/demo_prompts, 7 categories) and a stand-in SGLang server on 127.0.0.1 (fast
profile: 64 slots, 2 ms per token). The run sources, tokenizes, checks the server (preflight with a
canary), plans shards and generates every sample; the output lands in --output (default .demo/).
`--multi-turn` (`make demo-multiturn`) runs include/recipes/demo_multiturn.yaml instead: conversations
generated on-policy, one sample per assistant turn, tool loops continued with recorded results, against a
stand-in that decodes prompts with the stand-in tokenizer and answers with Kimi-format tool calls.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

from eagle_datagen.cli import format_run_summary
from eagle_datagen.errors import DataGenError
from eagle_datagen.generation.publish import PublishOptions
from eagle_datagen.generation.stage import RunOptions, SamplingOverrides
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from eagle_datagen.tokenization.stage import TokenizeOptions

REPO = Path(__file__).resolve().parents[2]
DEMO_RECIPE = REPO / "include" / "recipes" / "demo.yaml"
MULTI_TURN_RECIPE = REPO / "include" / "recipes" / "demo_multiturn.yaml"
RUN_ID = "demo"
DEMO_DRAFT_VOCAB = 2048  # the demo generates ~12k tokens; a real run uses the default 32000
MULTI_TURN_DRAFT_VOCAB = 256  # the multi-turn demo generates ~5k tokens


def category_table(output: Path, run_id: str = "*") -> str:
    """Valid and quarantined samples and tokens per category, from the Parquet shards under a local root."""
    stats: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for kind, column in (("data", 0), ("quarantine", 1)):
        for part in sorted(output.glob(f"{kind}/category=*/run={run_id}/part-*.parquet")):
            for row in pq.read_table(part, columns=["category", "prompt_ids", "output_ids"]).to_pylist():
                entry = stats[row["category"]]
                entry[column] += 1
                if kind == "data":
                    entry[2] += len(row["prompt_ids"])
                    entry[3] += len(row["output_ids"])
    lines = [f"{'category':<14}{'valid':>7}{'quarantined':>13}{'prompt tokens':>15}{'output tokens':>15}"]
    for category, (valid, bad, prompt, out) in sorted(stats.items()):
        lines.append(f"{category:<14}{valid:>7,}{bad:>13,}{prompt:>15,}{out:>15,}")
    return "\n".join(lines)


def example_sample(output: Path, run_id: str = "*", category: str = "tool_use") -> str:
    """One valid sample of a local root, its prompt's end decoded with the stand-in tokenizer."""
    from eagle_datagen.profile import load_profile
    from eagle_datagen.tokenization.loader import load_tokenizer

    tokenizer = load_tokenizer("standin:kimi-k2.5", load_profile("kimi-k2.5"), trust_remote_code=True).tokenizer
    part = next(output.glob(f"data/category={category}/run={run_id}/part-*.parquet"))
    row = pq.read_table(part).slice(0, 1).to_pylist()[0]
    out = row["output_ids"]
    end = out.index(163607)
    return "\n".join(
        [
            f"example sample {row['sample_id']} ({row['record_id']}, finish {row['finish_reason']}):",
            f"  prompt: {len(row['prompt_ids'])} ids ending {row['prompt_ids'][-4:]}"
            f" = {tokenizer.decode(row['prompt_ids'][-4:])!r}",
            f"  output: {len(out)} ids; </think> at {end}; last ids {out[-3:]}",
            f"  sampling: {json.loads(row['sampling'])}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo-cli", description=__doc__)
    parser.add_argument("--output", default=".demo", help="output folder, emptied first (default: .demo)")
    parser.add_argument(
        "--multi-turn", action="store_true", help="the multi-turn and agentic recipe (docs/internals/multi-turn.md)"
    )
    args = parser.parse_args(argv)
    recipe = MULTI_TURN_RECIPE if args.multi_turn else DEMO_RECIPE
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    output = Path(args.output).resolve()
    shutil.rmtree(output, ignore_errors=True)

    print(f"== eagle-datagen demo: recipe {recipe.relative_to(REPO)}, stand-in tokenizer and SGLang server ==")
    # A few faults, as a real deployment has: retried (503, dropped connections) or quarantined (no </think>).
    config = SimConfig(faults={"error_503": 0.03, "drop": 0.01, "no_think_end": 0.03}, fault_seed=7)
    if args.multi_turn:  # the stand-in reads the declared tools back from the prompt and calls them
        config = SimConfig(tokenizer_path="standin:kimi-k2.5", tool_calls=True, faults=config.faults, fault_seed=7)
    with SimServerThread(config.with_profile("fast")) as sim:
        print(f"stand-in SGLang server: {sim.url} (64 slots, 2 ms per output token, a few injected faults)")
        try:
            summary = run_generation(
                RunOptions(
                    prompts=TokenizeOptions(
                        output=str(output), tokenizer="standin:kimi-k2.5", trust_remote_code=True, recipe=str(recipe)
                    ),
                    sglang_urls=[sim.url],
                    run_id=RUN_ID,
                    shard_size=16,
                    sampling=SamplingOverrides(samples_per_prompt=1 if args.multi_turn else 2),
                    publish=PublishOptions(
                        draft_vocab_size=MULTI_TURN_DRAFT_VOCAB if args.multi_turn else DEMO_DRAFT_VOCAB,
                        draft_vocab_required=True,
                    ),
                )
            )
        except DataGenError as exc:
            print(f"demo failed: {exc}", file=sys.stderr)
            return 1
    print()
    print(format_run_summary(summary.to_json()))
    print()
    print(category_table(output, RUN_ID))
    print()
    if args.multi_turn:
        statistics = json.loads((output / "manifests" / f"run={RUN_ID}.statistics.json").read_text())
        print(f"conversations: {json.dumps(statistics.get('conversations'))}")
    else:
        print(example_sample(output, RUN_ID))
    print(f"\noutput root: {output}")
    print("  data/, quarantine/         Parquet shards (contract v1), by category and run")
    print(f"  manifests/run={RUN_ID}.json   the manifest, written last; .report.html, .statistics.json,")
    print("                             .draft_vocab.safetensors and .summary.json beside it")
    print(f"open the report: file://{output}/manifests/run={RUN_ID}.report.html")
    return 0 if summary.pending == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
