"""`eagle-datagen convert-drafter`: a trained speculators EAGLE-3 checkpoint -> the folder SGLang 0.5.23 serves with
`--speculative-algorithm EAGLE3 --speculative-draft-model-path DIR`.

SGLang loads `LlamaForCausalLMEagle3` (models/llama_eagle3.py): a Llama config with `draft_vocab_size`,
`target_hidden_size` and `eagle_config` (`eagle_aux_hidden_state_layer_ids`, `use_aux_hidden_state`,
`norm_before_fc`), `fc_norm` and `norm_output` at the top; weights `midlayer.*` (the one decoder layer, the name the
published EAGLE-3 drafters use), `fc`, `norm`, `lm_head`, `input_norm` or `fc_norm.<i>` where trained with them, and
`d2t` (target id - draft id) and `t2d`, which it reads as the draft vocabulary. The embedding is the target's own at
load time, so the checkpoint's frozen copy is left out. What is carried and checked:
- the aux layer ids, in SGLang's numbering for the target's class (aux_layers.py);
- the draft vocabulary: `d2t`, `t2d` and `lm_head` agree with `draft_vocab_size`, and `t2d` with the target's
  vocabulary;
- the dtype: SGLang serves a drafter in its config's dtype and the target in the target's (with `--dtype auto`, the
  default), and a drafter of another dtype than the target's kills the server while it starts (`expected m1 and m2
  to have the same dtype ... BFloat16 != Half`, with a bfloat16 target and a float16 drafter): by default the drafter's
  floats are cast to the target's dtype and its config names it;
- what SGLang's Llama drafter cannot serve is refused: more than one draft layer, another layer type than llama
  (qwen3's q/k norms would be dropped without a word), `norm_before_residual` (SGLang's first draft layer keeps the
  un-normed residual), a hidden size other than the target's.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eagle_datagen.drafter.aux_layers import AuxLayers, sglang_aux_layers, speculators_default
from eagle_datagen.drafter.checkpoint import LAYER, LAYER_TENSORS, SpeculatorsCheckpoint, read_checkpoint
from eagle_datagen.drafter.safetensors_file import FLOAT_DTYPES, OutTensor, read_array, write_file
from eagle_datagen.drafter.target import DTYPES, TargetModel, read_target
from eagle_datagen.errors import ConfigError

SAFETENSORS_DTYPE = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
LAYER_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
              "hidden_act", "rms_norm_eps", "rope_parameters", "rope_theta", "rope_scaling", "attention_bias",
              "mlp_bias")  # fmt: skip  (the draft layer's config, as SGLang's LlamaDecoderLayer reads it)
LEFT_OUT = ("embed_tokens.weight", "verifier_lm_head.weight", "verifier_norm.weight")  # the target's own at load


@dataclass(frozen=True)
class ConvertedDrafter:
    output: Path
    target: TargetModel
    aux: AuxLayers
    dtype: str  # the drafter's weights and config
    draft_vocab_size: int
    num_steps: int
    window: int | None  # a sliding-window draft layer's window (SGLang: --speculative-draft-window-size)

    @property
    def server_dtype(self) -> str | None:
        """`--dtype` for the server when SGLang's `auto` would serve drafter and target in different dtypes."""
        served = "float16" if self.dtype == "float32" else self.dtype
        return served if served != self.target.served_dtype else None

    def launch_flags(self) -> list[str]:
        flags = [
            "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(self.output),
            "--speculative-num-steps", str(self.num_steps),
            "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(self.num_steps + 1),
        ]  # fmt: skip
        if self.window:
            flags += ["--speculative-draft-window-size", str(self.window)]
        if self.server_dtype:
            flags += ["--dtype", self.server_dtype]
        return flags


def _refuse(checkpoint: SpeculatorsCheckpoint, problem: str) -> ConfigError:
    return ConfigError(f"--checkpoint {checkpoint.path}: {problem}")


