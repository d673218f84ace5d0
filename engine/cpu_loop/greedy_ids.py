"""Greedy continuations of token-id prompts computed by transformers in float32: the reference a served model is
compared with (tests/engine/test_loop_models_served.py).

Usage (an environment with torch and transformers, e.g. .venv-sglang): python greedy_ids.py MODEL_DIR PROMPTS.json
MAX_NEW prints a JSON list of id lists, one per prompt of PROMPTS.json (a list of id lists); each stops after the
config's eos id.
"""

from __future__ import annotations

import json
import sys

import torch
from transformers import LlamaForCausalLM


def main() -> None:
    model_dir, prompts_path, max_new = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.set_num_threads(1)
    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    out = []
    for prompt in json.loads(open(prompts_path, encoding="utf-8").read()):
        with torch.no_grad():
            ids = model.generate(torch.tensor([prompt]), max_new_tokens=max_new, do_sample=False)
        out.append(ids[0, len(prompt):].tolist())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
