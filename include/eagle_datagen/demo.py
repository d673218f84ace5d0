"""`make demo`: run the pipeline stages that exist on the shipped demo recipe and show what they produced.

Everything is local and embedded: the stand-in Kimi-K2.5 tokenizer (built once into the cache) and the
demo prompt set under include/data/demo_prompts. The output lands in --output (default .demo/).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq

from eagle_datagen.cli import format_tokenize_summary
from eagle_datagen.errors import DataGenError
from eagle_datagen.tokenization.stage import TokenizeOptions, run_tokenize

REPO = Path(__file__).resolve().parents[2]
DEMO_RECIPE = REPO / "include" / "recipes" / "demo.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__)
    parser.add_argument("--output", default=".demo", help="output folder, emptied first (default: .demo)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    output = Path(args.output).resolve()
    shutil.rmtree(output / "tokenize", ignore_errors=True)

    print(f"== eagle-datagen demo: recipe {DEMO_RECIPE.relative_to(REPO)}, stand-in Kimi-K2.5 tokenizer ==")
    try:
        summary = run_tokenize(
            TokenizeOptions(output=str(output / "tokenize"), tokenizer="standin:kimi-k2.5", recipe=str(DEMO_RECIPE))
        )
    except DataGenError as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1
    print(format_tokenize_summary(summary.to_json()))

    from eagle_datagen.profile import load_profile
    from eagle_datagen.tokenization.loader import load_tokenizer

    tokenizer = load_tokenizer("standin:kimi-k2.5", load_profile("kimi-k2.5")).tokenizer
    part = output / "tokenize" / "tokenized" / "category=tool_use" / "part-00000.parquet"
    row = pq.read_table(part).slice(0, 1).to_pylist()[0]
    print(f"\nexample ({row['record_id']}): {len(row['prompt_ids'])} prompt ids, the last ten:")
    print(f"  {row['prompt_ids'][-10:]}")
    print(f"  = {tokenizer.decode(row['prompt_ids'][-10:])!r}")
    print("\nnext: generation against SGLang and Parquet shards arrive with the run command (see README).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
