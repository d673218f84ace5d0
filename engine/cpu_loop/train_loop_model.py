"""Train one of the CPU loop's small Llama models (engine/build_loop_models.py) and save it with the full vocabulary.

The corpus (CORPUS.npz, written by the builder) holds token sequences already mapped to a compact vocabulary: the
ids that occur in it, then one OTHER slot that stands for every other id of the 163,840. Training over the compact
vocabulary keeps a step cheap (the full lm_head is 163,840 x hidden). OTHER's logit is raised by log(n_other)
during training, so the model learns the probability of "any of the other ids" and, once OTHER's row is copied to
each of them, each gets its share: the saved full-vocabulary model has the trained distribution. A few input ids
are replaced by OTHER, so that an id unseen in training (a held-out prompt's) has a trained embedding.

Usage (.venv-speculators): python train_loop_model.py CORPUS.npz OUT_DIR --seed N --steps N
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="train_loop_model.py")
    parser.add_argument("corpus", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=12)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--window", type=int, default=128)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    data = np.load(args.corpus)
    config_full = json.loads(str(data["config"]))
    vocab = data["vocab"]  # compact id -> full id (OTHER, the last compact id, is not in it)
    other = len(vocab)
    flat, starts = data["tokens"], data["starts"]
    # the last WINDOW ids of each sequence (the end of its prompt and the answer): a long prompt costs no more
    sequences = [torch.tensor(flat[max(a, b - args.window):b], dtype=torch.long)
                 for a, b in zip(starts[:-1], starts[1:], strict=True)]
    # the loss is the answer's (what the model writes), not the prompt's: the prompt is only read
    targets = [seq.clone() for seq in sequences]
    for target, answer in zip(targets, data["answer_lengths"], strict=True):
        target[: len(target) - int(answer)] = -100
    config = LlamaConfig(**{**config_full, "vocab_size": other + 1, "pad_token_id": None})
    model = LlamaForCausalLM(config)
    boost = torch.zeros(other + 1)
    boost[other] = math.log(config_full["vocab_size"] - other)  # OTHER stands for this many ids
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=args.steps, pct_start=0.1)
    began = time.monotonic()
    for step in range(args.steps):
        picked = rng.choice(len(sequences), size=min(args.batch, len(sequences)), replace=False)
        batch = torch.nn.utils.rnn.pad_sequence([sequences[i] for i in picked], batch_first=True, padding_value=-100)
        labels = torch.nn.utils.rnn.pad_sequence([targets[i] for i in picked], batch_first=True, padding_value=-100)
        inputs = batch.clamp(min=0)
        inputs = torch.where(torch.rand(inputs.shape) < 0.03, torch.full_like(inputs, other), inputs)
        logits = model(input_ids=inputs, attention_mask=(batch >= 0).long()).logits + boost
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, other + 1), labels[:, 1:].reshape(-1),
                                                 ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss.item():.3f} ({time.monotonic() - began:.0f}s)", flush=True)
    save_full_vocabulary(model, vocab, config_full, args.out)


def save_full_vocabulary(model: LlamaForCausalLM, vocab: np.ndarray, config: dict, out: Path) -> None:
    """Every id outside the corpus gets OTHER's embedding and lm_head row (minus nothing: OTHER's training boost
    was log(n_other), exactly the share each of the n_other ids now takes)."""
    state = {k: v.detach().float().contiguous() for k, v in model.state_dict().items() if "rotary" not in k}
    index = torch.full((config["vocab_size"],), len(vocab), dtype=torch.long)
    index[torch.from_numpy(vocab.astype(np.int64))] = torch.arange(len(vocab))
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        state[name] = state[name][index].contiguous()
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
