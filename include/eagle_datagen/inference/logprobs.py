"""Top-k logprobs of every output token (soft targets), as SGLang's `/generate` returns them, made compact.

Asked with `return_logprob: true, top_logprobs_num: k, return_text_in_logprobs: false` (`logprob_start_len`
left at its default, -1: output positions only). SGLang 0.5.23 answers in `meta_info` (tokenizer_manager.py,
`add_logprob_to_meta_info`, `detokenize_top_logprobs_tokens`):
- `output_token_logprobs`: per output token, `[logprob, token_id, null]` of the token that was sampled;
- `output_top_logprobs`: per output token, a list of k `[logprob, token_id, null]`, most likely first (a position
  without any: null);
- `input_token_logprobs` / `input_top_logprobs` (empty with logprob_start_len -1), `output_token_logprobs_length`.
Logprobs are of the distribution after temperature scaling (top_p and top_k do not change them), unless the
server runs with `SGLANG_RETURN_ORIGINAL_LOGPROB=True`; its JSON writes -inf as null.

The nested lists cost ~35 bytes of JSON and three Python objects per entry, so the client replaces them as soon as
an answer arrives with `compact`: base64 of little-endian arrays under meta_info[LOGPROBS_KEY] (what checkpoints
keep), which keeps the answer's shape as it was (entries per position), so that validation (validation/logprobs.py)
judges what the server sent. `columns` turns them into the shard's columns.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np

LOGPROBS_KEY = "eagle_datagen_logprobs"  # our compact form, in meta_info (never a key SGLang sends)
SGLANG_KEYS = (
    "input_token_logprobs",
    "output_token_logprobs",
    "input_top_logprobs",
    "output_top_logprobs",
    "output_token_logprobs_length",
    "input_token_ids_logprobs",
    "output_token_ids_logprobs",
)


def request_fields(k: int) -> dict[str, Any]:
    """The top-level keys of a /generate body that ask for the top-k logprobs of every output token."""
    return {"return_logprob": True, "top_logprobs_num": k, "return_text_in_logprobs": False}


def _b64(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")


def _array(text: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=f"<{dtype}")


def _logprob(value: Any) -> float:
    if value is None:
        return float("-inf")  # SGLang's JSON (orjson) writes -inf as null
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"a logprob that is not a number: {value!r}")
    return float(value)


def _token(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"a token id that is not an integer: {value!r}")
    return value


def _entry(entry: Any) -> tuple[float, int]:
    if not isinstance(entry, list | tuple) or len(entry) < 2:
        raise ValueError(f"an entry that is not [logprob, token_id, text]: {str(entry)[:60]}")
    return _logprob(entry[0]), _token(entry[1])


def compact(meta: dict[str, Any]) -> dict[str, Any]:
    """meta_info with SGLang's logprob fields replaced by LOGPROBS_KEY (unchanged when it has none):
    `sampled` (float32) and `sampled_ids` (int32): the sampled token's entry per position (NaN and -1 where null);
    `counts` (int32): top-k entries per position; `top` (float32) and `top_ids` (int32): those entries in order.
    A structure that cannot be read becomes {"malformed": why} (validation quarantines it as logprobs_shape)."""
    if "output_token_logprobs" not in meta and "output_top_logprobs" not in meta:
        return meta
    meta = {k: v for k, v in meta.items() if k not in SGLANG_KEYS} | {LOGPROBS_KEY: _compacted(meta)}
    return meta


def _compacted(meta: dict[str, Any]) -> dict[str, Any]:
    sampled, tops = meta.get("output_token_logprobs"), meta.get("output_top_logprobs")
    try:
        if not isinstance(sampled, list) or not isinstance(tops, list):
            raise ValueError("output_token_logprobs and output_top_logprobs must both be lists")
        own = [_entry(e) if e is not None else (float("nan"), -1) for e in sampled]
        counts = [len(position) if isinstance(position, list) else 0 for position in tops]
        if any(p is not None and not isinstance(p, list) for p in tops):
            raise ValueError("an output_top_logprobs position that is not a list")
        entries = [_entry(e) for position in tops if position for e in position]
    except ValueError as exc:
        return {"malformed": str(exc)}
    return {
        "sampled": _b64(np.array([lp for lp, _ in own], "<f4")),
        "sampled_ids": _b64(np.array([t for _, t in own], "<i4")),
        "counts": _b64(np.array(counts, "<i4")),
        "top": _b64(np.array([lp for lp, _ in entries], "<f4")),
        "top_ids": _b64(np.array([t for _, t in entries], "<i4")),
    }


@dataclass(frozen=True)
class Logprobs:
    """An answer's logprobs, decoded: the sampled token's per position, and the top-k entries per position."""

    sampled: np.ndarray  # float32, one per position (NaN: null)
    sampled_ids: np.ndarray  # int32 (-1: null)
    counts: np.ndarray  # int32, entries per position
    top: np.ndarray  # float32, the entries, position by position
    top_ids: np.ndarray  # int32

    @classmethod
    def decode(cls, stored: dict[str, Any]) -> Logprobs:
        return cls(
            _array(stored["sampled"], "f4"),
            _array(stored["sampled_ids"], "i4"),
            _array(stored["counts"], "i4"),
            _array(stored["top"], "f4"),
            _array(stored["top_ids"], "i4"),
        )


def columns(stored: dict[str, Any] | None) -> dict[str, np.ndarray | None]:
    """The shard's columns of an answer's logprobs (null without any, or malformed): `output_logprobs` (the sampled
    token's, one per output token), `top_logprob_ids` and `top_logprobs` (k per output token, flattened)."""
    if not stored or "malformed" in stored:
        return {"output_logprobs": None, "top_logprob_ids": None, "top_logprobs": None}
    decoded = Logprobs.decode(stored)
    return {"output_logprobs": decoded.sampled, "top_logprob_ids": decoded.top_ids, "top_logprobs": decoded.top}
