"""Two small Llama models trained at build time on the demo prompts the project ships (include/data/demo_prompts,
all categories): the CPU loop's target, whose answer depends on the prompt, and another model whose answers to the
same prompts are the loop's off-policy data (as a dataset's original responses are another model's).

Both speak one small language: PHRASES reasoning phrases and, per model, PHRASES answer phrases, each a run of ids
cut from the demo texts (so they decode as text), no id in two phrases. A model answers a prompt with reasoning
phrase c, `</think>`, its answer phrase c and `<|im_end|>`, where c is chosen by the prompt: a fixed hash, different
for each model, of the prompt's second-to-last ordinary id before its final `<|im_end|>` (the last is mostly `.` or
`?`; the second-to-last takes 98 values over the 137 demo prompts). So

- what the target writes depends on the prompt, and a drafter measured on held-out prompts must predict the
  target's choice for a prompt it never saw (which the target's hidden states carry) as well as the phrases;
- the other model writes plausible text in the same shape from the same phrases, but chooses another reasoning
  phrase for most prompts and ends with answer phrases of its own: its answers teach a drafter the reasoning
  phrases (the language both speak) but not the target's choices or answers.

A model learns this from the prompts' last WINDOW ids (the rule needs no more; 1,500 steps, about a minute), and
follows it on whole prompts: in transformers (float32, greedy) the target wrote its rule's answer exactly for 122 of
the 137 demo prompts and `</think>` and `<|im_end|>` on all of them (2026-12-07). Serve them with `--dtype float32`:
SGLang serves a float32 checkpoint as float16 by default, whose greedy ids drift from transformers'
(tests/engine/test_loop_models_served.py).

Both are Llama models (what the CPU SGLang serves) of 4 layers, so three aux-layer ids are valid in speculators'
and SGLang's conventions (drafter_training.aux_layer_ids), hidden 64, with the vocabulary of 163,840 of the stand-in
Kimi tokenizer, float32 (a drafter carries its target's dtype), trained with a fixed seed in the speculators
environment (engine/cpu_loop/train_loop_model.py: torch on the CPU) and cached like the tiny model; rebuilt only
when this file, the training script, the demo prompts, build_tiny_model.py or the stand-in tokenizer change.

Usage (the project's .venv): python engine/build_loop_models.py [CACHE] [--other] prints the model directory,
`<cache>/sglang-loop-trained/Kimi-K2.5` (or `<cache>/sglang-loop-other/Kimi-K2.5`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_tiny_model as tiny  # noqa: E402  (beside this file, not a package)

ENGINE = Path(__file__).resolve().parent
PROMPTS = ENGINE.parent / "include" / "data" / "demo_prompts"
TRAINER = ENGINE / "cpu_loop" / "train_loop_model.py"
LAYERS = 4
HIDDEN = 64
PHRASES = 16  # reasoning phrases, and answer phrases per model
REASONING_LENGTHS, ANSWER_LENGTHS = (8, 9, 10), (5, 6)  # ids per phrase, in turn
SUFFIX = 4  # ids after a prompt's final <|im_end|>: <|im_assistant|> assistant <|im_middle|> <think>
WINDOW = 192  # the ids of each sequence a training step sees: the prompt's end and the answer
STEPS = 1500
SPECIAL = 163_584  # the stand-in's special ids start here
HOMES = {"target": "sglang-loop-trained", "other": "sglang-loop-other"}
SEEDS = {"target": 0, "other": 1}


def model_config() -> dict:
    return tiny.model_config(LAYERS) | {"hidden_size": HIDDEN, "intermediate_size": 4 * HIDDEN,
                                        "head_dim": HIDDEN // tiny.HEADS}


def prompt_records() -> list[dict]:
    records = []
    for path in sorted(PROMPTS.glob("*.jsonl")):
        records += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return records


def phrases(texts: list[str], tokenizer, count: int, lengths: tuple[int, ...], taken: set[int]) -> list[list[int]]:
    """`count` runs of ids cut from the texts' sentences (lengths in turn), ordinary ids only, none in `taken` and no
    id twice; each phrase's ids are added to `taken`."""
    found: list[list[int]] = []
    for text in texts:
        for sentence in re.split(r"(?<=[.?!])\s+|\n+", text):
            ids = tokenizer.encode(" " + sentence.strip(), add_special_tokens=False)
            want = lengths[len(found) % len(lengths)]
            for at in range(max(0, len(ids) - want) + 1):
                run = ids[at:at + want]
                if len(run) == want and len(set(run)) == want and not taken & set(run) and max(run) < SPECIAL:
                    found.append(run)
                    taken.update(run)
                    break
            if len(found) == count:
                return found
    raise SystemExit(f"build_loop_models: the demo texts give only {len(found)} of {count} phrases")


