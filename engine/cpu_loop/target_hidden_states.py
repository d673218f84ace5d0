"""The target's hidden states for a `speculators` export, computed in process with transformers (CPU loop only).

`speculators train` reads, for row i of its data folder, `hidden_states/hs_<i>.safetensors` with `token_ids`
(the row's ids) and `hidden_states` of shape [seq_len, len(aux) + 1, hidden]: the aux layers it feeds the drafter,
then the verifier's last hidden state (before the final norm: speculators applies the verifier's norm and lm_head
to it for the training targets). On a GPU speculators gets them from vLLM; the CPU loop has no vLLM, and a forward
of the tiny target in transformers gives the same tensors.

Layer ids here are speculators' (and vLLM's): id k is transformers' `hidden_states[k]` (0 the embeddings,
num_layers the last layer's output). transformers 5 overwrites `hidden_states[-1]` with the *normed* last state
unless `config.tie_last_hidden_states` is False, which is set below. SGLang numbers the same states one lower
(`eagle-datagen convert-drafter` converts).

Usage (.venv-speculators): python target_hidden_states.py TARGET_DIR DATA_DIR [DATA_DIR ...] --aux-layers 1,2,3
(several folders share one load of the target)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from datasets import load_from_disk
from safetensors.torch import save_file
from transformers import LlamaForCausalLM


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="target_hidden_states.py")
    parser.add_argument("target", type=Path, help="the target model folder (a LlamaForCausalLM)")
    parser.add_argument("data", type=Path, nargs="+",
                        help="speculators data folders (eagle-datagen export --format speculators)")
    parser.add_argument("--aux-layers", required=True, help="speculators' aux layer ids, e.g. 1,2,3 (no default: "
                        "the usual [2, n/2, n-3] means nothing for a small target)")
    args = parser.parse_args(argv)
    aux = [int(x) for x in args.aux_layers.split(",")]
    began = time.monotonic()
    model = LlamaForCausalLM.from_pretrained(args.target, dtype=torch.float32)
    model.config.tie_last_hidden_states = False  # hidden_states[-1]: the last layer's output, not its norm
    model.eval()
    layers = model.config.num_hidden_layers
    if not aux or min(aux) < 0 or max(aux) > layers:
        sys.exit(f"target_hidden_states.py: error: aux layer ids {aux} must lie in [0, {layers}]")
    for data in args.data:
        rows, tokens = write_hidden_states(model, data, [*aux, layers])
        print(f"hidden states of {rows} rows of {data} ({tokens} tokens, layers {aux} + {layers}) in "
              f"{time.monotonic() - began:.1f}s", flush=True)


def write_hidden_states(model, data: Path, layer_ids: list[int]) -> tuple[int, int]:
    rows = load_from_disk(str(data)).with_format(None)
    out = data / "hidden_states"
    out.mkdir(exist_ok=True)
    tokens = 0
    with torch.inference_mode():
        for index, ids in enumerate(rows["input_ids"]):
            token_ids = torch.tensor(ids, dtype=torch.long)
            states = model.model(input_ids=token_ids[None], output_hidden_states=True).hidden_states
            picked = torch.stack([states[k][0] for k in layer_ids], dim=1)  # [seq, len(layer_ids), hidden]
            tensors = {"hidden_states": picked.contiguous(), "token_ids": token_ids}
            save_file(tensors, str(out / f"hs_{index}.safetensors"))
            tokens += len(ids)
    return len(rows), tokens


if __name__ == "__main__":
    main()
