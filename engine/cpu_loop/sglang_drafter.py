"""Convert a `speculators` EAGLE-3 checkpoint into the layout SGLang 0.5.23 serves as a drafter (CPU loop only).

speculators saves an `Eagle3DraftModel` (config `speculators_model_type: eagle3`, weights `layers.0.*`, `fc`,
`input_norm`, `norm`, `lm_head`, `d2t`/`t2d`, a frozen copy of the target's `embed_tokens`, bfloat16). SGLang loads
`LlamaForCausalLMEagle3` (models/llama_eagle3.py): a Llama config with `draft_vocab_size` and
`eagle_config.eagle_aux_hidden_state_layer_ids`, weights named as the published EAGLE-3 drafters name them
(`midlayer.*` for the one decoder layer, `fc`, `norm`, `lm_head`, `d2t` as `target id - draft id`, `t2d`), with the
embedding taken from the target at load time. What must agree, and is carried over here:
- **aux layer ids, one lower**: speculators numbers them as transformers' `hidden_states[k]`, SGLang as layer
  outputs (id L is `hidden_states[L + 1]`); ids 1,2,3 in speculators are 0,1,2 in SGLang;
- `norm_before_fc` (speculators' default: one RMSNorm over the concatenated aux states, `input_norm`) goes to
  `eagle_config.norm_before_fc`; `norm_output` (the hidden state handed to the next draft step is the normed one)
  to the config's `norm_output`;
- `norm_before_residual` must be False (`--no-norm-before-residual` when training): SGLang's first draft layer keeps
  the un-normed hidden state as its residual and has no switch for the other way;
- float32, the tiny target's dtype (SGLang casts the draft to its own dtype anyway).

Usage (.venv-speculators): python sglang_drafter.py SPECULATORS_CHECKPOINT_DIR OUT_DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

SKIPPED = ("embed_tokens.weight", "verifier_lm_head.weight", "verifier_norm.weight")


def sglang_config(config: dict) -> dict:
    layer = config["transformer_layer_config"]
    if config.get("norm_before_residual"):
        sys.exit("sglang_drafter.py: error: the drafter was trained with norm_before_residual, which SGLang's "
                 "LlamaForCausalLMEagle3 cannot serve: train with --no-norm-before-residual")
    aux = [layer_id - 1 for layer_id in config["eagle_aux_hidden_state_layer_ids"]]
    verifier = Path(config["speculators_config"]["verifier"].get("name_or_path") or "") / "config.json"
    if verifier.is_file():  # SGLang captures layer outputs up to the one before the last
        layers = json.loads(verifier.read_text())["num_hidden_layers"]
        if max(aux) > layers - 2:
            sys.exit(f"sglang_drafter.py: error: speculators aux layer id {max(aux) + 1} is the last layer's output "
                     f"of a {layers}-layer target, which SGLang cannot capture: train with ids up to {layers - 1}")
    keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "hidden_act", "max_position_embeddings", "rms_norm_eps", "rope_parameters", "vocab_size")
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        **{key: layer[key] for key in keys if key in layer},
        "num_hidden_layers": layer["num_hidden_layers"],
        "draft_vocab_size": config["draft_vocab_size"],
        "target_hidden_size": config.get("target_hidden_size") or layer["hidden_size"],
        "tie_word_embeddings": False,
        "norm_output": bool(config.get("norm_output")),
        "torch_dtype": "float32",
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": aux,
            "use_aux_hidden_state": True,
            "norm_before_fc": bool(config.get("norm_before_fc")),
        },
        "converted_from": {"speculators_version": config.get("speculators_version"),
                           "speculators_aux_layer_ids": config["eagle_aux_hidden_state_layer_ids"]},
    }


def sglang_weights(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for name, tensor in weights.items():
        if name in SKIPPED:
            continue
        if name.startswith("layers.0."):
            name = "midlayer." + name.removeprefix("layers.0.")
        elif name.startswith("layers."):
            sys.exit(f"sglang_drafter.py: error: {name}: SGLang's LlamaForCausalLMEagle3 serves one decoder layer")
        out[name] = tensor if tensor.dtype in (torch.int64, torch.bool) else tensor.to(torch.float32).contiguous()
    missing = {"fc.weight", "lm_head.weight", "norm.weight", "d2t", "t2d"} - set(out)
    if missing:
        sys.exit(f"sglang_drafter.py: error: the checkpoint lacks {sorted(missing)}")
    return out


def convert(checkpoint: Path, out: Path) -> None:
    config = json.loads((checkpoint / "config.json").read_text())
    if config.get("speculators_model_type") != "eagle3":
        sys.exit(f"sglang_drafter.py: error: {checkpoint} is not a speculators eagle3 checkpoint")
    out.mkdir(parents=True, exist_ok=True)
    save_file(sglang_weights(load_file(str(checkpoint / "model.safetensors"))), str(out / "model.safetensors"),
              metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(sglang_config(config), indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sglang_drafter.py")
    parser.add_argument("checkpoint", type=Path, help="a speculators checkpoint (config.json, model.safetensors)")
    parser.add_argument("out", type=Path, help="the SGLang drafter folder to write")
    args = parser.parse_args(argv)
    convert(args.checkpoint, args.out)
    print(args.out)


if __name__ == "__main__":
    main()
