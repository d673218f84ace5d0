"""The engine's pieces without a server: the tiny model's chain, the torchvision patch, the sgl_kernel shim."""

from __future__ import annotations

import importlib.util
import subprocess

import numpy as np
import pytest

from eagle_datagen_stack.sglang_engine import SHIMS, engine_env, engine_venv, sglang_command, smg_command
from engine_support import engine_or_skip

from conftest import REPO


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "engine" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tiny_model_chain_survives_top_p_and_uses_stand_in_ids(standin_dir):
    builder = _load("build_tiny_model")
    table = builder.next_token_probabilities()
    assert np.allclose(table.sum(axis=1), 1.0, atol=1e-5)
    thinking, answer_start, answering = (table[c] for c in (builder.THINKING, builder.ANSWER_START, builder.ANSWERING))
    # the tokens that end a phase are likelier than any one chain id, so top_p 0.95 never drops them
    assert thinking[builder.THINK_END] > thinking[builder.IM_END] > thinking[list(builder.REASONING_IDS)].max()
    assert answering[builder.IM_END] > answering[list(builder.ANSWER_IDS)].max()
    assert answer_start[builder.IM_END] < 1e-9  # never an empty answer
    classes = builder.token_classes()
    assert classes[builder.THINK_START] == builder.THINKING and classes[builder.THINK_END] == builder.ANSWER_START
    builder.check_ids_are_ordinary(standin_dir)  # raises if a chain id is not a learned stand-in token


def test_tiny_model_weights_give_the_chain_as_logits():
    """What the served model computes for the last token: lm_head @ rmsnorm(embedding) (the layers add zero)."""
    builder = _load("build_tiny_model")
    weights = builder.build_weights()
    for name, value in weights.items():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            assert not value.any(), name
    embed, head = weights["model.embed_tokens.weight"], weights["lm_head.weight"]
    for token, cls in ((builder.THINK_START, builder.THINKING), (builder.THINK_END, builder.ANSWER_START)):
        hidden = embed[token] / np.sqrt(np.mean(embed[token] ** 2) + 1e-6)
        logits = head @ hidden
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        assert np.allclose(probs, builder.next_token_probabilities()[cls], rtol=1e-3, atol=1e-9)


def test_torchvision_patch_guards_both_registrations_once():
    patch = _load("patch_torchvision").patch
    source = 'x\n@torch.library.register_fake("torchvision::nms")\ndef a(): ...\n' \
             '@torch.library.register_fake("torchvision::qnms")\ndef b(): ...\n'
    patched = patch(source)
    assert patched.count("if torchvision.extension._has_ops() else (lambda fn: fn))") == 2
    assert patch(patched) == patched
    with pytest.raises(SystemExit, match="not found"):
        patch("nothing to patch")


def test_command_lines_bind_loopback_only():
    server = sglang_command(REPO / "m", 1234)
    assert server[server.index("--host") + 1] == "127.0.0.1" and "--skip-tokenizer-init" in server
    router = smg_command(["http://127.0.0.1:1"], 5, 6)
    assert router[router.index("--host") + 1] == "127.0.0.1"
    assert router[router.index("--prometheus-host") + 1] == "127.0.0.1"
    env = engine_env({"PYTHONPATH": "/elsewhere", "VIRTUAL_ENV": "/x"})
    assert env["PYTHONPATH"] == str(SHIMS) and "VIRTUAL_ENV" not in env and env["SGLANG_USE_CPU_ENGINE"] == "1"


@pytest.mark.engine
def test_sgl_kernel_shim_assigns_slots_like_the_triton_kernel():
    """The one real kernel of the shim, in the engine's torch, against a loop written from SGLang's triton
    kernel; every other name imports and raises only when called."""
    engine_or_skip()
    script = """
import torch, sgl_kernel
from sgl_kernel.kvcacheio import transfer_kv_per_layer  # any submodule name imports
table = torch.zeros((4, 10), dtype=torch.int32)
rows, starts, ends = torch.tensor([2, 0]), torch.tensor([3, 0]), torch.tensor([6, 2])
slots = torch.tensor([11, 12, 13, 21, 22], dtype=torch.int64)
sgl_kernel.assign_req_to_token_pool_cpu(rows, table, starts, ends, slots, table.shape[1])
assert table[2, 3:6].tolist() == [11, 12, 13] and table[0, 0:2].tolist() == [21, 22], table
assert int(table.sum()) == 11 + 12 + 13 + 21 + 22
try:
    transfer_kv_per_layer()
except NotImplementedError as exc:
    assert "stub" in str(exc)
else:
    raise AssertionError("a stub ran")
print("ok")
"""
    python = str(engine_venv() / "bin" / "python")
    result = subprocess.run([python, "-c", script], env=engine_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
