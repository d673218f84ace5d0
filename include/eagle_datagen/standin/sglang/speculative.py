"""The speculative mode: a server "started with a drafter" (`--speculative-algorithm EAGLE3`), whose per-request
metrics are known in advance, so that `eagle-datagen evaluate` can be checked against the numbers it should report.

SGLang 0.5.23 (`tokenizer_manager.py`, `_calculate_spec_decoding_metrics`) adds to a finished request's
`meta_info`, when it had at least one verify step: `spec_verify_ct` (verify steps), `spec_num_correct_drafts`
(draft tokens accepted), `spec_num_proposed_drafts` (`verify_ct x (num_draft_tokens - 1)`), `spec_accept_rate`
(correct / proposed), `spec_accept_length` (`completion_tokens / verify_ct`: tokens per step, the bonus token
included) and `spec_correct_drafts_histogram` (entry k: the steps that accepted k drafts). The first output token
comes from the prefill, not from a verify step.

The stand-in draws each step's accepted drafts from a chain with acceptance probability `accept_rate` (a draft is
taken when every draft before it was, at most `num_steps` of them), seeded by the request's `sampling_seed` and its
output length only: the same request gets the same metrics from every replica, and two servers that differ only in
`accept_rate` see the same draws (a paired comparison whose sign is known). `spec_metrics` is what the server
answers, for tests to recompute.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SpeculativeConfig:
    algorithm: str = "EAGLE3"
    draft_model_path: str = "standin/eagle3-drafter"
    num_steps: int = 3
    eagle_topk: int = 1
    num_draft_tokens: int = 4
    accept_rate: float = 0.7  # the stand-in's own: probability that a draft is accepted after an accepted one

    def __post_init__(self) -> None:
        if not 0.0 <= self.accept_rate <= 1.0:
            raise ValueError(f"speculative accept_rate must be in [0, 1], got {self.accept_rate}")
        if self.num_steps < 1 or self.eagle_topk < 1 or self.num_draft_tokens < 2:
            raise ValueError("speculative num_steps and eagle_topk must be at least 1, num_draft_tokens at least 2")

    def server_info(self) -> dict[str, Any]:
        """The speculative server arguments as SGLang 0.5.23's /server_info lists them."""
        return {
            "speculative_algorithm": self.algorithm,
            "speculative_draft_model_path": self.draft_model_path,
            "speculative_draft_model_revision": None,
            "speculative_num_steps": self.num_steps,
            "speculative_eagle_topk": self.eagle_topk,
            "speculative_num_draft_tokens": self.num_draft_tokens,
            "speculative_accept_threshold_single": 1.0,
            "speculative_accept_threshold_acc": 1.0,
            "speculative_token_map": None,
        }


# what a server without a drafter reports (SGLang's defaults)
NOT_SPECULATIVE = {
    "speculative_algorithm": None,
    "speculative_draft_model_path": None,
    "speculative_draft_model_revision": None,
    "speculative_num_steps": None,
    "speculative_eagle_topk": None,
    "speculative_num_draft_tokens": None,
    "speculative_accept_threshold_single": 1.0,
    "speculative_accept_threshold_acc": 1.0,
    "speculative_token_map": None,
}


def spec_metrics(spec: SpeculativeConfig, sampling_seed: int | None, completion_tokens: int) -> dict[str, Any]:
    """The meta_info keys SGLang adds for one finished request of `completion_tokens` output tokens (none without
    a verify step, as SGLang)."""
    rng = random.Random(f"spec:{sampling_seed}:{completion_tokens}")
    remaining, steps, correct = completion_tokens - 1, 0, 0
    histogram = [0] * (spec.num_steps + 1)
    while remaining > 0:
        accepted = 0
        while accepted < spec.num_steps and rng.random() < spec.accept_rate:
            accepted += 1
        accepted = min(accepted, remaining - 1)  # the request ends within this step
        histogram[accepted] += 1
        correct += accepted
        steps += 1
        remaining -= accepted + 1
    if not steps:
        return {}
    proposed = steps * (spec.num_draft_tokens - 1)
    while histogram and histogram[-1] == 0:  # SGLang grows the list only as far as a count was seen
        histogram.pop()
    return {
        "spec_accept_rate": correct / proposed,
        "spec_accept_length": completion_tokens / steps,
        "spec_num_correct_drafts": correct,
        "spec_num_proposed_drafts": proposed,
        "spec_verify_ct": steps,
        "spec_correct_drafts_histogram": histogram,
    }
