"""Fault decisions and what each injected fault looks like on the wire.

One `random.Random(fault_seed)` draws every decision, in arrival order, so a run with the same seed and the
same request order sees the same faults, and a retried request draws afresh (it can succeed). Every kind
is drawn for every request whatever the rates, so changing one rate does not reshuffle the others.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from eagle_datagen.standin.sglang.config import FaultRates

QUEUE_FULL_BODY = {
    "object": "error",
    "message": "The request queue is full.",
    "type": "ServiceUnavailableError",
    "param": None,
    "code": 503,
}
# What the SGLang router answers when its own queue is full or a request waited there too long.
ROUTER_429_BODY = {"error": {"message": "Too many requests: router queue is full", "code": 429}}
ROUTER_408_BODY = {"error": {"message": "Request timed out in router queue", "code": 408}}
ABORT_FINISH_REASON = {"type": "abort", "message": "Abort before prefill", "status_code": 503}
MAX_ECHO = 5  # SGLang 0.5.0-0.5.4 copied up to 5 prompt ids to the front of output_ids


@dataclass(frozen=True)
class RequestFaults:
    """Decided once per HTTP request."""

    error_429: bool = False
    error_408: bool = False
    error_503: bool = False
    drop: bool = False
    slow: bool = False
    lose: bool = False


@dataclass(frozen=True)
class ItemFaults:
    """Decided once per generation (a batch item, or one of n samples)."""

    abort: bool = False
    no_think_end: bool = False
    echo: int = 0  # how many prompt ids to copy in front of the output; 0: none
    strip_think: bool = False
    prompt_tokens: bool = False
    logprobs_shape: bool = False
    think_in_instant: bool = False

    def kinds(self) -> list[str]:
        kinds = ("abort", "no_think_end", "echo", "strip_think", "prompt_tokens", "logprobs_shape", "think_in_instant")
        return [k for k in kinds if getattr(self, k)]


class FaultInjector:
    def __init__(self, rates: FaultRates, seed: int) -> None:
        self.rates = rates
        self._rng = random.Random(seed)
        # Kinds added later draw from their own generator: the older kinds' draws stay as they were per seed.
        self._later_rng = random.Random(seed + 1)
        self._lose_rng = random.Random(seed + 2)
        self._logprobs_rng = random.Random(seed + 3)
        self._mode_rng = random.Random(seed + 4)
        self.requests = 0  # /generate requests decided so far (lose_after counts them)

    def _draw(self, rate: float) -> bool:
        return self._rng.random() < rate  # drawn even at rate 0, to keep the sequence stable

    def for_request(self, lose_after: int | None = None) -> RequestFaults:
        r = self.rates
        self.requests += 1
        lose = self._lose_rng.random() < r.lose or (lose_after is not None and self.requests > lose_after)
        return RequestFaults(
            lose=lose,
            error_429=self._draw(r.error_429),
            error_408=self._draw(r.error_408),
            error_503=self._draw(r.error_503),
            drop=self._draw(r.drop),
            slow=self._draw(r.slow),
        )

    def for_item(self) -> ItemFaults:
        r = self.rates
        abort, no_think_end, echo, strip = (self._draw(x) for x in (r.abort, r.no_think_end, r.echo, r.strip_think))
        echo_len = self._rng.randint(1, MAX_ECHO)
        prompt_tokens = self._later_rng.random() < r.prompt_tokens
        return ItemFaults(
            abort=abort,
            no_think_end=no_think_end,
            echo=echo_len if echo else 0,
            strip_think=strip,
            prompt_tokens=prompt_tokens,
            logprobs_shape=self._logprobs_rng.random() < r.logprobs_shape,
            think_in_instant=self._mode_rng.random() < r.think_in_instant,
        )


def reported_prompt_tokens(prompt_ids: list[int], faults: ItemFaults) -> int:
    """prompt_tokens as the server reports it: with the prompt_tokens fault, the count another tokenizer
    would give the prompt's text (a tenth more), as behind a proxy that re-tokenized it."""
    return len(prompt_ids) + (max(1, len(prompt_ids) // 10) if faults.prompt_tokens else 0)


def apply_output_faults(
    output_ids: list[int], prompt_ids: list[int], faults: ItemFaults, think_ids: tuple[int, int]
) -> tuple[list[int], int]:
    """(output_ids as the faulty server returns them, completion_tokens it reports).

    echo: the prompt's last ids come first, but completion_tokens counts only the real output (the bug's
    signature). strip_think: <think>/</think> are gone and completion_tokens agrees with what is left, so
    only the content gives it away. (no_think_end and abort are decided before generation.)
    """
    completion_tokens = len(output_ids)
    if faults.strip_think:
        output_ids = [t for t in output_ids if t not in think_ids]
        completion_tokens = len(output_ids)
    if faults.echo:
        output_ids = prompt_ids[-faults.echo :] + output_ids
    return output_ids, completion_tokens
