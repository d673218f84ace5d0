"""The drafter handoff on the real parts: a checkpoint saved by speculators 0.9.0 itself (its `Eagle3DraftModel`,
in the speculators environment), converted by `eagle-datagen convert-drafter` for a bfloat16 target, served by the
real SGLang with the flags the command printed, answers with speculative metrics. With a bfloat16 target a drafter
of another dtype crashed SGLang at its first draft step (`expected m1 and m2 to have the same dtype`); the
conversion carries the target's dtype. The trained drafter's acceptance, through the same command: the CPU loop
(test_cpu_loop.py)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from eagle_datagen_stack.cpu_loop import build_loop_target
from eagle_datagen_stack.drafter_training import missing_side_environment, speculators_python
from eagle_datagen_stack.sglang_engine import Drafter, ServerOptions, SGLangServer
from engine_support import engine_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.engine]

SAVE = """
import sys, torch
from speculators.models.eagle3.core import Eagle3DraftModel
from speculators.train.cli import create_transformer_layer_config
target, out = sys.argv[1], sys.argv[2]
layer = create_transformer_layer_config(target, 1, "llama", None, 0, [0])  # one layer, full attention
ids = torch.arange(300, 300 + 64)  # the draft vocabulary: reasoning ids of the loop target
t2d = torch.zeros(layer.vocab_size, dtype=torch.bool)
t2d[ids] = True
model = Eagle3DraftModel.from_training_args(
    layer, t2d=t2d, d2t=ids - torch.arange(len(ids)), verifier_name_or_path=target, target_layer_ids=[1, 2, 3],
    draft_vocab_size=len(ids), norm_before_residual=False, ttt_steps=3, draft_attn_impl="eager")
model.save_pretrained(out)
"""


def bfloat16_copy(target: Path, to: Path) -> Path:
    """The loop target with a bfloat16 config: SGLang serves it in bfloat16 (its weights file is float32)."""
    to.mkdir()
    for path in target.iterdir():
        if path.name != "config.json":
            (to / path.name).symlink_to(path)
    config = json.loads((target / "config.json").read_text())
    (to / "config.json").write_text(json.dumps({**config, "torch_dtype": "bfloat16"}))
    return to


def test_a_converted_speculators_checkpoint_serves_beside_a_bfloat16_target(tmp_path):
    engine_or_skip()
    reason = missing_side_environment()
    if reason:
        pytest.skip(reason)
    target = bfloat16_copy(build_loop_target(), tmp_path / "target-bf16")
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH="", TRANSFORMERS_VERBOSITY="error")
    env.pop("VIRTUAL_ENV", None)
    saved = subprocess.run([str(speculators_python()), "-c", SAVE, str(target), str(tmp_path / "checkpoint")],
                           capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert saved.returncode == 0, saved.stderr[-3000:]
    out = tmp_path / "drafter"
    converted = subprocess.run(
        [sys.executable, "-m", "eagle_datagen.cli", "convert-drafter", "--checkpoint", str(tmp_path / "checkpoint"),
         "--target-config", str(target), "--output", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert converted.returncode == 0, converted.stderr[-3000:]
    config = json.loads((out / "config.json").read_text())
    assert config["dtype"] == "bfloat16" and config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    flags = shlex.split(converted.stdout.strip())
    drafter = Drafter(out.resolve())
    assert flags == drafter.args()  # what the command prints is what the server below starts with
    with SGLangServer(target, tmp_path / "logs", ServerOptions(drafter=drafter), name="sglang-bf16-drafter") as server:
        answer = requests.post(f"{server.url}/generate", json={
            "input_ids": [163584, 1000, 163606], "sampling_params": {"max_new_tokens": 16, "temperature": 0},
        }, timeout=120)  # fmt: skip
    assert answer.status_code == 200, answer.text[:2000]
    meta = answer.json()["meta_info"]
    assert meta["spec_verify_ct"] >= 1 and len(answer.json()["output_ids"]) >= 2, meta
    assert "spec_accept_length" in meta
