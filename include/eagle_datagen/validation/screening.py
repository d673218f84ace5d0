"""Judge one answer as it arrives: valid, a model behaviour to quarantine, or a server fault to send again.

A server fault is a reason whose token-level evidence proves that the server altered or misreported the
answer (the echo bug, token counts that disagree with the ids, ids the model cannot emit): the model did
not give that answer, so the sample is sent again (to a healthy endpoint, same sample identity) and the
answer never becomes a row. Every other reason looks, one answer at a time, like the model's own behaviour
(no `</think>`, a loop, a truncation, a think token in an instant answer; a server stripping think tokens looks
like this too): the answer is kept and quarantined, never retried, since the same request would get the same
answer again. Whether one endpoint shows a reason far more often than the others
is the content breaker's question (inference/content_breaker.py), not this one's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eagle_datagen.inference.logprobs import LOGPROBS_KEY
from eagle_datagen.modes import THINKING
from eagle_datagen.profile import ModelProfile
from eagle_datagen.validation.rules import DEFAULT_LIMITS, ValidationLimits, validate_sample

SERVER_FAULT_REASONS = frozenset(
    {"prompt_tokens_mismatch", "completion_tokens_mismatch", "prompt_echo", "id_out_of_range"}
)


@dataclass(frozen=True)
class Verdict:
    reason: str | None = None  # None: a valid sample
    detail: str = ""

    @property
    def server_fault(self) -> bool:
        return self.reason in SERVER_FAULT_REASONS


VALID = Verdict()


def judge_answer(
    prompt_ids: Sequence[int],
    output_ids: Sequence[int],
    meta_info: dict[str, Any],
    profile: ModelProfile,
    limits: ValidationLimits = DEFAULT_LIMITS,
    mode: str = THINKING,
    top_logprobs: int = 0,
) -> Verdict:
    """The verdict of `validate_sample` on an answer in `mode`, with the token counts the server reported (the
    same row that publishing validates, so an answer judged here is judged the same there); `top_logprobs`: the k
    the request asked for (its logprobs are checked too)."""
    finish = meta_info.get("finish_reason") or {}
    row = {
        "prompt_ids": prompt_ids,
        "output_ids": output_ids,
        "finish_reason": finish.get("type", "abort") if isinstance(finish, dict) else finish,
        "completion_tokens": meta_info.get("completion_tokens"),
        "prompt_tokens": meta_info.get("prompt_tokens"),
        "mode": mode,
        "top_logprobs_num": top_logprobs,
        "logprobs": meta_info.get(LOGPROBS_KEY),
    }
    found = validate_sample(row, profile, limits)
    return VALID if found is None else Verdict(*found)
