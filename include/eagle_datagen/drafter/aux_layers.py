"""The drafter's aux layer ids: speculators' numbering to the numbers SGLang 0.5.23 must read to capture the same
hidden states.

Two conventions. **speculators** (and vLLM) number an aux state as transformers' `hidden_states[k]`: 0 the
embeddings, k the output of layer k - 1, `num_layers` the last layer's output. **SGLang** captures, for each id w
in the drafter's `eagle_config.eagle_aux_hidden_state_layer_ids`, the input of one layer, and which layer depends
on the target's model class (`set_eagle3_layers_to_capture`, read from the 0.5.23 sources):
- most classes (Llama, Qwen, Gemma, GLM-4 MoE, MiniMax, ...) capture the input of layer w + 1, which is
  `hidden_states[w + 1]`: SGLang's ids are speculators' minus one (speculators 1, 2, 3 are SGLang 0, 1, 2);
- the DeepSeek-V2/V3 family (Kimi-K2.5's language model among them) adds the one only when the first id is 1, and
  otherwise captures the input of layer w, `hidden_states[w]`: speculators ids starting at 2 are written minus one
  (their first becomes 1), any other first id as it is; a first id of 1 (`hidden_states[1]`) cannot be asked for.
SGLang captures in layer order and concatenates in that order, so the ids must ascend; it cannot capture the last
layer's output (no layer takes it as input), so speculators' id `num_layers` is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle_datagen.errors import ConfigError

# Classes whose capture adds one only when the first id is 1 (deepseek_v2.py, glm4_moe_lite.py, mistral_large_3.py;
# kimi_k25.py hands the ids to its DeepseekV3ForCausalLM).
FIRST_IS_ONE = frozenset({
    "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "KimiK25ForConditionalGeneration",
    "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "MistralLarge3ForCausalLM",
})  # fmt: skip
# Classes that always add one (gpt_oss.py adds none when the largest id is the layer count, which no id written
# here is).
PLUS_ONE = frozenset({
    "ApertusForCausalLM", "BailingMoEForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
    "ExaoneMoEForCausalLM", "ExaoneMoeForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration",
    "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", "Glm4MoeForCausalLM", "Glm5NextForConditionalGeneration",
    "GptOssForCausalLM", "IQuestCoderForCausalLM", "InternLM3ForCausalLM", "Llama4ForCausalLM",
    "Llama4ForConditionalGeneration", "LlamaForCausalLM", "LongcatFlashForCausalLM", "MellumForCausalLM",
    "MiniMaxM2ForCausalLM", "MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration",
    "Ministral3ForCausalLM", "MistralForCausalLM", "Phi3ForCausalLM", "Qwen2ForCausalLM", "Qwen2MoeForCausalLM",
    "Qwen2_5_VLForConditionalGeneration", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM",
    "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration", "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "SarvamMoEForCausalLM", "TeleFLMForCausalLM",
})  # fmt: skip


@dataclass(frozen=True)
class AuxLayers:
    speculators: tuple[int, ...]  # transformers' hidden_states[k]
    sglang: tuple[int, ...]  # what the converted drafter's config says
    rule: str  # how one became the other, for the conversion's summary


def speculators_default(num_layers: int) -> list[int]:
    """The ids speculators trains with when none are given (models/utils.py, `resolve_target_layer_ids`)."""
    return [2, num_layers // 2, num_layers - 3]


def sglang_aux_layers(speculators: list[int], architecture: str, num_layers: int) -> AuxLayers:
    ids = tuple(int(k) for k in speculators)
    where = f"aux layer ids {list(ids)} (speculators' numbering) for a {num_layers}-layer {architecture}"
    if not ids:
        raise ConfigError(f"{where}: the checkpoint names no aux layer")
    if list(ids) != sorted(set(ids)):
        raise ConfigError(f"{where}: SGLang captures aux states in layer order, so the ids must ascend without "
                          "repeats: train with --target-layer-ids in ascending order")
    if ids[0] < 0 or ids[-1] > num_layers - 1:
        last = " (the last layer's output, which SGLang cannot capture)" if ids[-1] == num_layers else ""
        raise ConfigError(f"{where}: id {ids[-1] if ids[-1] > num_layers - 1 else ids[0]} is out of range{last}: "
                          f"SGLang serves ids 0 to {num_layers - 1}; train with --target-layer-ids in that range")
    if architecture in FIRST_IS_ONE:
        if ids[0] == 1:
            raise ConfigError(f"{where}: SGLang 0.5.23 reads a first id of 1 in this family as the output of layer 1, "
                              "so it cannot capture hidden_states[1]: train with a first id of 0 or 2 and up")
        if ids[0] == 2:
            return AuxLayers(ids, tuple(k - 1 for k in ids), "minus one (SGLang adds one back: its first id is 1)")
        return AuxLayers(ids, ids, "as they are (SGLang reads them as layer inputs: their first id is not 1)")
    if architecture in PLUS_ONE:
        return AuxLayers(ids, tuple(k - 1 for k in ids), "minus one (SGLang captures the output of layer id)")
    raise ConfigError(f"target architecture {architecture}: how SGLang 0.5.23 numbers its aux layers is not known "
                      "here (it captures none for EAGLE-3, or by a rule of its own); convert for a target of a "
                      "known class (Llama, Qwen, DeepSeek-V3, Kimi-K2.5, ...)")
