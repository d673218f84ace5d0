"""A few fixed conversations that exercise every part of a chat template and tokenizer.

Used twice: their rendering's sha256 is the tokenizer's `rendered_template_sha256` in the run's provenance (a
changed template, tool encoder or tokenizer code shows there), and the preflight compares the client's ids of them
with the server's (inference/tokenizer_agreement.py).
"""

from __future__ import annotations

import hashlib
from typing import Any

_WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "required": ["city"],
            "properties": {
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit."},
                "city": {"type": "string", "description": "City name, e.g. Paris."},
                "days": {"type": "integer", "default": 1},
            },
        },
    },
}

# name -> (messages, tools)
CANARIES: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = {
    "plain": ([{"role": "user", "content": "What is 2+2?"}], None),
    "system": (
        [
            {"role": "system", "content": "You are a careful assistant. Answer in one sentence."},
            {"role": "user", "content": "Name a prime number larger than 100."},
        ],
        None,
    ),
    "tools": ([{"role": "user", "content": "Do I need an umbrella in Paris today?"}], [_WEATHER_TOOL]),
    "multilingual": (
        [
            {
                "role": "user",
                "content": "请用中文解释量子纠缠。Und danach auf Deutsch: Was ist Verschränkung? 日本語でも。",
            }
        ],
        None,
    ),
    "prior_reasoning": (
        [
            {"role": "user", "content": "Is 91 prime?"},
            {
                "role": "assistant",
                "content": "No: 91 = 7 x 13.",
                "reasoning_content": "91 / 7 = 13, so it has the factors 7 and 13.",
            },
            {"role": "user", "content": "And 97?"},
        ],
        None,
    ),
}


def render_canaries(tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> dict[str, str]:
    """Each canary rendered as a generation prompt by the tokenizer's own apply_chat_template, with a mode's
    template variables (`template_kwargs`: instant's `thinking=False`; none for thinking, the provenance's
    rendering); a template that refuses one, say a system turn, gives its error instead: that too is what it does."""
    rendered = {}
    for name, (messages, tools) in CANARIES.items():
        try:
            rendered[name] = tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=True, tokenize=False, **(template_kwargs or {})
            )
        except Exception as exc:  # templates may raise anything
            rendered[name] = f"<error: {type(exc).__name__}: {exc}>"
    return rendered


def rendered_sha256(rendered: dict[str, str]) -> str:
    digest = hashlib.sha256()
    for name in sorted(rendered):
        digest.update(name.encode() + b"\0" + rendered[name].encode("utf-8") + b"\0")
    return digest.hexdigest()
