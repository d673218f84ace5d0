"""The numbers of an evaluation, computed from its per-request records alone (records.py), so that anyone can
recompute them from the records file.

Per category (and overall, every prompt pooled): the requests, those failed and those answered without
speculative metrics (counted, never averaged in); the mean accept length and accept rate over prompts with their
95% intervals (intervals.py; a prompt's value is the mean of its `ok` requests); verify steps, drafts accepted and
proposed, the histogram of drafts accepted per verify step summed over requests; output tokens per second and
latency per request. Paired: per prompt measured on both sides, A's value minus B's, and the interval of that
difference, which is narrower than the two intervals side by side because a prompt's difficulty cancels out.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from eagle_datagen.evaluation.intervals import mean_interval
from eagle_datagen.modes import THINKING

METRICS = ("accept_length", "accept_rate")  # the per-prompt means: meta_info spec_accept_length, spec_accept_rate
OVERALL = "overall"


def prompt_values(rows: Iterable[dict[str, Any]], metric: str) -> dict[tuple[str, str], float]:
    """(category, prompt_key) -> the mean of the prompt's measured requests."""
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in rows:
        if row["status"] == "ok":
            values[(row["category"], row["prompt_key"])].append(row[f"spec_{metric}"])
    return {key: math.fsum(v) / len(v) for key, v in values.items()}


def failure_kind(error: str | None) -> str:
    """The kind of a failed request's error (`http_503`, `lost`, `no_endpoint`, ...), for counting."""
    text = (error or "unknown").removeprefix("gave up after ")
    if text[:1].isdigit():  # "gave up after 8 attempts: http_503: ..."
        text = text.partition(": ")[2]
    return text.partition(":")[0].strip() or "unknown"


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _spread(values: list[float]) -> dict[str, float | None]:
    return {
        "mean": math.fsum(values) / len(values) if values else None,
        "p50": _quantile(values, 0.5),
        "p90": _quantile(values, 0.9),
    }


def _histogram(rows: list[dict[str, Any]]) -> dict[str, list] | None:
    counts: list[int] = []
    for row in rows:
        for accepted, n in enumerate(row["spec_correct_drafts_histogram"] or []):
            counts += [0] * (accepted + 1 - len(counts))
            counts[accepted] += n
    total = sum(counts)
    return {"counts": counts, "share": [n / total for n in counts]} if total else None


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The block of one category (or of every category: OVERALL) from its records."""
    ok = [r for r in rows if r["status"] == "ok"]
    answered = [r for r in rows if r["status"] != "failed"]
    failed = [r for r in rows if r["status"] == "failed"]
    latencies = [r["e2e_latency_s"] if r["e2e_latency_s"] is not None else r["latency_s"] for r in answered]
    speeds = [r["completion_tokens"] / t for r, t in zip(answered, latencies, strict=True) if t and t > 0]
    verify = sum(r["spec_verify_ct"] for r in ok)
    block: dict[str, Any] = {
        "requests": len(rows),
        "failed": len(failed),
        "unmeasured": len(rows) - len(ok) - len(failed),
        "measured": len(ok),
        "output_tokens": sum(r["completion_tokens"] or 0 for r in answered),
    }
    for metric in METRICS:
        values = prompt_values(ok, metric)
        block[metric] = mean_interval(list(values.values()))
    block["prompts"] = block["accept_length"]["n"]
    block["verify_steps"] = {"total": verify, "per_request": verify / len(ok) if ok else None}
    block["correct_drafts"] = sum(r["spec_num_correct_drafts"] or 0 for r in ok)
    block["proposed_drafts"] = sum(r["spec_num_proposed_drafts"] or 0 for r in ok)
    block["correct_drafts_histogram"] = _histogram(ok)
    block["output_tokens_per_s"] = _spread(speeds)
    block["latency_s"] = _spread(latencies)
    block["failures"] = dict(Counter(failure_kind(r["error"]) for r in failed).most_common())
    return block


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """{"categories": {category: block}, "overall": block, "modes": {mode: block}, "categories_by_mode": {category:
    {mode: block}}} of one side's records (a record without a mode, written before modes, is thinking)."""
    by_category: dict[str, list[dict[str, Any]]] = defaultdict(list)
    by_mode: dict[str, list[dict[str, Any]]] = defaultdict(list)
    by_both: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        mode = row.get("mode") or THINKING
        by_category[row["category"]].append(row)
        by_mode[mode].append(row)
        by_both[row["category"]][mode].append(row)
    return {
        "categories": {category: summary(by_category[category]) for category in sorted(by_category)},
        OVERALL: summary(rows),
        "modes": {mode: summary(by_mode[mode]) for mode in sorted(by_mode)},
        "categories_by_mode": {
            category: {mode: summary(modes[mode]) for mode in sorted(modes)}
            for category, modes in sorted(by_both.items())
        },
    }


def _paired_block(a: dict[tuple[str, str], float], b: dict[tuple[str, str], float], metric: str) -> dict[str, Any]:
    both = sorted(set(a) & set(b))
    return {
        f"{metric}_diff": mean_interval([a[key] - b[key] for key in both]),
        "paired_prompts": len(both),
        "only_a": len(set(a) - set(b)),
        "only_b": len(set(b) - set(a)),
    }


def paired(rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]]) -> dict[str, Any]:
    """A minus B per category and overall, over the prompts measured on both sides."""
    values = {metric: (prompt_values(rows_a, metric), prompt_values(rows_b, metric)) for metric in METRICS}
    categories = sorted({r["category"] for r in rows_a} | {r["category"] for r in rows_b})

    def block(category: str | None) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for metric, (a, b) in values.items():
            if category is not None:
                a = {k: v for k, v in a.items() if k[0] == category}
                b = {k: v for k, v in b.items() if k[0] == category}
            result |= _paired_block(a, b, metric)
        return result

    return {"categories": {c: block(c) for c in categories}, OVERALL: block(None)}
