"""Small speculators EAGLE-3 checkpoints and target configs for the conversion tests, written with numpy as
`speculators train` (0.9.0) lays them out (config keys and tensor names read from a checkpoint it saved)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

HIDDEN, INTER, VOCAB, K = 8, 16, 64, 4
DRAFT_IDS = np.array([3, 7, 9, 40])  # the K target ids of the draft vocabulary


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits by truncation (exact for the values the tests use)."""
    return (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def write_safetensors(path: Path, tensors: dict[str, tuple[str, np.ndarray]]) -> None:
    """name -> (safetensors dtype, array); a BF16 array is its uint16 bits."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (dtype, array) in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + b"".join(blobs))


def layer_config(**changes) -> dict:
    config = {
        "model_type": "llama", "hidden_size": HIDDEN, "intermediate_size": INTER, "num_attention_heads": 2,
        "num_key_value_heads": 2, "head_dim": 4, "hidden_act": "silu", "max_position_embeddings": 64,
        "rms_norm_eps": 1e-6, "vocab_size": VOCAB, "num_hidden_layers": 1, "layer_types": ["full_attention"],
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "sliding_window": 0,
    }  # fmt: skip
    return {**config, **changes}


def checkpoint_config(aux=(1, 2, 3), layer=None, **changes) -> dict:
    config = {
        "architectures": ["Eagle3DraftModel"], "speculators_model_type": "eagle3", "speculators_version": "0.9.0",
        "draft_vocab_size": K, "eagle_aux_hidden_state_layer_ids": list(aux), "norm_before_fc": False,
        "fc_norm": False, "norm_output": False, "norm_before_residual": False, "target_hidden_size": None,
        "dtype": "float32", "transformer_layer_config": layer or layer_config(),
        "speculators_config": {"algorithm": "eagle3", "proposal_methods": [{"proposal_type": "greedy",
                                                                            "speculative_tokens": 3}]},
    }  # fmt: skip
    return {**config, **changes}


def checkpoint_tensors(num_aux: int = 3, dtype: str = "F32", seed: int = 0) -> dict[str, tuple[str, np.ndarray]]:
    rng = np.random.default_rng(seed)

    def floats(*shape):
        values = rng.standard_normal(shape).astype(np.float32)
        return (dtype, bf16_bits(values)) if dtype == "BF16" else (dtype, values.astype({"F32": "<f4",
                                                                                          "F16": "<f2"}[dtype]))

    t2d = np.zeros(VOCAB, dtype=bool)
    t2d[DRAFT_IDS] = True
    layer = {
        "input_layernorm.weight": floats(HIDDEN), "hidden_norm.weight": floats(HIDDEN),
        "post_attention_layernorm.weight": floats(HIDDEN), "self_attn.q_proj.weight": floats(HIDDEN, 2 * HIDDEN),
        "self_attn.k_proj.weight": floats(HIDDEN, 2 * HIDDEN), "self_attn.v_proj.weight": floats(HIDDEN, 2 * HIDDEN),
        "self_attn.o_proj.weight": floats(HIDDEN, HIDDEN), "mlp.gate_proj.weight": floats(INTER, HIDDEN),
        "mlp.up_proj.weight": floats(INTER, HIDDEN), "mlp.down_proj.weight": floats(HIDDEN, INTER),
    }  # fmt: skip
    return {
        **{f"layers.0.{name}": value for name, value in layer.items()},
        "fc.weight": floats(HIDDEN, num_aux * HIDDEN), "norm.weight": floats(HIDDEN),
        "lm_head.weight": floats(K, HIDDEN), "embed_tokens.weight": floats(VOCAB, HIDDEN),
        "d2t": ("I64", (DRAFT_IDS - np.arange(K)).astype("<i8")), "t2d": ("BOOL", t2d),
    }  # fmt: skip


def write_checkpoint(folder: Path, config: dict | None = None, tensors: dict | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config or checkpoint_config()))
    write_safetensors(folder / "model.safetensors", tensors or checkpoint_tensors())
    return folder


def write_target(folder: Path, architecture: str = "LlamaForCausalLM", layers: int = 4, dtype: str | None = "float32",
                 nested: bool = False, **changes) -> Path:
    """A target's config.json; `nested`: as Kimi-K2.5's, the language model's fields in text_config."""
    text = {"num_hidden_layers": layers, "vocab_size": VOCAB, "hidden_size": HIDDEN, "max_position_embeddings": 128,
            **({"dtype": dtype} if dtype else {}), **changes}  # fmt: skip
    config = {"architectures": [architecture], "text_config": text} if nested else {"architectures": [architecture],
                                                                                    **text}
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder
