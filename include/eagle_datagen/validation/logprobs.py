"""Token-level checks of an answer's top-k logprobs (soft targets), when the run asked for them.

The answer must hold, for every output token, the sampled token's own entry (its id the output's id at that
position, its logprob a number) and exactly k top entries (ids in the vocabulary, logprobs that are numbers at
most 0, -inf allowed: a token the temperature left no probability); where the sampled token is among its top k,
its logprob there must be the one the server gave it (both are read from the same distribution, so they agree to
the bit). The first failing check names the sample's reason (validation/rules.py REASONS, after the token checks).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from eagle_datagen.inference.logprobs import Logprobs

# A logprob is log(p) <= 0; a float32 rounding of log(1) may come out a hair above.
MAX_LOGPROB = 1e-4

REASONS: dict[str, str] = {
    "logprobs_missing": "top-k logprobs were asked for, and the answer has none",
    "logprobs_shape": "the logprobs are not one sampled entry and k top entries per output token, in its order",
    "logprobs_invalid": "a logprob that is not a number at most 0, or a top-k id outside the vocabulary",
    "logprob_mismatch": "the sampled token's own logprob is missing, or differs from its entry in the top k",
}


def check_logprobs(row: dict[str, Any], output: np.ndarray, vocab_size: int) -> tuple[str, str] | None:
    """None when the row's logprobs are sound or were not asked for (`top_logprobs_num` 0 or absent)."""
    k = row.get("top_logprobs_num") or 0
    if not k:
        return None
    stored = row.get("logprobs")
    if not stored:
        return "logprobs_missing", f"top-{k} logprobs were asked for; the answer has none (return_logprob ignored?)"
    if "malformed" in stored:
        return "logprobs_shape", f"the logprobs cannot be read: {stored['malformed']}"
    found = Logprobs.decode(stored)
    n = len(output)
    if len(found.sampled) != n or len(found.counts) != n or len(found.sampled_ids) != n:
        return (
            "logprobs_shape",
            f"{len(found.sampled)} sampled and {len(found.counts)} top-k positions for {n} output tokens",
        )
    wrong = np.flatnonzero(found.counts != k)
    if wrong.size:
        i = int(wrong[0])
        return "logprobs_shape", f"position {i} has {int(found.counts[i])} top entries, not {k} ({wrong.size} such)"
    misaligned = np.flatnonzero((found.sampled_ids != output) & (found.sampled_ids != -1))
    if misaligned.size:
        i = int(misaligned[0])
        return (
            "logprobs_shape",
            f"the sampled entry at position {i} is token {int(found.sampled_ids[i])}, the output has {int(output[i])}",
        )
    if len(found.top) != n * k or len(found.top_ids) != n * k:
        return "logprobs_shape", f"{len(found.top)} top entries for {n} positions of {k}"
    top = found.top.reshape(n, k)
    ids = found.top_ids.reshape(n, k)
    if np.isnan(top).any() or (top > MAX_LOGPROB).any():
        i = int(np.flatnonzero(np.isnan(top).any(axis=1) | (top > MAX_LOGPROB).any(axis=1))[0])
        return "logprobs_invalid", f"position {i} has a top-k logprob that is not a number at most 0: {top[i].tolist()}"
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        bad = int(ids[(ids < 0) | (ids >= vocab_size)][0])
        return "logprobs_invalid", f"a top-k id outside [0, {vocab_size}): {bad}"
    missing = np.flatnonzero(np.isnan(found.sampled) | (found.sampled_ids == -1))
    if missing.size:
        where = f"{missing.size} position(s), first {int(missing[0])}"
        return "logprob_mismatch", f"the sampled token's own logprob is missing at {where}"
    in_top = ids == output[:, None]
    rows, cols = np.nonzero(in_top)
    differ = np.flatnonzero(top[rows, cols] != found.sampled[rows])
    if differ.size:
        i = int(rows[differ[0]])
        return (
            "logprob_mismatch",
            f"position {i}: the sampled token {int(output[i])} has logprob {float(found.sampled[i])!r}, but "
            f"{float(top[i, cols[differ[0]]])!r} in the top {k}",
        )
    return None
