"""Statistics by mode (thinking, instant: modes.py): what each mode produced, per category and for the run.

A drafter is trained on both modes of its target and scored on both, so a run says how many samples of each it
has, how many were quarantined and why, and how many tokens each trains. A shard written before modes existed
(no `mode` column) counts as thinking. The manifest's `counts.modes` and the report's "Modes" table come from
here; the rates of the mode-specific reject reasons are shares of their own mode (validation/diagnosis.py).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from eagle_datagen.modes import THINKING

ALL = "all"


def mode_column(table: pa.Table) -> pa.ChunkedArray | pa.Array:
    """The table's `mode` column, thinking where it is missing or null (shards of contract v1.0)."""
    if "mode" not in table.column_names:
        return pa.array([THINKING] * table.num_rows, pa.string())
    return pc.fill_null(table["mode"], THINKING)


class ModeCounts:
    """Samples, valid, quarantined, trained tokens and reject reasons per (category, mode), over data and
    quarantine tables, with Arrow's group-by (no Python object per row)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], Counter[str]] = {}
        self.reasons: dict[tuple[str, str], Counter[str]] = {}

    def _entry(self, category: str, mode: str) -> Counter[str]:
        return self.counts.setdefault((category, mode), Counter())

    def add(self, table: pa.Table, outcome: str) -> None:
        """Count one data (`outcome` "data") or quarantine ("quarantine") table."""
        if table.num_rows == 0:
            return
        columns = {"category": table["category"], "mode": mode_column(table)}
        if outcome == "data":
            columns["tokens"] = pc.fill_null(pc.list_value_length(table["output_ids"]), 0)
            grouped = (
                pa.table(columns).group_by(["category", "mode"]).aggregate([("tokens", "sum"), ("tokens", "count")])
            )
            for row in grouped.to_pylist():
                entry = self._entry(row["category"], row["mode"])
                entry["valid"] += row["tokens_count"]
                entry["output_tokens"] += row["tokens_sum"] or 0
            return
        reason = table["reject_reason"] if "reject_reason" in table.column_names else pa.nulls(table.num_rows)
        columns["reason"] = pc.fill_null(reason.cast(pa.string()), "(null)")
        grouped = pa.table(columns).group_by(["category", "mode", "reason"]).aggregate([("reason", "count")])
        for row in grouped.to_pylist():
            key = (row["category"], row["mode"])
            self._entry(*key)["quarantined"] += row["reason_count"]
            self.reasons.setdefault(key, Counter())[row["reason"]] += row["reason_count"]

    def _summary(self, keys: list[tuple[str, str]]) -> dict[str, dict[str, Any]]:
        by_mode: dict[str, dict[str, Any]] = {}
        for category, mode in keys:
            entry = self.counts[(category, mode)]
            into = by_mode.setdefault(
                mode, {"samples": 0, "valid": 0, "quarantined": 0, "output_tokens": 0, "reject_reasons": Counter()}
            )
            for name in ("valid", "quarantined", "output_tokens"):
                into[name] += entry[name]
            into["samples"] += entry["valid"] + entry["quarantined"]
            into["reject_reasons"] += self.reasons.get((category, mode), Counter())
        for into in by_mode.values():
            reasons = into["reject_reasons"]
            into["reject_reasons"] = dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        return dict(sorted(by_mode.items()))

    def to_json(self) -> dict[str, Any]:
        """{"all": {mode: {...}}, "categories": {category: {mode: {...}}}}: every mode a sample was generated in."""
        categories = sorted({category for category, _ in self.counts})
        return {
            ALL: self._summary(list(self.counts)),
            "categories": {c: self._summary([k for k in self.counts if k[0] == c]) for c in categories},
        }

    def totals(self) -> dict[str, int]:
        """Samples per mode, for the run-level diagnosis's shares."""
        return {mode: entry["samples"] for mode, entry in self._summary(list(self.counts)).items()}


def modes_section(stats: dict[str, Any]) -> list[str]:
    """The report's "Modes" table: per category and mode, samples, valid, quarantined, trained tokens, reasons."""
    from html import escape

    by_mode = stats.get("modes")
    if not by_mode:
        return []
    rows = []
    for name, modes in [(ALL, by_mode[ALL]), *by_mode["categories"].items()]:
        for mode, entry in modes.items():
            reasons = ", ".join(f"{escape(r)} {n:,}" for r, n in entry["reject_reasons"].items()) or "none"
            cells = [escape(name), escape(mode)] + [f"{entry[k]:,}" for k in ("samples", "valid", "quarantined")]
            rows.append(
                "<tr>"
                + "".join(f"<td>{c}</td>" for c in cells[:2])
                + "".join(f"<td class='n'>{c}</td>" for c in cells[2:])
                + f"<td class='n'>{entry['output_tokens']:,}</td><td>{reasons}</td></tr>"
            )
    head = "".join(
        f"<th>{h}</th>" for h in ("category", "mode", "samples", "valid", "quarantined", "trained tokens", "reasons")
    )
    return [
        "<h2>Modes</h2>",
        f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>",
        "<p class='muted'>thinking: the model reasoned before its answer; instant: the chat template turned "
        "thinking off (the prompt ends in an empty think block) and the answer has no reasoning. A reject reason of "
        "one mode is judged as a share of that mode's samples.</p>",
    ]
