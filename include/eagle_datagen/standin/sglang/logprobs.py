"""Top-k logprobs of an output, as SGLang's /generate returns them with `return_logprob` and `top_logprobs_num`.

A pure function of (the output, k, a seed), so a retried request gets the same ones. Shaped like a real model's:
the most likely token takes most of the probability (Beta(4, 1.2), mean 0.77), the rest falls off
geometrically; the top-k ids are distinct tokens drawn by frequency rank (the output model's Zipf ranks, mapped
to ids as a BPE vocabulary maps them: outputs.py), so their ids compress like real ones; the sampled token is at
the rank the distribution gives it, sometimes outside the top k (its logprob then below the k-th). The answer
has SGLang's keys (tokenizer_manager.py `add_logprob_to_meta_info`): `input_token_logprobs`,
`output_token_logprobs` ([logprob, id, null] per output token), `output_token_logprobs_length`,
`input_top_logprobs`, `output_top_logprobs` (k entries per output token). The `logprobs_shape` fault leaves the
last position's top-k list out (one position short of output_ids), as a server whose logprobs lag its ids would.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from eagle_datagen.standin.sglang.outputs import OutputModel


@dataclass(frozen=True)
class LogprobRequest:
    """The top-level keys of a /generate body that ask for logprobs (None: not asked)."""

    top_logprobs_num: int = 0
    return_text: bool = False
    start_len: int = -1


def output_logprobs(
    model: OutputModel, output_ids: list[int], k: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sampled logprob per position (float32), top-k logprobs (n x k, float32, descending), top-k ids (n x k))."""
    n = len(output_ids)
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(f"logprobs:{seed}:{n}".encode()).digest()[:8], "big"))
    ids = np.asarray(output_ids, np.int64)
    top1 = rng.beta(4.0, 1.2, n)
    ratio = rng.uniform(0.3, 0.8, n)
    ranks = np.arange(max(k, 1))
    tail = (1 - top1)[:, None] * (1 - ratio)[:, None] * ratio[:, None] ** np.maximum(ranks - 1, 0)
    probs = -np.sort(-np.where(ranks[None, :] == 0, top1[:, None], tail)[:, :k], axis=1)  # most likely first
    outside = np.clip(1 - probs.sum(axis=1), 1e-12, None)
    # where the sampled token ranks: drawn from the distribution (k: outside the top k)
    draw = rng.random(n) * (probs.sum(axis=1) + outside)
    rank = np.minimum((np.cumsum(probs, axis=1) < draw[:, None]).sum(axis=1), k)
    # distinct frequency ranks per position (strictly increasing), mapped to ids
    table = model.rank_to_id
    freq = np.cumsum(1 + rng.geometric(0.05, (n, k)), axis=1) - 1
    top_ids = table[np.minimum(freq, len(table) - 1)].astype(np.int64)
    inside = rank < k
    rows = np.flatnonzero(inside)
    top_ids[rows, rank[rows]] = ids[rows]
    clash = (top_ids == ids[:, None]) & (np.arange(k)[None, :] != rank[:, None])  # the sampled id twice: replace
    if clash.any():
        spare = table[np.minimum(freq.max(axis=1) + 1, len(table) - 1)]
        top_ids[clash] = np.broadcast_to(spare[:, None], top_ids.shape)[clash]
    top = np.log(probs).astype(np.float32)
    sampled = np.empty(n, np.float32)
    sampled[rows] = top[rows, rank[rows]]
    below = np.flatnonzero(~inside)
    sampled[below] = np.log(outside[below] * rng.uniform(0.05, 0.9, below.size)).astype(np.float32)
    return sampled, top, top_ids


def logprob_fields(
    model: OutputModel,
    output_ids: list[int],
    asked: LogprobRequest,
    seed: int,
    short: bool = False,
    text: Any = None,
) -> dict[str, Any]:
    """meta_info's logprob keys for `output_ids`; `short`: the logprobs_shape fault; `text(id)`: the token text
    of return_text_in_logprobs."""
    k = asked.top_logprobs_num
    sampled, top, top_ids = output_logprobs(model, output_ids, max(k, 1), seed)
    label = (lambda i: text(i)) if asked.return_text and text is not None else (lambda i: None)
    own = [[float(lp), int(i), label(int(i))] for lp, i in zip(sampled.tolist(), output_ids, strict=True)]
    fields: dict[str, Any] = {
        "input_token_logprobs": [],
        "output_token_logprobs": own,
        "output_token_logprobs_length": len(own),
    }
    if k > 0:
        tops = [
            [[lp, i, label(i)] for lp, i in zip(row_lp, row_id, strict=True)]
            for row_lp, row_id in zip(top.tolist(), top_ids.tolist(), strict=True)
        ]
        fields |= {"input_top_logprobs": [], "output_top_logprobs": tops[:-1] if short and tops else tops}
    return fields
