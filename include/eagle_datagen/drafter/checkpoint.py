"""A trained `speculators` EAGLE-3 checkpoint (speculators 0.9.0, `speculators train`'s save folder), read for
conversion: its config and the headers of its weights (one `model.safetensors`, or shards listed by
`model.safetensors.index.json`).

speculators saves an `Eagle3DraftModel`: config `speculators_model_type: eagle3` with the draft layer's config in
`transformer_layer_config`, `eagle_aux_hidden_state_layer_ids`, `draft_vocab_size`, the norm switches; weights
`layers.0.*` (the one decoder layer), `fc`, `norm`, `lm_head` (draft vocabulary rows), optional `input_norm`
(norm_before_fc) or `fc_norm.<i>` (fc_norm), `d2t`/`t2d`, and a frozen copy of the target's `embed_tokens`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle_datagen.drafter.safetensors_file import SafetensorsError, TensorInfo, read_header
from eagle_datagen.errors import ConfigError

LAYER = "layers.0."
LAYER_TENSORS = (
    "input_layernorm.weight", "hidden_norm.weight", "post_attention_layernorm.weight",
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
)  # fmt: skip  (what SGLang's LlamaForCausalLMEagle3 loads for its one layer)


@dataclass(frozen=True)
class SpeculatorsCheckpoint:
    path: Path
    config: dict[str, Any]
    tensors: dict[str, TensorInfo]

    @property
    def layer_config(self) -> dict[str, Any]:
        return self.config["transformer_layer_config"]

    @property
    def speculative_tokens(self) -> int | None:
        """The draft steps it was trained for (`--ttt-steps`), SGLang's `--speculative-num-steps` by default."""
        methods = (self.config.get("speculators_config") or {}).get("proposal_methods") or [{}]
        value = methods[0].get("speculative_tokens")
        return int(value) if value else None


def _weights(folder: Path) -> dict[str, TensorInfo]:
    index = folder / "model.safetensors.index.json"
    try:
        if index.is_file():
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            tensors: dict[str, TensorInfo] = {}
            for name in files:
                tensors.update(read_header(folder / name))
            return tensors
        if (folder / "model.safetensors").is_file():
            return read_header(folder / "model.safetensors")
    except (OSError, ValueError, KeyError, SafetensorsError) as exc:
        raise ConfigError(f"--checkpoint {folder}: cannot read its weights ({exc})") from exc
    raise ConfigError(f"--checkpoint {folder}: no model.safetensors (nor an index of shards): give the folder "
                      "`speculators train` saved (one per epoch under --save-path)")


def read_checkpoint(folder: str | Path) -> SpeculatorsCheckpoint:
    path = Path(folder)
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--checkpoint {folder}: cannot read its config.json ({exc}): give the folder "
                          "`speculators train` saved") from exc
    kind = config.get("speculators_model_type") if isinstance(config, dict) else None
    if kind != "eagle3":
        architectures = config.get("architectures") if isinstance(config, dict) else None
        found = f"a speculators {kind} checkpoint" if kind else f"not a speculators checkpoint ({architectures})"
        raise ConfigError(f"--checkpoint {folder}: {found}; only EAGLE-3 (speculators_model_type eagle3) converts")
    if not isinstance(config.get("transformer_layer_config"), dict):
        raise ConfigError(f"--checkpoint {folder}: its config lacks transformer_layer_config")
    return SpeculatorsCheckpoint(path, config, _weights(path))
