"""Deterministic outputs shaped like a reasoning model's: reasoning, </think>, answer, EOS; or, for a prompt that
ends in a closed think block (instant mode: `<think></think>`), the answer and EOS alone, as the real model gives.

Each output is a pure function of (prompt ids, sampling_seed, sample index), so a retried request gets the
same tokens and a test can predict them. Ordinary tokens follow a Zipf law over frequency ranks (never a
special id), so token statistics (frequent tokens, a long tail) look like text.

Ranks map to ids as in a byte-level BPE vocabulary, where an id is a merge rank: frequent tokens are merged
early and get small ids, but not in frequency order (" the" is not id 0; byte tokens of rare bytes are).
Rank r gets the place of log(r + RANK_OFFSET) + N(0, RANK_ID_SPREAD^2) among all ranks' keys (a fixed,
seeded draw). The constants are fitted to a real BPE (Mistral's 150k-rank Tekken) on natural text, prose in
26 languages and code, of bench/bench_storage.py: there, frequency rank and id have a rank correlation of
0.44, the 10 most frequent tokens have ids around 30-290 (median 48), ranks 1,000-10,000 ids around
2,000-81,000 (median 17,000), and 19%, 63% and 94% of tokens have ids below 256, 4,096 and 65,536; this
mapping gives 0.44, 62-1,800 (377), 1,900-68,000 (15,000) and 24%, 71%, 93%. A random permutation
(used before) has no such correlation, which made the stored ids look far less compressible than real
ones (docs/internals/benchmarks.md, "Storage").
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from eagle_datagen.standin.sglang.config import SimConfig

# How far an output's share of reasoning strays from the configured fraction, either way.
REASONING_JITTER = 0.1
# Frequency rank -> id (see the module docstring): an offset on the log rank and the spread of its noise.
RANK_OFFSET = 100
RANK_ID_SPREAD = 1.6


@dataclass(frozen=True)
class Generation:
    output_ids: list[int]
    finish_reason: dict[str, Any]


def output_seed(prompt_ids: Sequence[int], sampling_seed: int | None, sample_index: int) -> int:
    """sha256 of the prompt as int32 bytes, the sampling seed (None if absent) and the sample index."""
    digest = hashlib.sha256(np.asarray(prompt_ids, dtype=np.int32).tobytes())
    digest.update(f"|sampling_seed={sampling_seed!r}|sample={sample_index}".encode())
    return int.from_bytes(digest.digest()[:16], "little")


def rank_to_id(ids: np.ndarray, seed: int) -> np.ndarray:
    """The ids (sorted) reordered by frequency rank: a BPE-like, seeded mapping (see the module docstring)."""
    ranks = np.arange(len(ids), dtype=np.float64)
    keys = np.log(ranks + RANK_OFFSET) + np.random.default_rng(seed).normal(0.0, RANK_ID_SPREAD, len(ids))
    mapping = np.empty(len(ids), dtype=ids.dtype)
    mapping[np.argsort(keys, kind="stable")] = ids
    return mapping


class OutputModel:
    """Samples outputs for one server config; the CDF and the rank-to-id table are built once (~15 ms).

    `ordinary_ids` narrows the ordinary ids to those a real tokenizer knows (so decoded text is not empty);
    by default they are range(config.ordinary_vocab).
    """

    def __init__(self, config: SimConfig, ordinary_ids: Sequence[int] | None = None) -> None:
        self.config = config
        ids = np.arange(config.ordinary_vocab) if ordinary_ids is None else np.asarray(sorted(ordinary_ids))
        weights = np.arange(1, len(ids) + 1, dtype=np.float64) ** -config.zipf_exponent
        cdf = np.cumsum(weights)
        self._cdf = cdf / cdf[-1]
        self.rank_to_id = rank_to_id(ids, config.vocab_seed)

    def ordinary_tokens(self, rng: np.random.Generator, count: int) -> np.ndarray:
        ranks = np.searchsorted(self._cdf, rng.random(count), side="right")
        return self.rank_to_id[np.minimum(ranks, len(self.rank_to_id) - 1)]

    def generate(
        self,
        prompt_ids: Sequence[int],
        *,
        sampling_seed: int | None = None,
        sample_index: int = 0,
        max_new_tokens: int | None = 128,
        min_new_tokens: int = 0,
        stop_token_ids: Iterable[int] = (),
        ignore_eos: bool = False,
        think_end: bool = True,
        instant: bool = False,
    ) -> Generation:
        """The output SGLang would return, with its finish reason (`stop` with the matched id, or `length`).

        As in SGLang, `ignore_eos` turns off every token-based stop (EOS and `stop_token_ids`), and stop
        tokens do not count before `min_new_tokens` ids have been generated. `think_end=False` leaves
        </think> out (the no_think_end fault). `instant`: no reasoning and no </think>, the answer alone (of the
        same drawn length).
        """
        cfg = self.config
        limit = cfg.context_length - len(prompt_ids)
        if max_new_tokens is not None:
            limit = min(limit, max_new_tokens)
        limit = max(limit, 0)
        rng = np.random.default_rng(output_seed(prompt_ids, sampling_seed, sample_index))
        total = int(rng.integers(cfg.output_tokens_min, cfg.output_tokens_max + 1))
        fraction = cfg.reasoning_fraction + rng.uniform(-REASONING_JITTER, REASONING_JITTER)
        body = total - 2  # ordinary tokens around </think>, before EOS
        natural = body + int(think_end and not instant) + 1
        # a model kept from stopping before min_new_tokens writes on; ignore_eos writes on to the limit
        extra = max(0, limit - natural) if ignore_eos else max(0, min_new_tokens + 1 - natural)
        ordinary = self.ordinary_tokens(rng, body + extra)
        reasoning = 0 if instant else round(body * min(max(fraction, 0.0), 1.0))
        closes = think_end and not instant
        parts = [ordinary[:reasoning], [cfg.think_end_id] if closes else [], ordinary[reasoning:body]]
        if ignore_eos:
            parts += [[cfg.eos_id], ordinary[body:]]
        else:
            parts += [ordinary[body:], [cfg.eos_id]]
        sequence = np.concatenate([np.asarray(p, dtype=np.int64) for p in parts])

        if not ignore_eos:
            stops = {cfg.eos_id, *stop_token_ids}
            hits = np.flatnonzero(np.isin(sequence[min_new_tokens:limit], list(stops)))
            if hits.size:
                end = min_new_tokens + int(hits[0]) + 1
                return Generation(sequence[:end].tolist(), {"type": "stop", "matched": int(sequence[end - 1])})
        return Generation(sequence[:limit].tolist(), {"type": "length", "length": limit})
