"""Build the target of the CPU loop (data -> drafter -> acceptance): the tiny model's chain, made measurable.

The tiny model of the engine tests (build_tiny_model.py) cannot serve the loop as it is, for two reasons:
- **two layers**. EAGLE-3 feeds the drafter three aux hidden states, and their layer ids have two conventions that
  differ by one: speculators (and vLLM) number them as transformers' `hidden_states[k]` (k = 0 the embeddings,
  k = num_layers the last layer's output), SGLang as layer outputs (id L captures `hidden_states[L + 1]`) and
  cannot capture its last layer's output. Three ids valid in both need at least four layers; this target has four
  (the layers still add nothing: o_proj and down_proj are zero, as in the tiny model);
- **a greedy path decided by ties**. SGLang verifies greedily on the CPU whatever the temperature, so acceptance
  is measured on the target's argmax path; the tiny model's reasoning and answer ids are all equally likely, and
  its argmax after `</think>` is decided by a float tie (the lowest id), which no drafter can learn. Here the
  reasoning ids fall into 8 groups of 125, the first id of each being its *lead*: after a reasoning id of group g,
  or after lead g, lead g + 1 (mod 8) has P = 0.35, and after `</think>` the first answer id (1400) has P = 0.35.
  The greedy path after `<think>` (group 0) is the cycle of the 8 leads (reasoning never ends under greedy
  decoding: `</think>` has P = 1/40 < 0.35). Each lead is a class of its own (its own embedding), so a drafter
  learns the step from one lead to the next only where its data has the leads themselves: the target's own
  samples do (about a third of their reasoning steps are leads), another model's text almost never (the
  stand-in's answers to the loop's prompts hold each lead 0-1 times in 5,000 tokens, although a third of their
  tokens are reasoning ids, which teach the step from a group to its lead).
Sampled at temperature 1 it is the tiny model's chain: the same P(</think>) and P(<|im_end|>) after each reasoning
and answer id (so the same lengths, about 59 tokens, and 5.8% of samples without `</think>`).

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
GROUPS = 8  # reasoning ids 300-1299 in groups of 125; group g's first id is its lead
GROUP_SIZE = len(tiny.REASONING_IDS) // GROUPS
LEADS = tuple(tiny.REASONING_IDS.start + g * GROUP_SIZE for g in range(GROUPS))  # 300, 425, ..., 1175
P_LEAD = 0.35  # after a reasoning id of group g, or lead g: lead g + 1; after </think>: the first answer id
ANSWER_LEAD = tiny.ANSWER_IDS.start
HOME = "sglang-loop-target"
# Classes: GROUP_0..GROUP_7 (the other reasoning ids; <think> is in group 0), LEAD_0..LEAD_7, then ANSWER_START,
# ANSWERING, OTHER.
ANSWER_START, ANSWERING, OTHER = 2 * GROUPS, 2 * GROUPS + 1, 2 * GROUPS + 2


def group_class(group: int) -> int:
    return group


def lead_class(group: int) -> int:
    return GROUPS + group


def greedy_cycle() -> list[int]:
    """The target's argmax path through reasoning after <think>: lead 1, lead 2, ..., lead 7, lead 0, lead 1, ..."""
    return [LEADS[(g + 1) % GROUPS] for g in range(GROUPS)]


def token_classes() -> np.ndarray:
    classes = np.full(tiny.VOCAB_SIZE, OTHER, dtype=np.int64)
    reasoning = np.arange(tiny.REASONING_IDS.start, tiny.REASONING_IDS.stop)
    classes[reasoning] = group_class((reasoning - tiny.REASONING_IDS.start) // GROUP_SIZE)
    classes[tiny.THINK_START] = group_class(0)
    for group, lead in enumerate(LEADS):
        classes[lead] = lead_class(group)
    classes[list(tiny.ANSWER_IDS)] = ANSWERING
    classes[tiny.THINK_END] = ANSWER_START
    return classes


def _with_lead(row: np.ndarray, lead: int, among: range = tiny.REASONING_IDS) -> np.ndarray:
    """A tiny model's row with P_LEAD moved from the ids `among` to `lead`."""
    ids = list(among)
    row = row.copy()
    row[ids] *= 1 - P_LEAD / row[ids].sum()
    row[lead] += P_LEAD
    return row


def next_token_probabilities() -> np.ndarray:
    """P(next id | class): the tiny model's rows, each reasoning row giving P_LEAD to the next group's lead."""
    stock = tiny.next_token_probabilities()
    table = np.empty((OTHER + 1, tiny.VOCAB_SIZE), dtype=np.float64)
    for group in range(GROUPS):
        row = _with_lead(stock[tiny.THINKING], LEADS[(group + 1) % GROUPS])
        table[group_class(group)] = table[lead_class(group)] = row
    table[ANSWER_START] = _with_lead(stock[tiny.ANSWER_START], ANSWER_LEAD, tiny.ANSWER_IDS)
    table[ANSWERING] = stock[tiny.ANSWERING]
    table[OTHER] = table[group_class(0)]  # a prompt that does not end in <think> still starts reasoning
    return table


def build(target: Path, standin_dir: Path) -> None:
    tiny.build(
        target, standin_dir, layers=LAYERS, table=next_token_probabilities(), classes=token_classes(),
        description="The CPU loop's target: eagle-datagen's tiny model chain with 4 layers and a greedy path "
        "(a cycle of 8 lead tokens), built by engine/build_loop_target.py. "
        "See docs/internals/evaluation-cpu-loop.md.\n",
    )


def ensure_model(cache_root: Path) -> Path:
    return tiny.ensure_model(cache_root, HOME, build, sources=(Path(__file__),))


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("EAGLE_DATAGEN_CACHE", ".cache"))
    print(ensure_model(root.resolve()))


if __name__ == "__main__":
    main()
