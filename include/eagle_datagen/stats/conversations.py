"""Statistics of `turns: each` runs: steps by kind, why conversations stopped, and prompt drift.

Prompt drift compares each continuation step's prompt with its parent's `prompt_ids + output_ids`
(conversation/drift.py). By step kind, so a user sees at once how far multi-turn prompts drift from plain
concatenation (K2.5 drops the reasoning of earlier user turns: `reasoning_dropped` on `user_turn` steps is
expected) and a template that drifts where it should not (anything but `none` on `tool_result` steps) is
found. `reencoded` means decoded text re-encoded to other ids.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa

CONVERSATION_COLUMNS = ("conversation_id", "step_kind", "trajectory_end", "prompt_drift")


class ConversationCounts:
    """Counts over data and quarantine tables (both: a quarantined step is a step, and ends its trajectory)."""

    def __init__(self) -> None:
        self.steps: Counter[str] = Counter()
        self.ends: Counter[str] = Counter()
        self.drift: dict[str, Counter[str]] = {}
        self.conversations: set[str] = set()

    def add(self, table: pa.Table) -> None:
        if not all(name in table.column_names for name in CONVERSATION_COLUMNS):
            return
        columns = table.select(list(CONVERSATION_COLUMNS)).to_pydict()
        for cid, kind, end, drift in zip(*(columns[name] for name in CONVERSATION_COLUMNS), strict=True):
            if cid is None:  # a single-turn sample
                continue
            self.conversations.add(cid)
            self.steps[kind] += 1
            if end is not None:
                self.ends[end] += 1
            if drift is not None:
                self.drift.setdefault(kind, Counter())[drift] += 1

    def to_json(self) -> dict[str, Any] | None:
        if not self.conversations:
            return None
        ordered = lambda c: dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))  # noqa: E731
        return {
            "conversations": len(self.conversations),
            "steps": ordered(self.steps),
            "trajectory_end": ordered(self.ends),
            "prompt_drift": {kind: ordered(c) for kind, c in sorted(self.drift.items())},
        }


def tool_loop_drift_warning(conversations: dict[str, Any] | None) -> str | None:
    """A run-level diagnosis: inside a tool loop the re-rendered prompt must extend the previous step's ids
    (K2.5 keeps the loop's reasoning), so any other drift there names a template or tokenizer problem."""
    drift = ((conversations or {}).get("prompt_drift") or {}).get("tool_result") or {}
    total = sum(drift.values())
    off = {kind: n for kind, n in drift.items() if kind != "none"}
    if not off:
        return None
    kinds = ", ".join(f"{kind} {n}" for kind, n in off.items())
    cause = (
        "the chat template drops or re-renders turns of the current tool loop"
        if set(off) - {"reencoded"}
        else "decoded outputs re-encode to other ids (the tokenizer does not round-trip them)"
    )
    return (
        f"{sum(off.values())} of {total} tool_result steps do not extend their parent's prompt_ids + output_ids "
        f"({kinds}): {cause}; serving concatenates ids, so these prompts differ from what the model saw"
    )
