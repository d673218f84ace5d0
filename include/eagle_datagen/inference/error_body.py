"""The message of an error answer, whatever shape SGLang or the router gave it.

Shapes seen from SGLang 0.5.23 and its router:
- schema errors (a key of the wrong type, an unknown field): `{"error": "unknown field `bogus_key`, ..."}`;
- value errors (out-of-range sampling values, an empty or too-long input): `{"error": {"message": ...}}`;
- the queue-full 503 (`--max-queued-requests`) in OpenAI style: `{"object": "error", "message": ...}`;
- a web framework's validation error: `{"detail": ...}` (a string, or a list of `{"msg": ...}`);
- anything else: the JSON as text, or the plain text body.
"""

from __future__ import annotations

import json
from typing import Any

MAX_MESSAGE_CHARS = 300


def _message_of(payload: Any) -> str | None:
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if isinstance(error, str) and error:
        return error
    if isinstance(error, dict):
        for key in ("message", "msg", "detail", "code", "type"):
            if isinstance(error.get(key), str) and error[key]:
                return error[key]
    if isinstance(payload.get("message"), str) and payload["message"]:
        return payload["message"]
    detail = payload.get("detail")
    if isinstance(detail, str) and detail:
        return detail
    if isinstance(detail, list):
        parts = [str(item.get("msg", item)) if isinstance(item, dict) else str(item) for item in detail]
        return "; ".join(parts) or None
    return None


def error_message(body: bytes) -> str:
    """One line, at most MAX_MESSAGE_CHARS characters, for logs, counters and quarantine rows."""
    try:
        payload = json.loads(body)
    except ValueError:
        text = body.decode("utf-8", errors="replace").strip()
    else:
        text = _message_of(payload) or json.dumps(payload, ensure_ascii=False)
    return " ".join(text.split())[:MAX_MESSAGE_CHARS] or "(empty body)"
