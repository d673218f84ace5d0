"""Build the tiny "reasoning" model the real SGLang engine serves in tests: a Llama config and safetensors weights.

The model is a bigram chain over three token classes, made by weights rather than training
(docs/internals/real-engine.md):

- every attention `o_proj` and MLP `down_proj` is zero, so each layer adds nothing to the residual stream and
  the final norm sees the current token's embedding alone: the next-token distribution depends only on the
  current token;
- an embedding row is a one-hot vector on the token's class dimension (THINKING for `<think>` and reasoning
  ids, ANSWER_START for `</think>`, ANSWERING for answer ids, OTHER for every other id), so RMSNorm turns it
  into sqrt(hidden) * e_class;
- `lm_head`'s column of a class holds, for every id, log P(id | class) / sqrt(hidden).

So after the prompt's `<think>` the model writes reasoning ids; each step ends the reasoning with `</think>`
(P = 1/40) or, rarely, stops at once with `<|im_end|>` (P = 0.0015: a sample without `</think>`); after
`</think>` it writes at least one answer id and stops with `<|im_end|>` (P = 1/20 per step after an answer id).
At temperature 1 lengths are geometric (about 59 tokens on average; 16% run past 96, 3% past 160), and 5.8% of
samples miss `</think>`. Every single
token that the chain can end a phase with is likelier than any one reasoning id, so top_p 0.95 keeps it.

Ids: reasoning 300-1299 and answer 1400-2399 are learned BPE ids of the stand-in Kimi tokenizer
(eagle_datagen.standin.kimi_tokenizer), so both the stand-in and a real Kimi tokenizer decode them; the
special ids are Kimi-K2.5's. The directory is named Kimi-K2.5 so that preflight's model check passes
(/models/Kimi-K2.5 ~ moonshotai/Kimi-K2.5), and it carries the stand-in tokenizer's files for the one test
that serves it with a tokenizer (the others pass --skip-tokenizer-init).

Usage (the project's .venv: numpy, safetensors and eagle_datagen): python engine/build_tiny_model.py [CACHE]
prints the model directory; rebuilds only when this file or the stand-in tokenizer changed.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

VOCAB_SIZE = 163_840
HIDDEN = 64
INTERMEDIATE = 128
LAYERS = 2
HEADS = 4
MAX_POSITIONS = 16384

THINK_START, THINK_END, IM_END = 163_606, 163_607, 163_586
BOS, EOS_STANDIN, PAD = 163_584, 163_585, 163_839
REASONING_IDS = range(300, 1300)
ANSWER_IDS = range(1400, 2400)

P_END_THINKING = 1 / 40  # </think> after a reasoning id
P_SKIP_THINK_END = 0.0015  # <|im_end|> straight after a reasoning id: a sample that misses </think>
P_END_ANSWER = 1 / 20  # <|im_end|> after an answer id
P_UNUSED = 1e-12  # every id outside the chain

THINKING, ANSWER_START, ANSWERING, OTHER = 0, 1, 2, 3
CLASSES = 4
MODEL_DIR_NAME = "Kimi-K2.5"


def next_token_probabilities() -> np.ndarray:
    """P(next id | class of the current id), one row per class: shape (CLASSES, VOCAB_SIZE), rows sum to ~1."""
    table = np.full((CLASSES, VOCAB_SIZE), P_UNUSED, dtype=np.float64)
    reasoning = list(REASONING_IDS)
    answer = list(ANSWER_IDS)
    table[THINKING, reasoning] = (1 - P_END_THINKING - P_SKIP_THINK_END) / len(reasoning)
    table[THINKING, THINK_END] = P_END_THINKING
    table[THINKING, IM_END] = P_SKIP_THINK_END
    table[ANSWER_START, answer] = 1 / len(answer)  # never an empty answer
    table[ANSWERING, answer] = (1 - P_END_ANSWER) / len(answer)
    table[ANSWERING, IM_END] = P_END_ANSWER
    table[OTHER] = table[THINKING]  # a prompt that does not end in <think> still starts reasoning
    return table


def token_classes() -> np.ndarray:
    classes = np.full(VOCAB_SIZE, OTHER, dtype=np.int64)
    classes[list(REASONING_IDS)] = THINKING
    classes[THINK_START] = THINKING
    classes[list(ANSWER_IDS)] = ANSWERING
    classes[THINK_END] = ANSWER_START
    return classes


def build_weights(seed: int = 0, *, layers: int = LAYERS, table: np.ndarray | None = None,
                  classes: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The weights of a chain: `table` (P(next id | class), one row per class) over `classes` (the class of every
    id); by default this model's own. engine/build_loop_target.py builds a variant with other rows and more layers."""
    rng = np.random.default_rng(seed)
    table = next_token_probabilities() if table is None else table
    classes = token_classes() if classes is None else classes
    embed = np.zeros((VOCAB_SIZE, HIDDEN), dtype=np.float32)
    embed[np.arange(VOCAB_SIZE), classes] = 1.0
    lm_head = np.zeros((VOCAB_SIZE, HIDDEN), dtype=np.float32)
    lm_head[:, : table.shape[0]] = (np.log(table).T / math.sqrt(HIDDEN)).astype(np.float32)

    def small(rows: int, cols: int) -> np.ndarray:  # real arithmetic on the way, zeroed by o_proj/down_proj
        return rng.normal(0.0, 0.02, size=(rows, cols)).astype(np.float32)

    weights = {
        "model.embed_tokens.weight": embed,
        "lm_head.weight": lm_head,
        "model.norm.weight": np.ones(HIDDEN, dtype=np.float32),
    }
    for layer in range(layers):
        prefix = f"model.layers.{layer}"
        weights |= {
            f"{prefix}.input_layernorm.weight": np.ones(HIDDEN, dtype=np.float32),
            f"{prefix}.post_attention_layernorm.weight": np.ones(HIDDEN, dtype=np.float32),
            f"{prefix}.self_attn.q_proj.weight": small(HIDDEN, HIDDEN),
            f"{prefix}.self_attn.k_proj.weight": small(HIDDEN, HIDDEN),
            f"{prefix}.self_attn.v_proj.weight": small(HIDDEN, HIDDEN),
            f"{prefix}.self_attn.o_proj.weight": np.zeros((HIDDEN, HIDDEN), dtype=np.float32),
            f"{prefix}.mlp.gate_proj.weight": small(INTERMEDIATE, HIDDEN),
            f"{prefix}.mlp.up_proj.weight": small(INTERMEDIATE, HIDDEN),
            f"{prefix}.mlp.down_proj.weight": np.zeros((HIDDEN, INTERMEDIATE), dtype=np.float32),
        }
    return weights


