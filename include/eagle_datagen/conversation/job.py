"""One conversation to generate (`turns: each`) and the stable identities of its steps.

`conversation_id` derives from the record's prompt identity, the sample index and (instant only) the mode; step
0's `sample_id` is the single-turn sample id of the same prompt, sample index and mode (so the incremental catalog
sees it), step k's derives from step 0's and k. Each step's `sampling_seed` derives from its own sample id. Every
step of a conversation is rendered and judged in the conversation's mode.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from eagle_datagen.inference.samples import make_sample_id, sampling_seed_for
from eagle_datagen.modes import THINKING


def conversation_id_for(prompt_id: str, sample_index: int, mode: str = THINKING) -> str:
    text = f"conversation:{prompt_id}:{sample_index}" + ("" if mode == THINKING else f":{mode}")
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class ConversationJob:
    prompt_id: str
    record_id: str | None
    category: str
    sample_index: int
    messages: list[dict[str, Any]]  # the source conversation
    tools: list[dict[str, Any]] | None
    model: str
    sampling: dict[str, Any]  # without the per-step seed
    max_tool_steps: int
    shard: int = 0
    top_logprobs: int = 0  # k > 0: each step's answer carries its top-k logprobs (inference/logprobs.py)
    mode: str = THINKING  # every step is rendered and generated in it (modes.py)

    @property
    def conversation_id(self) -> str:
        return conversation_id_for(self.prompt_id, self.sample_index, self.mode)

    @property
    def first_sample_id(self) -> str:
        return make_sample_id(self.prompt_id, self.sample_index, self.model, self.sampling, self.mode)

    def step_sample_id(self, turn_index: int) -> str:
        if turn_index == 0:
            return self.first_sample_id
        return hashlib.sha256(f"{self.first_sample_id}:step:{turn_index}".encode()).hexdigest()[:32]

    def step_sampling(self, turn_index: int) -> dict[str, Any]:
        params = {k: v for k, v in self.sampling.items() if v is not None}
        params["sampling_seed"] = sampling_seed_for(self.step_sample_id(turn_index))
        return params
