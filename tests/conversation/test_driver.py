"""The conversation driver on scripted answers: where a trajectory ends and why (one function's unit test:
the client is a script, the tokenizer and the template are the real stand-in)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conversation_records import multi_turn_record, tool_loop_record
from eagle_datagen.conversation.driver import ConversationRunner, conversation_rows, has_ended
from eagle_datagen.conversation.job import ConversationJob
from eagle_datagen.inference.samples import SampleRequest, SampleResult
from eagle_datagen.validation.rules import ValidationLimits

THINK_END, EOS = 163607, 163586
SECTION, SECTION_END, CALL, ARGS, CALL_END = 163595, 163596, 163597, 163598, 163599


class ScriptedClient:
    """Answers step k with the k-th scripted output; records the prompts it was sent."""

    def __init__(self, outputs: list[list[int]]) -> None:
        self.outputs = outputs
        self.prompts: list[list[int]] = []

    async def generate(self, request: SampleRequest) -> SampleResult:
        output = self.outputs[len(self.prompts)]
        self.prompts.append(request.prompt_ids)
        meta = {"completion_tokens": len(output), "prompt_tokens": len(request.prompt_ids)}
        return SampleResult(request, output, {"type": "stop", "matched": EOS}, meta, "scripted", 1)


def answer(tokenizer, text: str = "Done.") -> list[int]:
    enc = tokenizer.encode
    return (
        enc("Thinking it over.", add_special_tokens=False) + [THINK_END] + enc(text, add_special_tokens=False) + [EOS]
    )


def calling(tokenizer, *names: str) -> list[int]:
    ids = tokenizer.encode("I need a tool.", add_special_tokens=False) + [THINK_END, SECTION]
    for i, name in enumerate(names):
        ids += [CALL, *tokenizer.encode(f"functions.{name}:{i}", add_special_tokens=False), ARGS]
        ids += [*tokenizer.encode('{"q":"y"}', add_special_tokens=False), CALL_END]
    return ids + [SECTION_END, EOS]


def run(
    tokenizer,
    profile,
    record: dict[str, Any],
    outputs: list[list[int]],
    max_tool_steps: int = 8,
    stored: list[dict[str, Any]] = (),
):
    client = ScriptedClient(outputs)
    rows: list[dict[str, Any]] = []

    async def add_row(shard: int, row: dict[str, Any]) -> None:
        rows.append(row)

    done = {0: {r["sample_id"]: r for r in stored}}
    runner = ConversationRunner(client, tokenizer, profile, ValidationLimits(), add_row, done)  # type: ignore[arg-type]
    job = ConversationJob(
        "p" * 64,
        None,
        record["category"],
        0,
        record["messages"],
        record.get("tools"),
        "m",
        {"temperature": 1.0},
        max_tool_steps,
    )
    ended = asyncio.run(runner.run(job))
    steps = conversation_rows({r["sample_id"]: r for r in [*stored, *rows]})[job.conversation_id]
    return ended, steps, client


def ends(steps) -> list[Any]:
    return [s["conversation"]["trajectory_end"] for s in steps]


def test_three_user_turns_end_complete(tokenizer, kimi_profile):
    ended, steps, _ = run(tokenizer, kimi_profile, multi_turn_record(3), [answer(tokenizer)] * 3)
    assert ended and has_ended(steps)
    assert ends(steps) == [None, None, "complete"]
    assert [s["conversation"]["parent_sample_id"] for s in steps] == [
        None,
        steps[0]["sample_id"],
        steps[1]["sample_id"],
    ]
    assert [s["conversation"]["prompt_drift"] for s in steps] == [None, "reasoning_dropped", "reasoning_dropped"]


def test_quarantined_middle_step_ends_the_conversation(tokenizer, kimi_profile):
    no_think_end = tokenizer.encode("rambling on", add_special_tokens=False) + [EOS]
    ended, steps, client = run(
        tokenizer, kimi_profile, multi_turn_record(3), [answer(tokenizer), no_think_end, answer(tokenizer)]
    )
    assert ended and ends(steps) == [None, "quarantined"]
    assert len(client.prompts) == 2  # the third turn is never sent


def test_tool_loop_with_recorded_results_then_complete(tokenizer, kimi_profile):
    outputs = [calling(tokenizer, "a"), calling(tokenizer, "b"), calling(tokenizer, "c"), answer(tokenizer)]
    _, steps, client = run(tokenizer, kimi_profile, tool_loop_record(["a", "b", "c"]), outputs)
    assert [s["conversation"]["step_kind"] for s in steps] == ["user_turn"] + ["tool_result"] * 3
    assert ends(steps) == [None, None, None, "complete"]
    # inside the tool loop the template keeps the model's turn: no drift, token for token
    assert [s["conversation"]["prompt_drift"] for s in steps[1:]] == ["none"] * 3
    text = tokenizer.decode(client.prompts[3], skip_special_tokens=False)
    assert "## Return of functions.c:0\nrecorded result of c" in text


@pytest.mark.parametrize(
    ("outputs", "reason"),
    [
        (["other"], "no_recorded_result"),  # another function
        (["a", "b"], "no_recorded_result"),  # a parallel call the source did not record
    ],
)
def test_a_call_without_recorded_result_ends_the_trajectory(tokenizer, kimi_profile, outputs, reason):
    _, steps, client = run(tokenizer, kimi_profile, tool_loop_record(["a"]), [calling(tokenizer, *outputs)])
    assert ends(steps) == [reason] and len(client.prompts) == 1


def test_max_tool_steps_ends_the_trajectory(tokenizer, kimi_profile):
    outputs = [calling(tokenizer, "a"), calling(tokenizer, "b"), calling(tokenizer, "c")]
    _, steps, _ = run(tokenizer, kimi_profile, tool_loop_record(["a", "b", "c"]), outputs, max_tool_steps=2)
    assert ends(steps) == [None, None, "max_tool_steps"]


class FailingTemplate:
    """The stand-in tokenizer whose template raises (as a template's raise_exception does)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def apply_chat_template(self, *args, **kwargs):
        raise ValueError("this template only takes alternating roles")

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def test_a_first_step_the_template_cannot_render_is_recorded_not_dropped(tokenizer, kimi_profile):
    ended, steps, client = run(FailingTemplate(tokenizer), kimi_profile, multi_turn_record(2), [])
    assert ended and ends(steps) == ["template_error"] and not client.prompts
    assert steps[0]["error"].startswith("template_error: this template only takes alternating roles")


def test_a_rerun_replays_stored_steps_and_sends_only_the_missing_ones(tokenizer, kimi_profile):
    record = multi_turn_record(3)
    _, first, client = run(tokenizer, kimi_profile, record, [answer(tokenizer, f"A{k}") for k in range(3)])
    _, again, resumed = run(tokenizer, kimi_profile, record, [answer(tokenizer, "A2")], stored=first[:2])
    assert resumed.prompts == client.prompts[2:]  # the third step's prompt, rebuilt from the stored answers
    assert [s["sample_id"] for s in again] == [s["sample_id"] for s in first]
    assert ends(again) == [None, None, "complete"]