def model_config(layers: int = LAYERS) -> dict:
    # `architectures` is required: without it SGLang cannot pick a model class and fails to load.
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": layers,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": HIDDEN // HEADS,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": BOS,
        "eos_token_id": IM_END,
        "pad_token_id": PAD,
        "torch_dtype": "float32",
    }


def check_ids_are_ordinary(tokenizer_dir: Path) -> None:
    """The chain's ordinary ids must be learned tokens of the stand-in, not holes or special ids."""
    if (tokenizer_dir / "tiktoken.model").is_file():  # the remote-code stand-in: `base64(bytes) rank` lines
        lines = (tokenizer_dir / "tiktoken.model").read_text(encoding="utf-8").split()
        known = {int(rank) for rank in lines[1::2]}
    else:
        known = set(
            json.loads((tokenizer_dir / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"].values()
        )
    missing = [i for i in (*REASONING_IDS, *ANSWER_IDS) if i not in known]
    if missing:
        raise SystemExit(f"build_tiny_model: ids {missing[:5]}... are not in the stand-in tokenizer: choose others")


def fingerprint(standin_dir: Path, sources: tuple[Path, ...] = ()) -> str:
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for source in sources:
        digest.update(source.read_bytes())
    digest.update(standin_dir.name.encode())  # the stand-in's own build fingerprint
    return digest.hexdigest()[:16]


def build(target: Path, standin_dir: Path, *, layers: int = LAYERS, table: np.ndarray | None = None,
          classes: np.ndarray | None = None, description: str | None = None) -> None:
    from safetensors.numpy import save_file

    check_ids_are_ordinary(standin_dir)
    target.mkdir(parents=True)
    weights = build_weights(layers=layers, table=table, classes=classes)
    save_file(weights, str(target / "model.safetensors"), metadata={"format": "pt"})
    (target / "config.json").write_text(json.dumps(model_config(layers), indent=2) + "\n", encoding="utf-8")
    generation = {"bos_token_id": BOS, "eos_token_id": IM_END, "do_sample": True, "temperature": 1.0, "top_p": 0.95}
    (target / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n", encoding="utf-8")
    # The remote-code stand-in tokenizer (tiktoken.model, tokenization_kimi.py, ...), for the tests that serve with a
    # tokenizer (loaded with --trust-remote-code, as SGLang loads the real Kimi-K2.5); the model's config stays.
    for item in standin_dir.iterdir():
        if item.is_file() and item.name != "config.json":
            shutil.copy2(item, target / item.name)
    (target / "TINY_MODEL.md").write_text(
        description
        or "A 2-layer Llama with made-up weights (a bigram chain <think> -> reasoning -> </think> -> answer -> "
        "<|im_end|>), built by eagle-datagen's engine/build_tiny_model.py for tests of the real SGLang engine. "
        "See docs/internals/real-engine.md.\n",
        encoding="utf-8",
    )


def ensure_model(cache_root: Path, home_name: str = "sglang-tiny-model", builder=build,
                 sources: tuple[Path, ...] = ()) -> Path:
    """The model directory under cache_root/home_name, built (atomically) by `builder(target, standin_dir)` if absent
    or stale (this file, `sources` or the stand-in tokenizer changed)."""
    from eagle_datagen.standin.kimi_tokenizer import standin_tokenizer_dir

    standin_dir = standin_tokenizer_dir(str(cache_root))
    home = cache_root / home_name
    model_dir = home / MODEL_DIR_NAME
    stamp = home / "fingerprint"
    wanted = fingerprint(standin_dir, sources)
    if model_dir.is_dir() and stamp.exists() and stamp.read_text().strip() == wanted:
        return model_dir
    home.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=home))
    try:
        builder(staging / MODEL_DIR_NAME, standin_dir)
        shutil.rmtree(model_dir, ignore_errors=True)
        (staging / MODEL_DIR_NAME).rename(model_dir)
        stamp.write_text(wanted + "\n")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return model_dir


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("EAGLE_DATAGEN_CACHE", ".cache"))
    print(ensure_model(root.resolve()))


if __name__ == "__main__":
    main()
