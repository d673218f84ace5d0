"""Thinking and instant modes: which mode a category generates, and which mode each of its prompts gets.

A reasoning model is served in two modes. Thinking: the chat template's generation prompt lets the model reason
(Kimi-K2.5 ends it in `<think>`), the answer holds the reasoning, `</think>`, then the reply. Instant: the
template is rendered with the model's switch off (K2.5's `thinking=False`, Qwen3's `enable_thinking=False`),
the generation prompt ends in an empty `<think></think>` and the answer is the reply alone. A drafter serves
both, so a category chooses `thinking`, `instant` or `mix` (a share `instant_fraction` of its prompts instant).

In a mix the mode is a property of the prompt, not of the run: sha256 of (the recipe seed, "mode", the prompt
id) below the fraction means instant, so reruns, resumes and incremental refreshes give a prompt the same mode,
and raising the fraction only moves prompts from thinking to instant. Kept here, import-free, for the CLI.
"""

from __future__ import annotations

import hashlib

THINKING = "thinking"
INSTANT = "instant"
MIX = "mix"
MODES: tuple[str, ...] = (THINKING, INSTANT, MIX)  # what a category chooses (the `mode` setting)
SAMPLE_MODES: tuple[str, ...] = (THINKING, INSTANT)  # what a sample is generated in (the `mode` column)
DEFAULT_INSTANT_FRACTION = 0.5  # a mix without a fraction: half and half


def prompt_mode(mode: str, instant_fraction: float | None, seed: int, prompt_id: str) -> str:
    """The mode a prompt is generated in, for a category whose setting is `mode` (see the module docstring)."""
    if mode != MIX:
        return mode
    fraction = DEFAULT_INSTANT_FRACTION if instant_fraction is None else instant_fraction
    draw = int.from_bytes(hashlib.sha256(f"{seed}:mode:{prompt_id}".encode()).digest()[:8], "big") / 2**64
    return INSTANT if draw < fraction else THINKING


def sample_modes(mode: str) -> tuple[str, ...]:
    """The modes of the samples a category with this setting generates."""
    return SAMPLE_MODES if mode == MIX else (mode,)
