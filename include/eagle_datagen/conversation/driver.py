"""Generate one conversation step by step (`turns: each`): render, generate, parse, continue.

Every step is rendered, generated and validated in the conversation's mode (an instant conversation's steps all
end in `<think></think>`, and its answers hold no reasoning). Steps of one conversation run in order (step k's
prompt holds the model's answers of steps < k); many
conversations run at once, so the servers stay as busy as with single-turn samples. Each finished step is
checkpointed with its prompt ids and its place in the conversation; on a rerun, stored steps are replayed
(never sent again) and the conversation continues from its last stored step.

A step that failed permanently or fails validation ends its conversation (`error`, `quarantined`): later
steps would continue from a faulty answer. A step whose transient failure ran out of retries stops the
conversation for this invocation only: it is not checkpointed, so a rerun sends it again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from eagle_datagen.conversation.assistant_message import parse_output
from eagle_datagen.conversation.drift import prompt_drift
from eagle_datagen.conversation.job import ConversationJob
from eagle_datagen.conversation.trajectory import StepKind, Trajectory
from eagle_datagen.inference.client import GenerateClient
from eagle_datagen.inference.logprobs import LOGPROBS_KEY
from eagle_datagen.inference.samples import SampleRequest, SampleResult
from eagle_datagen.modes import THINKING
from eagle_datagen.profile import ModelProfile
from eagle_datagen.tokenization.tokenize import render_prompt
from eagle_datagen.validation.rules import ValidationLimits, validate_sample

log = logging.getLogger(__name__)
AddRow = Callable[[int, dict[str, Any]], Awaitable[None]]


def validation_row(
    prompt_ids: list[int], saved: dict[str, Any], mode: str = THINKING, top_logprobs: int = 0
) -> dict[str, Any]:
    """The generated-row columns validation reads, from a checkpointed result (as publish.py builds them);
    `top_logprobs`: the k the request asked for (the answer's logprobs are checked too)."""
    meta, finish = saved.get("meta_info") or {}, saved.get("finish_reason") or {}
    return {
        "prompt_ids": prompt_ids,
        "output_ids": saved["output_ids"],
        "finish_reason": "error" if saved["error"] else finish.get("type", "abort"),
        "completion_tokens": int(meta.get("completion_tokens", len(saved["output_ids"]))),
        "prompt_tokens": int(meta.get("prompt_tokens", len(prompt_ids))),
        "error": saved["error"],
        "mode": mode,
    } | soft_targets(top_logprobs, meta)


def soft_targets(k: int, meta: dict[str, Any]) -> dict[str, Any]:
    """What validation and publishing read of an answer's top-k logprobs, when the run asked for k > 0."""
    return {"top_logprobs_num": k, "logprobs": meta.get(LOGPROBS_KEY)} if k else {}


class ConversationRunner:
    def __init__(
        self,
        client: GenerateClient,
        tokenizer: Any,
        profile: ModelProfile,
        limits: ValidationLimits,
        add_row: AddRow,
        stored: dict[int, dict[str, dict[str, Any]]],  # shard -> sample_id -> checkpointed row
        on_answer: Callable[[SampleResult], None] | None = None,  # sees each fresh step once it is stored
    ) -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.profile = profile
        self.limits = limits
        self.add_row = add_row
        self.stored = stored
        self.on_answer = on_answer

    def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, mode: str = THINKING
    ) -> list[int]:
        """The template's text in `mode`, encoded without added special tokens: what apply_chat_template(tokenize=
        True) gives (as tokenization/tokenize.py does), at half its cost (it runs on the event loop, once a step)."""
        text = render_prompt(self.tokenizer, messages, tools, self.profile.mode(mode).template_kwargs)
        backend = getattr(self.tokenizer, "backend_tokenizer", None)  # a fast tokenizer: skip the wrapper's work
        if backend is not None:
            return backend.encode(text, add_special_tokens=False).ids
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _next_prompt(
        self,
        trajectory: Trajectory,
        job: ConversationJob,
        saved: dict[str, Any],
        prompt_ids: list[int],
        replayed: bool = False,
    ) -> tuple[str | None, list[int] | None, StepKind | None]:
        """(end reason, None, None) or (None, next prompt ids, next step kind). A replayed step (stored by an
        earlier invocation without an end) was judged then: it is not validated again, so a rerun with other
        validation limits still continues the conversation it stored."""
        if saved["error"]:
            return "error", None, None
        row = validation_row(prompt_ids, saved, job.mode, job.top_logprobs)
        if not replayed and validate_sample(row, self.profile, self.limits) is not None:
            return "quarantined", None, None
        answer = parse_output(self.tokenizer, saved["output_ids"], self.profile, job.mode)
        following = trajectory.after_answer(answer)
        if isinstance(following, str):
            return following, None, None
        try:
            ids = self.render(following.messages, job.tools, job.mode)
        except Exception as exc:  # templates may raise anything
            log.warning("conversation %s: the template failed on its next step: %s", job.conversation_id, exc)
            return "template_error", None, None
        if len(ids) >= self.profile.context_length:
            return "prompt_too_long", None, None
        return None, ids, following.kind

    async def run(self, job: ConversationJob) -> bool:
        """Generate the conversation's missing steps; True when it has ended (False: left for a rerun)."""
        stored = self.stored.get(job.shard, {})
        trajectory = Trajectory.of(job.messages, job.max_tool_steps)
        try:
            prompt_ids = self.render(trajectory.first_step().messages, job.tools, job.mode)
        except Exception as exc:  # templates may raise anything: record it (quarantined), never drop it
            if job.first_sample_id not in stored:
                await self.add_row(job.shard, self._unrendered(job, f"template_error: {exc}"))
            return True
        kind: StepKind = "user_turn"
        parent: str | None = None
        drift: str | None = None
        turn_index = 0
        while True:
            sample_id = job.step_sample_id(turn_index)
            saved = stored.get(sample_id)
            fresh = saved is None
            result: SampleResult | None = None
            if saved is not None and saved["conversation"]["trajectory_end"] is not None:
                return True  # ended by an earlier invocation
            if saved is None:
                request = SampleRequest(
                    sample_id,
                    job.prompt_id,
                    job.record_id,
                    job.category,
                    job.sample_index,
                    prompt_ids,
                    job.step_sampling(turn_index),
                    job.shard,
                    top_logprobs=job.top_logprobs,
                    mode=job.mode,
                )
                result = await self.client.generate(request)
                if result.retryable:
                    return False
                saved = result.to_checkpoint()
            end, next_ids, next_kind = self._next_prompt(trajectory, job, saved, prompt_ids, replayed=not fresh)
            if fresh:
                saved |= {
                    "prompt_ids": prompt_ids,
                    "sampling": job.step_sampling(turn_index),
                    "conversation": {
                        "conversation_id": job.conversation_id,
                        "turn_index": turn_index,
                        "parent_sample_id": parent,
                        "step_kind": kind,
                        "trajectory_end": end,
                        "prompt_drift": drift,
                    },
                }
                await self.add_row(job.shard, saved)
                if self.on_answer is not None and result is not None:
                    self.on_answer(result)
            if end is not None:
                return True
            assert next_ids is not None and next_kind is not None
            drift = prompt_drift(prompt_ids, saved["output_ids"], next_ids, self.profile.think_end.id)
            parent, prompt_ids, kind = sample_id, next_ids, next_kind
            turn_index += 1

    @staticmethod
    def _unrendered(job: ConversationJob, error: str) -> dict[str, Any]:
        """The first step of a conversation whose prompt the template could not render: never sent."""
        return {
            "sample_id": job.first_sample_id,
            "prompt_id": job.prompt_id,
            "sample_index": job.sample_index,
            "shard": job.shard,
            "output_ids": [],
            "finish_reason": {},
            "meta_info": {},
            "endpoint": "",
            "attempts": 0,
            "error": error,
            "prompt_ids": [],
            "sampling": job.step_sampling(0),
            "conversation": {
                "conversation_id": job.conversation_id,
                "turn_index": 0,
                "parent_sample_id": None,
                "step_kind": "user_turn",
                "trajectory_end": "template_error",
                "prompt_drift": None,
            },
        }


def conversation_rows(done: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """conversation_id -> its checkpointed steps in turn order, from one shard's checkpoint rows."""
    by_conversation: dict[str, list[dict[str, Any]]] = {}
    for row in done.values():
        step = row.get("conversation")
        if step is not None:
            by_conversation.setdefault(step["conversation_id"], []).append(row)
    for steps in by_conversation.values():
        steps.sort(key=lambda r: r["conversation"]["turn_index"])
    return by_conversation


def has_ended(steps: list[dict[str, Any]]) -> bool:
    return bool(steps) and steps[-1]["conversation"]["trajectory_end"] is not None
