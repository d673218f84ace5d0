"""Prompt rejects of a run (its rejects.jsonl: read, validate, tokenize and filter stages) counted by reason per
source, with benchmark overlaps per benchmark: the statistics' `prompt_rejects` and the report's table."""

from __future__ import annotations

import html
import json
from collections import Counter, defaultdict
from typing import Any

UNKNOWN_SOURCE = "(unknown source)"


def count_prompt_rejects(rejects_jsonl: bytes) -> dict[str, Any]:
    """{"reasons", "benchmark_overlaps", "by_source": {source: {"reasons", "benchmark_overlaps"}}}."""
    reasons: Counter[str] = Counter()
    overlaps: Counter[str] = Counter()
    by_source: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: {"reasons": Counter(), "overlaps": Counter()})
    for line in rejects_jsonl.splitlines():
        if not line.strip():
            continue
        reject = json.loads(line)
        source = reject.get("source_spec") or UNKNOWN_SOURCE
        reasons[reject["reason"]] += 1
        by_source[source]["reasons"][reject["reason"]] += 1
        if reject.get("benchmark"):
            overlaps[reject["benchmark"]] += 1
            by_source[source]["overlaps"][reject["benchmark"]] += 1
    return {
        "reasons": _ordered(reasons),
        "benchmark_overlaps": _ordered(overlaps),
        "by_source": {
            source: {"reasons": _ordered(c["reasons"]), "benchmark_overlaps": _ordered(c["overlaps"])}
            for source, c in sorted(by_source.items())
        },
    }


def _ordered(counter: Counter[str]) -> dict[str, int]:
    return {k: int(v) for k, v in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))}


def prompt_rejects_table(counts: dict[str, Any] | None) -> str:
    """HTML: one row per source, its rejects by reason and its benchmark overlaps."""
    if not counts or not counts.get("by_source"):
        return "<p class='muted'>No prompt record was rejected.</p>"

    def listing(values: dict[str, int]) -> str:
        return "<br>".join(f"{html.escape(k)}: {v:,}" for k, v in values.items()) or "–"

    rows = [
        f"<tr><td>{html.escape(source)}</td><td class='n'>{sum(c['reasons'].values()):,}</td>"
        f"<td>{listing(c['reasons'])}</td><td>{listing(c['benchmark_overlaps'])}</td></tr>"
        for source, c in counts["by_source"].items()
    ]
    head = (
        "<thead><tr><th>source</th><th class='n'>rejected</th><th>by reason</th>"
        "<th>benchmark overlaps</th></tr></thead>"
    )
    return f"<div class='scroll'><table>{head}<tbody>{''.join(rows)}</tbody></table></div>"
