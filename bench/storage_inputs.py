"""The storage benchmark's inputs: rows shaped like the pipeline's, from natural text or the stand-in's model.

Every input has the same shape: `per_category` samples in each of the 7 categories of the demo recipe, rows
in category order (so shards of `per_category` samples hold one category each, as the `run` command's
shards do), prompts of 100-2,000 ids between a chat-template-like frame and the trailing <think>, outputs
of 200-600 ids with </think> after 60-80% of them and <|im_end|> last (the stand-in server's `realistic`
output shape), and every SAMPLE_SCHEMA column filled. Only where the ordinary ids come from differs:
- `natural_rows`: token ids of real text (`natural_text`, tokenized with Tekken, `tekken_bpe`). Each
  category draws from one group: chat, math, reasoning and writing from English prose, multilingual from
  the other languages, code and tool_use from code. A sample's prompt and output are one contiguous window
  of its group's stream (the output continues the prompt's text); the windows of a group are spread
  evenly over its stream and never overlap, so no text is stored twice and the samples of a shard rarely
  share a page;
- `standin_rows`: the stand-in SGLang server's output model (`OutputModel(SimConfig())`), Zipf(1.1) ranks
  mapped to ids BPE-like, or, with `permuted=True`, through a random permutation of the 163,584 ordinary
  ids (the model's mapping before; no byte of an id then carries information on its own: the worst case).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from eagle_datagen.inference.samples import make_sample_id
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.outputs import REASONING_JITTER, OutputModel
from tekken_bpe import MissingInput

CATEGORY_GROUPS = {
    "chat": "prose",
    "code": "code",
    "math": "prose",
    "multilingual": "other languages",
    "reasoning": "prose",
    "tool_use": "code",
    "writing": "prose",
}
CATEGORIES = list(CATEGORY_GROUPS)
MODEL = "moonshotai/Kimi-K2.5"
SAMPLING = {"max_new_tokens": 2048, "temperature": 1.0, "top_p": 0.95}
# a chat-template-like frame around the prompt body: <|im_system|>system<|im_middle|>... <think> at the end
PROMPT_PREFIX = [163587, 2002, 163601]
PROMPT_SUFFIX = [163586, 163588, 69702, 163601, 163606]
PROMPT_TOKENS = (100, 2000)
STANDIN = SimConfig()  # outputs of its shape (lengths, </think> position) and its special ids
OUTPUT_TOKENS = (STANDIN.output_tokens_min, STANDIN.output_tokens_max)
THINK_END = STANDIN.think_end_id
EOS = STANDIN.eos_id


def make_row(seed: int, index: int, category: str, prompt: list[int], output: list[int]) -> dict[str, Any]:
    prompt_id = hashlib.sha256(f"bench-prompt-{seed}-{index}".encode()).hexdigest()
    return {
        "sample_id": make_sample_id(prompt_id, 0, MODEL, SAMPLING),
        "record_id": f"{category}-{index:06d}",
        "prompt_id": prompt_id,
        "category": category,
        "sample_index": 0,
        "prompt_ids": prompt,
        "output_ids": output,
        "finish_reason": "stop",
        "completion_tokens": len(output),
        "prompt_tokens": len(prompt),
        "reasoning_tokens": output.index(THINK_END) if THINK_END in output else None,
        "sampling": json.dumps(SAMPLING, sort_keys=True),
        "model": MODEL,
        "run_id": "bench",
        "weight_version": "default",
    }


def natural_rows(streams: dict[str, np.ndarray], per_category: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    frame = len(PROMPT_PREFIX) + len(PROMPT_SUFFIX)
    by_category: dict[str, list[dict[str, Any]]] = {c: [] for c in CATEGORIES}
    for group in dict.fromkeys(CATEGORY_GROUPS.values()):
        categories = [c for c in CATEGORIES if CATEGORY_GROUPS[c] == group]
        count = len(categories) * per_category
        stream = streams[group]
        stride = len(stream) // count
        need = PROMPT_TOKENS[1] - frame + OUTPUT_TOKENS[1] - 2
        if stride < need:
            raise MissingInput(
                f"natural-text corpus too small: {group} has {len(stream):,} tokens, {count:,} samples need "
                f"{count * need:,}; lower --per-category"
            )
        for k in range(count):
            body = int(rng.integers(PROMPT_TOKENS[0], PROMPT_TOKENS[1] + 1)) - frame
            total = int(rng.integers(OUTPUT_TOKENS[0], OUTPUT_TOKENS[1] + 1))
            fraction = STANDIN.reasoning_fraction + rng.uniform(-REASONING_JITTER, REASONING_JITTER)
            text = stream[k * stride : k * stride + body + total - 2].tolist()
            prompt, answer = text[:body], text[body:]
            cut = round(len(answer) * fraction)
            output = answer[:cut] + [THINK_END] + answer[cut:] + [EOS]
            category = categories[k % len(categories)]
            by_category[category].append((prompt, output))
    rows = []
    for category in CATEGORIES:
        for prompt, output in by_category[category]:
            rows.append(make_row(seed, len(rows), category, PROMPT_PREFIX + prompt + PROMPT_SUFFIX, output))
    return rows


def standin_rows(per_category: int, seed: int, permuted: bool = False) -> list[dict[str, Any]]:
    model = OutputModel(STANDIN)
    if permuted:
        model.rank_to_id = np.random.default_rng(STANDIN.vocab_seed).permutation(STANDIN.ordinary_vocab)
    rng = np.random.default_rng(seed)
    rows = []
    for category in CATEGORIES:
        for _ in range(per_category):
            length = int(rng.integers(PROMPT_TOKENS[0], PROMPT_TOKENS[1] + 1))
            body = model.ordinary_tokens(rng, length - len(PROMPT_PREFIX) - len(PROMPT_SUFFIX)).tolist()
            prompt = PROMPT_PREFIX + body + PROMPT_SUFFIX
            sampling_seed = int(hashlib.sha256(f"bench-{seed}-{len(rows)}".encode()).hexdigest()[:15], 16)
            out = model.generate(prompt, sampling_seed=sampling_seed, max_new_tokens=2048)
            rows.append(make_row(seed, len(rows), category, prompt, out.output_ids))
    return rows
