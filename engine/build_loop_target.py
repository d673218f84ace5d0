"""Build the target of the CPU loop (data -> drafter -> acceptance): the tiny model's chain, made measurable.

The tiny model of the engine tests (build_tiny_model.py) cannot serve the loop as it is, for two reasons:
- **two layers**. EAGLE-3 feeds the drafter three aux hidden states, and their layer ids have two conventions that
  differ by one: speculators (and vLLM) number them as transformers' `hidden_states[k]` (k = 0 the embeddings,
  k = num_layers the last layer's output), SGLang as layer outputs (id L captures `hidden_states[L + 1]`) and
  cannot capture its last layer's output. Three ids valid in both need at least four layers; this target has four
  (the layers still add nothing: o_proj and down_proj are zero, as in the tiny model);
- **a greedy path decided by ties**. SGLang verifies greedily on the CPU whatever the temperature, so acceptance
  is measured on the target's argmax path; the tiny model's reasoning and answer ids are all equally likely, and
  its argmax after `</think>` is decided by a float tie (the lowest id), which no drafter can learn.
  Here the reasoning ids fall into 8 groups of 125, and after a reasoning id of group g the *lead* (first id) of
  group g + 1 (mod 8) has P = 0.35. The greedy path is then the cycle of the 8 leads (reasoning never ends under
  greedy decoding: `</think>` has P = 1/40 < 0.35), which a drafter learns only from data that visits the
  target's own reasoning: on-policy data does (about a third of its reasoning steps are lead steps); another
  model's answers mostly do not.
Sampled at temperature 1 it is the tiny model's chain: the same P(</think>) and P(<|im_end|>) after each reasoning
id (so the same lengths, about 59 tokens, and 5.8% of samples without `</think>`), the same answers.

Usage (the project's .venv): python engine/build_loop_target.py [CACHE] prints the model directory,
`<cache>/sglang-loop-target/Kimi-K2.5`; rebuilt only when this file, build_tiny_model.py or the stand-in changed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_tiny_model as tiny  # noqa: E402  (beside this file, not a package)

LAYERS = 4
GROUPS = 8  # reasoning ids 300-1299 in groups of 125: group g is 300 + 125g .. 300 + 125g + 124
P_LEAD = 0.35  # after a reasoning id of group g: the lead (first id) of group g + 1
HOME = "sglang-loop-target"
# Classes: THINKING_0..THINKING_7 (group g; <think> is in group 0), then ANSWER_START, ANSWERING, OTHER.
ANSWER_START, ANSWERING, OTHER = GROUPS, GROUPS + 1, GROUPS + 2
GROUP_SIZE = len(tiny.REASONING_IDS) // GROUPS


def lead(group: int) -> int:
    return tiny.REASONING_IDS.start + (group % GROUPS) * GROUP_SIZE


def greedy_cycle() -> list[int]:
    """The target's argmax path through reasoning: the leads of groups 1, 2, ..., 7, 0, 1, ..."""
    return [lead(g) for g in range(1, GROUPS + 1)]


def token_classes() -> np.ndarray:
    classes = np.full(tiny.VOCAB_SIZE, OTHER, dtype=np.int64)
    reasoning = np.arange(tiny.REASONING_IDS.start, tiny.REASONING_IDS.stop)
    classes[reasoning] = (reasoning - tiny.REASONING_IDS.start) // GROUP_SIZE
    classes[tiny.THINK_START] = 0
    classes[list(tiny.ANSWER_IDS)] = ANSWERING
    classes[tiny.THINK_END] = ANSWER_START
    return classes


def next_token_probabilities() -> np.ndarray:
    """P(next id | class): the tiny model's rows, with the reasoning row split per group and a lead added."""
    stock = tiny.next_token_probabilities()
    table = np.empty((GROUPS + 3, tiny.VOCAB_SIZE), dtype=np.float64)
    reasoning = list(tiny.REASONING_IDS)
    for group in range(GROUPS):
        row = stock[tiny.THINKING].copy()
        row[reasoning] *= 1 - P_LEAD / row[reasoning].sum()  # the reasoning mass, less the lead's share
        row[lead(group + 1)] += P_LEAD
        table[group] = row
    table[ANSWER_START] = stock[tiny.ANSWER_START]
    table[ANSWERING] = stock[tiny.ANSWERING]
    table[OTHER] = table[0]  # a prompt that does not end in <think> still starts reasoning
    return table


def build(target: Path, standin_dir: Path) -> None:
    tiny.build(
        target, standin_dir, layers=LAYERS, table=next_token_probabilities(), classes=token_classes(),
        description="The CPU loop's target: eagle-datagen's tiny model chain with 4 layers and a greedy path "
        "(the leads of 8 reasoning groups), built by engine/build_loop_target.py. See docs/evaluation-cpu-loop.md.\n",
    )


def ensure_model(cache_root: Path) -> Path:
    return tiny.ensure_model(cache_root, HOME, build, sources=(Path(__file__),))


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("EAGLE_DATAGEN_CACHE", ".cache"))
    print(ensure_model(root.resolve()))


if __name__ == "__main__":
    main()