def check_layer(checkpoint: SpeculatorsCheckpoint, target: TargetModel) -> None:
    layer, config = checkpoint.layer_config, checkpoint.config
    if layer.get("model_type") != "llama":
        raise _refuse(checkpoint, f"its draft layer is {layer.get('model_type')}; SGLang's LlamaForCausalLMEagle3 "
                      "serves a llama layer: train with --draft-arch llama")
    if int(layer.get("num_hidden_layers", 1)) != 1:
        raise _refuse(checkpoint, f"{layer['num_hidden_layers']} draft layers; SGLang's LlamaForCausalLMEagle3 "
                      "serves one: train with --num-layers 1")
    if config.get("norm_before_residual"):
        raise _refuse(checkpoint, "trained with norm_before_residual, which SGLang's first draft layer does not "
                      "have: train with --no-norm-before-residual")
    if config.get("norm_before_fc") and config.get("fc_norm"):
        raise _refuse(checkpoint, "both norm_before_fc and fc_norm are set; speculators allows one")
    hidden = int(layer.get("hidden_size", 0))
    target_hidden = config.get("target_hidden_size") or hidden
    if hidden != target.hidden_size or int(target_hidden) != target.hidden_size:
        raise _refuse(checkpoint, f"hidden size {hidden} (target hidden size {target_hidden}) where the target "
                      f"{target.path} has {target.hidden_size}: convert for the target it was trained on")
    if int(layer.get("vocab_size", 0)) != target.vocab_size:
        raise _refuse(checkpoint, f"a vocabulary of {layer.get('vocab_size')} where the target {target.path} has "
                      f"{target.vocab_size}: convert for the target it was trained on")


def required_tensors(checkpoint: SpeculatorsCheckpoint, num_aux: int) -> list[str]:
    names = [LAYER + name for name in LAYER_TENSORS] + ["fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"]
    if checkpoint.config.get("norm_before_fc"):
        names.append("input_norm.weight")
    if checkpoint.config.get("fc_norm"):
        names += [f"fc_norm.{i}.weight" for i in range(num_aux)]
    return names


def check_tensors(checkpoint: SpeculatorsCheckpoint, target: TargetModel, num_aux: int) -> int:
    """The draft vocabulary size K, after checking every tensor SGLang loads is there and the shapes agree."""
    tensors = checkpoint.tensors
    missing = [name for name in required_tensors(checkpoint, num_aux) if name not in tensors]
    if missing:
        raise _refuse(checkpoint, f"lacks the tensors {', '.join(missing)}: not a complete speculators EAGLE-3 "
                      "checkpoint (saved before training ended?)")
    extra = sorted(name for name in tensors if name.startswith("layers.") and not name.startswith(LAYER))
    if extra:
        raise _refuse(checkpoint, f"has weights of more than one draft layer ({extra[0]}, ...); SGLang serves one")
    k = int(checkpoint.config.get("draft_vocab_size") or 0)
    hidden = target.hidden_size
    shapes = {"fc.weight": (hidden, num_aux * hidden), "lm_head.weight": (k, hidden), "d2t": (k,),
              "t2d": (target.vocab_size,)}  # fmt: skip
    for name, shape in shapes.items():
        if tensors[name].shape != shape:
            raise _refuse(checkpoint, f"{name} has shape {list(tensors[name].shape)} where draft_vocab_size {k}, "
                          f"{num_aux} aux layers and the target's vocabulary of {target.vocab_size} and hidden size "
                          f"{hidden} make {list(shape)}")
    d2t, t2d = read_array(tensors["d2t"]).astype(np.int64), read_array(tensors["t2d"]).astype(bool)
    draft_targets = d2t + np.arange(k)
    if k and (draft_targets.min() < 0 or draft_targets.max() >= target.vocab_size):
        raise _refuse(checkpoint, f"d2t maps a draft id outside the target's vocabulary of {target.vocab_size}")
    if int(t2d.sum()) != k or not t2d[draft_targets].all():
        raise _refuse(checkpoint, f"d2t and t2d disagree: t2d marks {int(t2d.sum())} target ids, d2t maps {k} "
                      "draft ids, not all of them marked")
    return k


