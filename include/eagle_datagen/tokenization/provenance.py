"""Is this the tokenizer a run was planned with? Compared on the provenance its plan and manifest record.

A run's prompt ids are what its tokenizer made of its prompts; continuing it (a rerun) or extending the runs
published under an output root (an incremental run, whose samples are recognised by prompt and sampling, not by
ids) with another tokenizer would mix two tokenizations in one data set. The hashes cover the tokenizer files
(`tiktoken.model` among them), each remote-code file, the chat template, and the canary conversations as the
tokenizer renders them (a changed tool encoder shows there even when no file the loader hashes changed).
The encode path (`encode_path`: the tokenizer's own call, or the opted-in tiktoken fast path, tiktoken_path.py) is
compared too: one data set is made by one path. Provenance written before a key existed is compared on the keys
both sides have.
"""

from __future__ import annotations

from typing import Any

from eagle_datagen import settings
from eagle_datagen.errors import ConfigError

COMPARED = (  # the most telling first: the first difference is the one named
    "tokenizer_class",
    "tokenizer_files_sha256",
    "chat_template_sha256",
    "rendered_template_sha256",
    "tokenizer_sha256",
)


def tokenizer_change(planned: dict[str, Any], current: dict[str, Any]) -> str | None:
    """What differs between the tokenizer a run recorded and the current one (None: the same)."""
    for key in COMPARED:
        if key not in planned or key not in current or planned[key] == current[key]:
            continue
        old, new = planned[key], current[key]
        if isinstance(old, dict) and isinstance(new, dict):
            changed = sorted(name for name in old.keys() | new.keys() if old.get(name) != new.get(name))
            return f"{key} of {', '.join(changed)}"
        return f"{key} {str(old)[:12]} -> {str(new)[:12]}"
    return None


def check_same_tokenizer(
    run_id: str,
    planned: dict[str, Any],
    current: dict[str, Any],
    what: str,
    front_end: str = "cli",
    encode_path: bool = True,  # False where the stored ids are read, not made again (evaluate's held-out prompts)
) -> None:
    old, new = planned.get("encode_path"), current.get("encode_path")
    if encode_path and old and new and old != new:
        raise ConfigError(
            f"{what} {run_id}'s prompt ids were made by {old}, this run would encode them by {new}: "
            f"turn {'on' if old == 'tiktoken_fast_path' else 'off'} {settings.named('tiktoken_fast_path', front_end)} "
            f"as it was, or {settings.new_run_hint(front_end)} under another output"
        )
    change = tokenizer_change(planned, current)
    if change is not None:
        raise ConfigError(
            f"{what} {run_id} was made with another tokenizer than this one ({change} changed): use the tokenizer "
            f"it was made with, or {settings.new_run_hint(front_end)} under another output"
        )