def cue(prompt: list[int]) -> int:
    """The id a model's choice depends on: the second-to-last before the prompt's final <|im_end|>."""
    end = len(prompt) - 1 - SUFFIX
    if prompt[end] != tiny.IM_END:
        raise SystemExit("build_loop_models: a rendered prompt does not end in <|im_end|> and the assistant header")
    return prompt[end - 2]


def choice(kind: str, cue_id: int) -> int:
    """The phrase a model picks for a prompt: a fixed hash of its cue, another for each model."""
    return int.from_bytes(hashlib.sha256(f"{kind}:{cue_id}".encode()).digest()[:4], "big") % PHRASES


def language(tokenizer) -> tuple[list[list[int]], dict[str, list[list[int]]]]:
    """The reasoning phrases both models use, and each model's answer phrases."""
    records = prompt_records()
    texts = [m["content"] for r in records for m in r["messages"] if isinstance(m.get("content"), str)]
    taken: set[int] = set()
    reasoning = phrases(texts, tokenizer, PHRASES, REASONING_LENGTHS, taken)
    answers = {"target": phrases(texts, tokenizer, PHRASES, ANSWER_LENGTHS, taken),
               "other": phrases(texts[::-1], tokenizer, PHRASES, ANSWER_LENGTHS, taken)}
    return reasoning, answers


def answer(kind: str, prompt: list[int], reasoning: list[list[int]], answers: dict[str, list[list[int]]]) -> list[int]:
    c = choice(kind, cue(prompt))
    return [*reasoning[c], tiny.THINK_END, *answers[kind][c], tiny.IM_END]


def sequences(kind: str, tokenizer) -> list[tuple[list[int], int]]:
    """Each demo prompt rendered as a run renders it (chat template, generation prompt), then the model's answer."""
    reasoning, answers = language(tokenizer)
    out = []
    for record in prompt_records():
        text = tokenizer.apply_chat_template(record["messages"], tools=record.get("tools"),
                                             add_generation_prompt=True, tokenize=False)
        prompt = tokenizer.encode(text, add_special_tokens=False)
        said = answer(kind, prompt, reasoning, answers)
        out.append(([*prompt, *said], len(said)))
    return out


def write_corpus(kind: str, standin_dir: Path, path: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(standin_dir), trust_remote_code=True)
    rows, answers = zip(*sequences(kind, tokenizer), strict=True)
    vocab = np.array(sorted({t for row in rows for t in row}), dtype=np.int64)
    compact = {int(t): i for i, t in enumerate(vocab)}
    tokens = np.array([compact[t] for row in rows for t in row], dtype=np.int64)
    starts = np.cumsum([0, *map(len, rows)])
    np.savez(path, tokens=tokens, starts=starts, vocab=vocab, answer_lengths=np.array(answers),
             config=json.dumps(model_config()))


def builder(kind: str):
    def build(target: Path, standin_dir: Path) -> None:
        sys.path.insert(0, str(ENGINE.parent / "include"))
        from eagle_datagen_stack.drafter_training import speculators_python

        with tempfile.TemporaryDirectory() as scratch:
            corpus = Path(scratch) / "corpus.npz"
            write_corpus(kind, standin_dir, corpus)
            env = dict(os.environ, PYTHONPATH="", HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
            env.pop("VIRTUAL_ENV", None)
            done = subprocess.run([str(speculators_python()), str(TRAINER), str(corpus), str(target),
                                   "--seed", str(SEEDS[kind]), "--steps", str(STEPS),
                                   "--window", str(WINDOW)],
                                  env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"build_loop_models: training the {kind} model failed:\n{done.stderr[-3000:]}")
            print(done.stdout, end="", file=sys.stderr)
        generation = {"bos_token_id": tiny.BOS, "eos_token_id": tiny.IM_END, "do_sample": True, "temperature": 1.0,
                      "top_p": 0.95}
        (target / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n", encoding="utf-8")
        for item in standin_dir.iterdir():  # the stand-in tokenizer's files, as the tiny model carries them
            if item.is_file() and item.name != "config.json":
                shutil.copy2(item, target / item.name)
        (target / "TINY_MODEL.md").write_text(
            f"The CPU loop's {kind} model: a 4-layer Llama trained on eagle-datagen's demo prompts by "
            "engine/build_loop_models.py. See docs/internals/evaluation-cpu-loop.md.\n", encoding="utf-8")

    return build


def ensure_model(cache_root: Path, kind: str = "target") -> Path:
    sources = (Path(__file__), TRAINER, *sorted(PROMPTS.glob("*.jsonl")))
    return tiny.ensure_model(cache_root, HOMES[kind], builder(kind), sources=sources)


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--other"]
    root = Path(args[0] if args else os.environ.get("EAGLE_DATAGEN_CACHE", ".cache"))
    print(ensure_model(root.resolve(), "other" if "--other" in sys.argv else "target"))


if __name__ == "__main__":
    main()
