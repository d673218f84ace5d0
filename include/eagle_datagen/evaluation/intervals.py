"""Ratios of totals over prompts with 95% intervals from a bootstrap over prompts.

Each prompt gives a numerator and a denominator (its output tokens and verify steps, summed over its requests; or
its value and 1 for a mean over prompts). The figure is the ratio of the totals. Its interval resamples the prompts
with replacement (`RESAMPLES` times, from the fixed `SEED`, so the same records give the same interval), recomputes
the ratio each time, and takes the 2.5% and 97.5% points of those ratios (the percentile bootstrap). Prompts are
the unit, not tokens: a category samples prompts, and the tokens of one answer are not independent.

Every resampled ratio is a weighted mean of the prompts' own ratios, so the interval lies between the smallest and
the largest prompt's ratio: inside the possible range by construction (never below 1 token per verify step, as a
Student-t interval over a few skewed values could be). A paired difference resamples the prompts of both sides
jointly, so a prompt's difficulty cancels out.

Below `MIN_PROMPTS` prompts the interval is too narrow to trust (the bootstrap sees only the spread that a few
prompts happen to show; with 5 prompts a nominal 95% interval holds the truth about 80% of the time), so each
figure carries a `warning`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0
MIN_PROMPTS = 20  # below this a category cannot tell two drafters apart reliably, whatever its interval says
_CHUNK = 250  # resamples drawn at once: memory follows the chunk, not RESAMPLES x prompts

METHOD = {
    "method": "percentile bootstrap over prompts",
    "confidence": CONFIDENCE,
    "resamples": RESAMPLES,
    "seed": SEED,
    "min_prompts": MIN_PROMPTS,
}


def _resampled(n: int, statistic: Any) -> np.ndarray:
    """`statistic(counts)` for RESAMPLES draws of prompt counts (each row: how often each prompt was drawn)."""
    rng = np.random.default_rng(SEED)
    out = []
    for start in range(0, RESAMPLES, _CHUNK):
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=min(_CHUNK, RESAMPLES - start))
        out.append(statistic(counts.astype(np.float64)))
    return np.concatenate(out)


def _bounds(values: np.ndarray) -> list[float]:
    tail = (1.0 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return [float(low), float(high)]


def few_prompts(n: int) -> str | None:
    if n < MIN_PROMPTS:
        return f"only {n} prompt{'s' if n != 1 else ''}: too few to trust the interval (at least {MIN_PROMPTS})"
    return None


def ratio_interval(numerators: Sequence[float], denominators: Sequence[float], offset: float = 0.0) -> dict[str, Any]:
    """{"value", "ci95": [low, high], "n", "warning"}: offset + sum(numerators) / sum(denominators), one pair per
    prompt, with its bootstrap interval (null below two prompts); the value is null for no prompt."""
    num = np.asarray(numerators, dtype=np.float64)
    den = np.asarray(denominators, dtype=np.float64)
    n = len(num)
    if n == 0 or den.sum() <= 0:
        return {"value": None, "ci95": None, "n": n, "warning": None}
    value = offset + float(num.sum() / den.sum())
    if n == 1:
        return {"value": value, "ci95": None, "n": 1, "warning": few_prompts(1)}
    ratios = offset + _resampled(n, lambda w: (w @ num) / (w @ den))
    low, high = _bounds(ratios)
    return {"value": value, "ci95": [min(low, value), max(high, value)], "n": n, "warning": few_prompts(n)}


def mean_interval(values: Sequence[float]) -> dict[str, Any]:
    """{"mean", "ci95", "n", "sd", "warning"}: the mean over prompts (each prompt's value weighs 1) with its
    bootstrap interval; `sd` is the spread between prompts."""
    stat = ratio_interval(values, [1.0] * len(values))
    sd = float(np.std(values, ddof=1)) if len(values) > 1 else None
    return {"mean": stat["value"], "ci95": stat["ci95"], "n": stat["n"], "sd": sd, "warning": stat["warning"]}


def paired_ratio_interval(
    a: tuple[Sequence[float], Sequence[float]], b: tuple[Sequence[float], Sequence[float]]
) -> dict[str, Any]:
    """{"value", "ci95", "n", "warning"}: A's ratio of totals minus B's over the same prompts (the i-th pair of each
    side is one prompt), the prompts resampled jointly. The warning says when the prompts cannot separate the two:
    too few of them, or an interval that holds 0."""
    num_a, den_a = (np.asarray(x, dtype=np.float64) for x in a)
    num_b, den_b = (np.asarray(x, dtype=np.float64) for x in b)
    n = len(num_a)
    if n == 0 or den_a.sum() <= 0 or den_b.sum() <= 0:
        return {"value": None, "ci95": None, "n": n, "warning": "no prompt measured on both sides"}
    value = float(num_a.sum() / den_a.sum() - num_b.sum() / den_b.sum())
    if n == 1:
        return {"value": value, "ci95": None, "n": 1, "warning": few_prompts(1)}
    diffs = _resampled(n, lambda w: (w @ num_a) / (w @ den_a) - (w @ num_b) / (w @ den_b))
    low, high = _bounds(diffs)
    ci = [min(low, value), max(high, value)]
    warning = few_prompts(n)
    if warning is None and ci[0] <= 0.0 <= ci[1]:
        warning = f"the interval holds 0: these {n} prompts do not separate the two drafters"
    return {"value": value, "ci95": ci, "n": n, "warning": warning}
