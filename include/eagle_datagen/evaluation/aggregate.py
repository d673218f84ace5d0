"""The numbers of an evaluation, computed from its per-request records alone (records.py), so that anyone can
recompute them from the records file.

Per category (and overall, every prompt pooled), over the `ok` requests (failed ones and those answered without
speculative metrics are counted, never averaged in), three accept lengths, each with its 95% interval from a
bootstrap over prompts (intervals.py):
- `accept_length_total`, the headline: total output tokens / total verify steps, what SGLang's and SpecForge's
  benchmark scripts and the published drafter cards print per benchmark;
- `accept_length_no_prefill`: 1 + total drafts accepted / total verify steps, the same without each answer's
  first token (it comes from the prefill, not from a verify step): at most num_steps + 1 by construction;
- `accept_length`: the mean over prompts of SGLang's per-request `spec_accept_length` (a prompt's value is the
  mean of its requests), as results before the headline gave it. A short answer weighs as much as a long one and
  its prefill token counts in full (5 tokens in 1 verify step read 5.0), so it reads high on short answers.
Beside them: the accept rate (mean over prompts), verify steps, drafts accepted and proposed, the histogram of
drafts accepted per verify step summed over requests, output tokens per second and latency per request. Paired:
over the prompts measured on both sides, A minus B of each figure, the prompts resampled jointly, which is
narrower than the two intervals side by side because a prompt's difficulty cancels out.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from eagle_datagen.evaluation.intervals import mean_interval, paired_ratio_interval, ratio_interval
from eagle_datagen.modes import THINKING

METRICS = ("accept_length", "accept_rate")  # the per-prompt means: meta_info spec_accept_length, spec_accept_rate
HEADLINE = "accept_length_total"


def _drafts_accepted(row: dict[str, Any]) -> int:
    """The request's accepted drafts: SGLang's count, else its output less the prefill token and one bonus token
    per verify step (equal but for a last step cut short by the stop)."""
    if row["spec_num_correct_drafts"] is not None:
        return row["spec_num_correct_drafts"]
    return row["completion_tokens"] - 1 - row["spec_verify_ct"]


# ratio-of-totals figures over verify steps: name -> (the numerator of one request, what is added to the ratio)
TOTALS = {
    HEADLINE: (lambda row: row["completion_tokens"], 0.0),  # every output token, the prefill's included
    "accept_length_no_prefill": (_drafts_accepted, 1.0),
}
OVERALL = "overall"


def prompt_totals(rows: Iterable[dict[str, Any]], figure: str) -> dict[tuple[str, str], tuple[float, float]]:
    """(category, prompt_key) -> (numerator, verify steps) of a TOTALS figure, summed over the prompt's `ok`
    requests, in key order (the order the bootstrap draws prompts in, so the records give the same interval)."""
    numerator = TOTALS[figure][0]
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        if row["status"] == "ok" and row["completion_tokens"] is not None and row["spec_verify_ct"]:
            pair = totals[(row["category"], row["prompt_key"])]
            pair[0] += numerator(row)
            pair[1] += row["spec_verify_ct"]
    return {key: (totals[key][0], totals[key][1]) for key in sorted(totals)}  # the bootstrap's order


def total_interval(totals: dict[tuple[str, str], tuple[float, float]], figure: str) -> dict[str, Any]:
    pairs = list(totals.values())
    stat = ratio_interval([p[0] for p in pairs], [p[1] for p in pairs], offset=TOTALS[figure][1])
    return stat | {"numerator": sum(p[0] for p in pairs), "verify_steps": sum(p[1] for p in pairs)}


def prompt_values(rows: Iterable[dict[str, Any]], metric: str) -> dict[tuple[str, str], float]:
    """(category, prompt_key) -> the mean of the prompt's measured requests, in key order."""
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in rows:
        if row["status"] == "ok":
            values[(row["category"], row["prompt_key"])].append(row[f"spec_{metric}"])
    return {key: math.fsum(values[key]) / len(values[key]) for key in sorted(values)}


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
    for figure in TOTALS:
        block[figure] = total_interval(prompt_totals(ok, figure), figure)
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


def _paired(a: dict[tuple[str, str], Any], b: dict[tuple[str, str], Any], figure: str) -> dict[str, Any]:
    """A minus B of one figure over the prompts both sides measured; a per-prompt mean as {"mean", ...}."""
    both = sorted(set(a) & set(b))
    if figure in TOTALS:
        return paired_ratio_interval(
            ([a[k][0] for k in both], [a[k][1] for k in both]), ([b[k][0] for k in both], [b[k][1] for k in both])
        )
    ones = [1.0] * len(both)
    stat = paired_ratio_interval(([a[k] for k in both], ones), ([b[k] for k in both], ones))
    sd = mean_interval([a[k] - b[k] for k in both])["sd"]
    return {"mean": stat.pop("value")} | stat | {"sd": sd}


def paired(rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]]) -> dict[str, Any]:
    """A minus B per category and overall, over the prompts measured on both sides."""
    values: dict[str, tuple[dict, dict]] = {f: (prompt_totals(rows_a, f), prompt_totals(rows_b, f)) for f in TOTALS}
    values |= {metric: (prompt_values(rows_a, metric), prompt_values(rows_b, metric)) for metric in METRICS}
    categories = sorted({r["category"] for r in rows_a} | {r["category"] for r in rows_b})

    def block(category: str | None) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for figure, (a, b) in values.items():
            if category is not None:
                a = {k: v for k, v in a.items() if k[0] == category}
                b = {k: v for k, v in b.items() if k[0] == category}
            if figure == HEADLINE:  # who was measured where: by the headline's prompts
                result |= {"paired_prompts": len(set(a) & set(b)), "only_a": len(set(a) - set(b))}
                result["only_b"] = len(set(b) - set(a))
            result[f"{figure}_diff"] = _paired(a, b, figure)
        result["warning"] = result[f"{HEADLINE}_diff"]["warning"]
        return result

    return {"categories": {c: block(c) for c in categories}, OVERALL: block(None)}