def drafter_dtype(requested: str, target: TargetModel) -> str:
    if requested == "auto":
        return target.dtype or "float32"
    if requested not in DTYPES:
        raise ConfigError(f"--dtype {requested}: one of auto, {', '.join(DTYPES)}")
    return requested


def sglang_config(checkpoint: SpeculatorsCheckpoint, target: TargetModel, aux: AuxLayers, k: int,
                  dtype: str) -> dict[str, Any]:
    layer, config = checkpoint.layer_config, checkpoint.config
    positions = [p for p in (layer.get("max_position_embeddings"), target.max_position_embeddings) if p]
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        **{key: layer[key] for key in LAYER_KEYS if layer.get(key) is not None},
        "max_position_embeddings": max(positions) if positions else 4096,
        "num_hidden_layers": 1,
        "vocab_size": target.vocab_size,
        "draft_vocab_size": k,
        "target_hidden_size": target.hidden_size,
        "tie_word_embeddings": False,
        "norm_output": bool(config.get("norm_output")),
        "fc_norm": bool(config.get("fc_norm")),
        "dtype": dtype,
        "torch_dtype": dtype,
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": list(aux.sglang),
            "use_aux_hidden_state": True,
            "norm_before_fc": bool(config.get("norm_before_fc")),
        },
        "converted_from": {
            "speculators_version": config.get("speculators_version"),
            "speculators_aux_layer_ids": list(aux.speculators),
            "aux_layer_rule": aux.rule,
            "target_architecture": target.architecture,
            "target_config": str(target.path),
        },
    }


def sglang_tensors(checkpoint: SpeculatorsCheckpoint, dtype: str) -> dict[str, OutTensor]:
    out = {}
    for name, info in checkpoint.tensors.items():
        if name in LEFT_OUT:
            continue
        renamed = "midlayer." + name.removeprefix(LAYER) if name.startswith(LAYER) else name
        out[renamed] = OutTensor(info, SAFETENSORS_DTYPE[dtype] if info.dtype in FLOAT_DTYPES else info.dtype)
    return out


def _window(layer: dict[str, Any]) -> int | None:
    types = layer.get("layer_types") or []
    return int(layer["sliding_window"]) if types[:1] == ["sliding_attention"] and layer.get("sliding_window") else None


def _check_output(output: Path) -> None:
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise ConfigError(f"--output {output}: exists and is not an empty folder: name a new one")


def convert_drafter(checkpoint_dir: str | Path, target_config: str | Path, output: str | Path, dtype: str = "auto",
                    num_steps: int | None = None) -> ConvertedDrafter:
    """Check everything first, then write the folder beside `output` (`.NAME.partial`) and rename it into place."""
    output = Path(output)
    _check_output(output)
    target = read_target(target_config)
    checkpoint = read_checkpoint(checkpoint_dir)
    check_layer(checkpoint, target)
    ids = checkpoint.config.get("eagle_aux_hidden_state_layer_ids") or speculators_default(target.num_layers)
    aux = sglang_aux_layers(ids, target.architecture, target.num_layers)
    k = check_tensors(checkpoint, target, len(aux.speculators))
    chosen = drafter_dtype(dtype, target)
    steps = num_steps or checkpoint.speculative_tokens or 3
    partial = output.parent / f".{output.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        write_file(partial / "model.safetensors", sglang_tensors(checkpoint, chosen), {"format": "pt"})
        config = sglang_config(checkpoint, target, aux, k, chosen)
        (partial / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        if output.exists():
            output.rmdir()
        os.replace(partial, output)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return ConvertedDrafter(output.resolve(), target, aux, chosen, k, steps, _window(checkpoint.layer_config))
