"""Two small Llama models trained at build time on the demo prompts the project ships (include/data/demo_prompts,
all categories): a prompt-dependent target for the CPU loop, and another model whose answers would be its off-policy
data. NOT YET THE LOOP'S DEFAULT (`--target`/`--other` of eagle_datagen_stack.cpu_loop take them): on whole prompts
the target writes word fragments, in transformers as in SGLang, since it is trained on each sequence's last 128 ids
(docs/internals/evaluation-cpu-loop.md). Serve them with `--dtype float32`: SGLang serves a float32 checkpoint as
float16 by default, whose greedy ids drift from transformers' (tests/engine/test_loop_models_served.py).

- **the target** answers a prompt about the prompt: its reasoning restates the last user message's first sentence
  (at most ECHO_CHARS characters), then `</think>`, the same sentence as its answer, and `<|im_end|>` (a sentence's
  end is a cue a small model learns fast; a count of ids is not). What
  it writes depends on the prompt, so a drafter measured on held-out prompts must have learned how the target
  answers (restate what it reads), not a chain of ids it saw;
- **the other model** (the off-policy baseline, as a dataset's original responses are another model's) answers each
  prompt with another demo prompt's text (a fixed shuffle): plausible text from the same corpus, in the same
  reasoning-then-answer shape, that the target did not write.

Both are Llama models (what the CPU SGLang serves) of 4 layers, so three aux-layer ids are valid in speculators'
and SGLang's conventions (drafter_training.aux_layer_ids), hidden 64, with the vocabulary of 163,840 of the
stand-in Kimi tokenizer, float32 (a drafter carries its target's dtype). Each is trained with a fixed seed for a
fixed step budget in the speculators environment (engine/cpu_loop/train_loop_model.py: torch on the CPU; both
models took 323 s, 408 CPU-s, on the busy 2-core machine) and cached like the tiny model; rebuilt only when this
file, the training script, the demo prompts, build_tiny_model.py or the stand-in tokenizer change.

Usage (the project's .venv): python engine/build_loop_models.py [CACHE] [--other] prints the model directory,
`<cache>/sglang-loop-trained/Kimi-K2.5` (or `<cache>/sglang-loop-other/Kimi-K2.5`).
"""

from __future__ import annotations

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
ECHO_CHARS = 160  # the longest first sentence restated
STEPS = 700
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


def first_sentence(text: str) -> str:
    """The text up to its first sentence end (., ?, ! or a line break), at most ECHO_CHARS characters."""
    match = re.search(r"[.?!](\s|$)|\n", text)
    end = match.end() if match else len(text)
    return text[: min(end, ECHO_CHARS)].strip()


def sequences(kind: str, tokenizer) -> list[tuple[list[int], int]]:
    """Each demo prompt rendered as a run renders it (chat template, generation prompt) and the model's answer."""
    records = prompt_records()
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    users = [encode(first_sentence(next(m["content"] for m in reversed(r["messages"]) if m["role"] == "user")))
             for r in records]
    order = np.random.default_rng(SEEDS["other"]).permutation(len(records))
    out = []
    for index, record in enumerate(records):
        text = tokenizer.apply_chat_template(record["messages"], tools=record.get("tools"),
                                             add_generation_prompt=True, tokenize=False)
        prompt = encode(text)
        said = users[index] if kind == "target" else users[order[index]]
        if kind == "other" and order[index] == index:
            said = users[(index + 1) % len(users)]
        answer = [*said, tiny.THINK_END, *said, tiny.IM_END]
        out.append(([*prompt, *answer], len(answer)))
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
                                   "--seed", str(SEEDS[kind]), "--steps", str(STEPS)],
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
