"""The CPU loop's trained target (engine/build_loop_models.py) served by the real SGLang 0.5.23 on the CPU (torch_native
attention) writes, at temperature 0, the ids transformers computes from the same weights in float32, on whole demo
prompts longer than the windows the model is trained on: the answers it was trained to write. SGLang serves a
float32 checkpoint as float16 unless told `--dtype float32` (its greedy ids then drift from float32's after a few
steps), so the server is told, as the CPU loop tells it (cpu_loop.dtype_args)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from eagle_datagen_stack.cpu_loop import dtype_args
from eagle_datagen_stack.sglang_engine import ServerOptions, SGLangServer, cache_root, engine_venv
from engine_support import engine_or_skip

ENGINE = Path(__file__).resolve().parents[2] / "engine"
sys.path.insert(0, str(ENGINE))
import build_loop_models  # noqa: E402  (engine/ is not a package)

pytestmark = [pytest.mark.slow, pytest.mark.engine]

PROMPTS = 4  # ~1 s each in transformers, as many on the server
MAX_NEW = 24


def long_prompts(tokenizer) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, the answer the target was trained to write) for the first demo prompts past 160 ids."""
    picked = [(ids[:-n], ids[-n:]) for ids, n in build_loop_models.sequences("target", tokenizer) if len(ids) > 160]
    return picked[:PROMPTS]


def test_sglang_writes_what_transformers_computes_for_the_trained_target(tmp_path, tokenizer):
    engine_or_skip()
    model = build_loop_models.ensure_model(cache_root())  # cached; a first build takes minutes
    cases = long_prompts(tokenizer)
    assert len(cases) == PROMPTS
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps([prompt for prompt, _ in cases]))
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"} | {"HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    reference = subprocess.run([str(engine_venv() / "bin" / "python"), str(ENGINE / "cpu_loop" / "greedy_ids.py"),
                                str(model), str(prompts), str(MAX_NEW)], capture_output=True, text=True, check=True,
                               env=env)
    expected = json.loads(reference.stdout)
    options = ServerOptions(extra_args=dtype_args(model))
    with SGLangServer(model, tmp_path / "logs", options, name="sglang-loop-trained") as server:
        served = []
        for prompt, _ in cases:
            body = {"input_ids": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": MAX_NEW}}
            answer = requests.post(f"{server.url}/generate", json=body, timeout=120)
            assert answer.status_code == 200, answer.text
            served.append(answer.json()["output_ids"])
    assert served == expected
    trained = sum(ids == answer for ids, (_, answer) in zip(served, cases, strict=True))
    assert trained >= PROMPTS - 1, (served, [answer for _, answer in cases])  # noqa
  # what it was trained to answer
