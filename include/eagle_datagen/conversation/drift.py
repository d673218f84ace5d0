"""What serving sees versus what was generated: a continuation step's prompt against its parent's
`prompt_ids + output_ids`.

- `none`: the new prompt extends the parent's sequence token for token (what a tool loop must give);
- `reasoning_dropped`: the template closed the parent's turn with an empty `<think></think>` (K2.5 does
  this for turns before the last plain answer: expected for a new user turn, a template fault in a tool loop);
- `reencoded`: the decoded answer re-encodes to other ids;
- `history_changed`: the parent's prompt itself is no longer a prefix (the template re-rendered history:
  K2.5 does this on the user turn after a tool loop, dropping the loop's reasoning).
"""

from __future__ import annotations

from collections.abc import Sequence

DRIFT_KINDS = ("none", "reasoning_dropped", "reencoded", "history_changed")


def prompt_drift(
    parent_prompt: Sequence[int], parent_output: Sequence[int], prompt: Sequence[int], think_end: int
) -> str:
    parent_prompt, parent_output, prompt = list(parent_prompt), list(parent_output), list(prompt)
    expected = parent_prompt + parent_output
    if prompt[: len(expected)] == expected:
        return "none"
    if prompt[: len(parent_prompt)] != parent_prompt:
        return "history_changed"
    rest = prompt[len(parent_prompt) :]
    if rest[:1] == [think_end] and parent_output[:1] != [think_end]:
        return "reasoning_dropped"
    return "reencoded"
