"""Means with 95% confidence intervals over prompts: Student's t interval, mean +- t(0.975, n-1) x s / sqrt(n).

Prompts are the unit (one value per prompt, its requests' mean), since prompts, not tokens, are what a category
samples: tokens of one answer are not independent. The t quantile is computed here (the regularized incomplete
beta function by its continued fraction, then bisection), so that no statistics package is needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

CONFIDENCE = 0.95


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (Lentz's method)."""
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t value below which a share p of Student's t with df degrees of freedom lies (0.5 < p < 1)."""
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-12:
            break
    return (low + high) / 2.0


def mean_interval(values: Sequence[float]) -> dict[str, Any]:
    """{"mean", "ci95": [low, high], "n", "sd"}: the interval is null for fewer than two values (no spread to
    judge); the mean is null for none."""
    n = len(values)
    if n == 0:
        return {"mean": None, "ci95": None, "n": 0, "sd": None}
    mean = math.fsum(values) / n
    if n == 1:
        return {"mean": mean, "ci95": None, "n": 1, "sd": None}
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(0.5 + CONFIDENCE / 2, n - 1) * sd / math.sqrt(n)
    return {"mean": mean, "ci95": [mean - half, mean + half], "n": n, "sd": sd}
