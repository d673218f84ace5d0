"""`eagle-datagen convert-drafter` on small checkpoints written here: aux ids in SGLang's numbering for the target's
class, the draft vocabulary and the target's dtype carried, weights named as SGLang loads them, and what SGLang
cannot serve refused in one line (the real speculators checkpoint served by the real SGLang:
tests/engine/test_convert_drafter_served.py)."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest
from drafter_checkpoints import (
    DRAFT_IDS,
    HIDDEN,
    VOCAB,
    K,
    bf16_bits,
    checkpoint_config,
    checkpoint_tensors,
    layer_config,
    write_checkpoint,
    write_safetensors,
    write_target,
)

from eagle_datagen.cli import main
from eagle_datagen.drafter.aux_layers import sglang_aux_layers
from eagle_datagen.drafter.convert import convert_drafter
from eagle_datagen.drafter.safetensors_file import cast_bytes, read_array, read_header
from eagle_datagen.errors import ConfigError


def written(folder):
    config = json.loads((folder / "config.json").read_text())
    return config, read_header(folder / "model.safetensors")


def test_a_checkpoint_becomes_the_layout_sglang_loads(tmp_path):
    checkpoint = write_checkpoint(tmp_path / "ck")
    target = write_target(tmp_path / "target", layers=4)
    done = convert_drafter(checkpoint, target, tmp_path / "out")
    config, tensors = written(tmp_path / "out")
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["model_type"] == "llama"
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]  # speculators 1, 2, 3: Llama
    assert config["converted_from"]["speculators_aux_layer_ids"] == [1, 2, 3]
    assert config["draft_vocab_size"] == K and config["vocab_size"] == VOCAB and config["target_hidden_size"] == HIDDEN
    assert config["num_hidden_layers"] == 1 and config["tie_word_embeddings"] is False
    assert config["max_position_embeddings"] == 128  # the target's, where longer than the draft layer's
    assert (config["dtype"], config["torch_dtype"]) == ("float32", "float32")
    assert sorted(tensors) == sorted(
        ["d2t", "t2d", "fc.weight", "norm.weight", "lm_head.weight"]
        + [f"midlayer.{n}" for n in ("input_layernorm.weight", "hidden_norm.weight", "post_attention_layernorm.weight",
                                     "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                     "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                     "mlp.down_proj.weight")]
    )  # fmt: skip  (no embedding: SGLang takes the target's)
    source = read_header(checkpoint / "model.safetensors")
    for name, info in tensors.items():  # float32 target: every tensor as it was, bit for bit
        original = source[name.replace("midlayer.", "layers.0.")]
        assert info.dtype == original.dtype and np.array_equal(read_array(info), read_array(original)), name
    assert (read_array(tensors["d2t"]) + np.arange(K)).tolist() == DRAFT_IDS.tolist()
    assert np.flatnonzero(read_array(tensors["t2d"])).tolist() == DRAFT_IDS.tolist()
    assert done.launch_flags() == [
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str((tmp_path / "out").resolve()),
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
    ]  # fmt: skip
    assert not list(tmp_path.glob(".out.partial"))


def test_the_drafter_carries_a_bfloat16_targets_dtype(tmp_path):
    values = np.array([1.0, -2.5, 1.00390625, 1.01171875, np.inf, np.nan, 3.0e-39], dtype=np.float32)
    tensors = checkpoint_tensors()
    tensors["norm.weight"] = ("F32", np.resize(values, HIDDEN).astype(np.float32))
    checkpoint = write_checkpoint(tmp_path / "ck", tensors=tensors)
    target = write_target(tmp_path / "target", dtype="bfloat16")
    done = convert_drafter(checkpoint, target, tmp_path / "out")
    config, out = written(tmp_path / "out")
    assert (config["dtype"], config["torch_dtype"], done.server_dtype) == ("bfloat16", "bfloat16", None)
    assert {info.dtype for name, info in out.items() if name not in ("d2t", "t2d")} == {"BF16"}
    assert (out["d2t"].dtype, out["t2d"].dtype) == ("I64", "BOOL")
    norm = read_array(out["norm.weight"])[: len(values)]
    # round to nearest even, as torch's .to(torch.bfloat16): 1 + 2^-8 is a tie that goes to 1, 1 + 3 * 2^-8 to
    # 1 + 2^-6; inf stays inf, NaN NaN
    expected = bf16_bits(np.array([1.0, -2.5, 1.0, 1.015625, np.inf], dtype=np.float32))
    assert norm[:5].tolist() == expected.tolist()
    assert (norm[5] & 0x7F80) == 0x7F80 and (norm[5] & 0x7F) != 0
    assert "--dtype" not in done.launch_flags()


def test_a_bfloat16_checkpoint_is_cast_to_a_float16_target_and_back_exactly():
    bits = bf16_bits(np.array([0.5, -3.0, 1.5], dtype=np.float32))
    as_f16 = np.frombuffer(b"".join(cast_bytes(bits, "BF16", "F16")), dtype="<f2")
    assert as_f16.tolist() == [0.5, -3.0, 1.5]
    back = np.frombuffer(b"".join(cast_bytes(as_f16, "F16", "BF16")), dtype="<u2")
    assert back.tolist() == bits.tolist()


def test_another_dtype_than_the_targets_puts_dtype_in_the_server_flags(tmp_path):
    checkpoint = write_checkpoint(tmp_path / "ck")
    target = write_target(tmp_path / "target", dtype="bfloat16")
    done = convert_drafter(checkpoint, target, tmp_path / "out", dtype="float16")
    assert written(tmp_path / "out")[0]["dtype"] == "float16"
    assert done.launch_flags()[-2:] == ["--dtype", "float16"]  # else SGLang serves bf16 target, fp16 drafter
    # a float32 target is served as float16 under --dtype auto, so a float16 drafter needs nothing more
    done = convert_drafter(checkpoint, write_target(tmp_path / "t32"), tmp_path / "out2", dtype="float16")
    assert done.server_dtype is None


@pytest.mark.parametrize(
    ("architecture", "speculators", "sglang"),
    [
        ("LlamaForCausalLM", [1, 30, 59], [0, 29, 58]),
        ("Qwen3MoeForCausalLM", [0, 2, 3], [-1, 1, 2]),  # 0: the embeddings, SGLang's -1
        ("KimiK25ForConditionalGeneration", [2, 30, 58], [1, 29, 57]),  # first 1: SGLang adds one back
        ("KimiK25ForConditionalGeneration", [3, 30, 58], [3, 30, 58]),  # first not 1: SGLang takes them as inputs
        ("DeepseekV3ForCausalLM", [0, 30, 60], [0, 30, 60]),
    ],
)
def test_aux_ids_in_sglangs_numbering_for_the_targets_class(architecture, speculators, sglang):
    assert list(sglang_aux_layers(speculators, architecture, 61).sglang) == sglang


def test_a_kimi_target_reads_its_text_config(tmp_path):
    checkpoint = write_checkpoint(tmp_path / "ck", checkpoint_config(aux=(2, 31, 58)))
    target = write_target(tmp_path / "kimi", "KimiK25ForConditionalGeneration", layers=61, dtype="bfloat16",
                          nested=True)
    convert_drafter(checkpoint, target / "config.json", tmp_path / "out")
    config, _ = written(tmp_path / "out")
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 30, 57]
    assert config["dtype"] == "bfloat16" and config["converted_from"]["target_architecture"].startswith("KimiK25")


def test_no_aux_ids_in_the_checkpoint_means_speculators_default(tmp_path):
    checkpoint = write_checkpoint(tmp_path / "ck", checkpoint_config(eagle_aux_hidden_state_layer_ids=None))
    convert_drafter(checkpoint, write_target(tmp_path / "t", layers=8), tmp_path / "out")
    config, _ = written(tmp_path / "out")
    assert config["converted_from"]["speculators_aux_layer_ids"] == [2, 4, 5]  # [2, n/2, n-3]
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]


def test_norms_and_a_sliding_window_are_carried(tmp_path):
    tensors = checkpoint_tensors()
    tensors.update({f"fc_norm.{i}.weight": ("F32", np.ones(HIDDEN, dtype=np.float32)) for i in range(3)})
    layer = layer_config(layer_types=["sliding_attention"], sliding_window=512)
    checkpoint = write_checkpoint(tmp_path / "ck", checkpoint_config(layer=layer, fc_norm=True, norm_output=True),
                                  tensors)
    done = convert_drafter(checkpoint, write_target(tmp_path / "t"), tmp_path / "out", num_steps=5)
    config, out = written(tmp_path / "out")
    assert config["fc_norm"] is True and config["norm_output"] is True and "fc_norm.2.weight" in out
    flags = done.launch_flags()
    assert flags[flags.index("--speculative-num-steps") + 1] == "5"
    assert flags[flags.index("--speculative-num-draft-tokens") + 1] == "6"
    assert flags[flags.index("--speculative-draft-window-size") + 1] == "512"


def test_sharded_weights_are_read_through_their_index(tmp_path):
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(checkpoint_config()))
    tensors = checkpoint_tensors()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[:6], "model-00002-of-00002.safetensors": names[6:]}
    for file, part in shards.items():
        write_safetensors(folder / file, {name: tensors[name] for name in part})
    weight_map = {name: file for file, part in shards.items() for name in part}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    convert_drafter(folder, write_target(tmp_path / "t"), tmp_path / "out")
    assert "midlayer.mlp.up_proj.weight" in written(tmp_path / "out")[1]


def _without(name):
    tensors = checkpoint_tensors()
    del tensors[name]
    return tensors


def _with(name, value):
    return {**checkpoint_tensors(), name: value}


REFUSALS = [
    ("not eagle3", dict(config=checkpoint_config(speculators_model_type="dflash")), "only EAGLE-3"),
    ("qwen3 layer", dict(config=checkpoint_config(layer=layer_config(model_type="qwen3"))), "--draft-arch llama"),
    ("two layers", dict(config=checkpoint_config(layer=layer_config(num_hidden_layers=2))), "--num-layers 1"),
    ("norm before residual", dict(config=checkpoint_config(norm_before_residual=True)), "--no-norm-before-residual"),
    ("missing tensor", dict(tensors=_without("layers.0.mlp.down_proj.weight")), "lacks the tensors"),
    ("missing norm", dict(config=checkpoint_config(norm_before_fc=True)), "lacks the tensors input_norm.weight"),
    ("vocab", dict(target=dict(vocab_size=VOCAB * 2)), "a vocabulary of 64 where the target"),
    ("hidden", dict(target=dict(hidden_size=HIDDEN * 2)), "hidden size 8"),
    ("last layer", dict(config=checkpoint_config(aux=(1, 2, 4))), "the last layer's output, which SGLang cannot"),
    ("order", dict(config=checkpoint_config(aux=(3, 1, 2))), "must ascend"),
    ("kimi first 1", dict(target=dict(architecture="KimiK25ForConditionalGeneration")), "cannot capture hidden_states"),
    ("architecture", dict(target=dict(architecture="MambaForCausalLM")), "is not known here"),
    ("lm_head rows", dict(tensors=_with("lm_head.weight", ("F32", np.ones((K + 1, HIDDEN), np.float32)))),
     r"lm_head.weight has shape \[5, 8\]"),
    ("t2d", dict(tensors=_with("t2d", ("BOOL", np.ones(VOCAB, bool)))), "d2t and t2d disagree"),
    ("fc", dict(tensors=_with("fc.weight", ("F32", np.ones((HIDDEN, 2 * HIDDEN), np.float32)))), "fc.weight"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "setup", "message"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_what_sglang_cannot_serve_is_refused_in_one_line(tmp_path, case, setup, message):
    checkpoint = write_checkpoint(tmp_path / "ck", setup.get("config"), setup.get("tensors"))
    target = write_target(tmp_path / "t", **setup.get("target", {}))
    with pytest.raises(ConfigError, match=message) as raised:
        convert_drafter(checkpoint, target, tmp_path / "out")
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_the_command_prints_the_server_flags_and_refuses_in_one_line(tmp_path, capsys):
    checkpoint = write_checkpoint(tmp_path / "ck")
    target = write_target(tmp_path / "t", dtype="bfloat16")
    assert main(["convert-drafter", "--checkpoint", str(checkpoint), "--target-config", str(target), "--output",
                 str(tmp_path / "out")]) == 0  # fmt: skip
    out, err = capsys.readouterr()
    flags = shlex.split(out.strip())
    assert flags[:2] == ["--speculative-algorithm", "EAGLE3"] and str((tmp_path / "out").resolve()) in flags
    assert "aux layers [1, 2, 3] (speculators) -> [0, 1, 2] (SGLang" in err and "bfloat16" in err
    assert main(["convert-drafter", "--checkpoint", str(checkpoint), "--target-config", str(target), "--output",
                 str(tmp_path / "out")]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists and is not an empty folder" in err
    assert main(["convert-drafter", "--checkpoint", str(tmp_path), "--target-config", str(target), "--output",
                 str(tmp_path / "o2")]) == 1  # fmt: skip
    assert "cannot read its config.json" in capsys.readouterr().err
