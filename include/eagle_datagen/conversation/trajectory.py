"""Walk a source conversation with the model's own answers: what the next step renders, or why it ends.

Step k's history is the source up to its k-th user message, in which every assistant turn is the model's
own answer and every tool result one the source recorded for a matching call. The source's system and user
messages are kept; its assistant and tool messages are only a record of what the tools returned.

A tool call matches the next recorded call of the same function name in order (the arguments may differ);
its recorded result is spliced in with the model's call id. No matching record (another function, more
calls than recorded, parallel calls that do not line up) ends the trajectory with `no_recorded_result`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from eagle_datagen.conversation.assistant_message import AssistantMessage

StepKind = Literal["user_turn", "tool_result"]
# Why a conversation stopped; `quarantined` and `error` are decided by the driver (the step's verdict).
TRAJECTORY_ENDS: dict[str, str] = {
    "complete": "every user turn of the source was answered",
    "no_recorded_result": "the model called a tool the source recorded no (matching) result for",
    "max_tool_steps": "the conversation used its max_tool_steps tool results",
    "unparsable_output": "the output's tool-call section does not parse",
    "quarantined": "the step failed validation: later steps would continue from a faulty answer",
    "error": "the step's request failed permanently (a 400)",
}


@dataclass(frozen=True)
class RecordedCall:
    name: str
    result: dict[str, Any]  # the source's tool message


@dataclass(frozen=True)
class Turn:
    context: list[dict[str, Any]]  # the source's system and user messages that open the turn
    recorded: list[RecordedCall]  # the tool results the source recorded after it, in call order


def split_turns(messages: list[dict[str, Any]]) -> list[Turn]:
    """One turn per user message: the messages up to it and the tool results recorded after it."""
    turns: list[Turn] = []
    context: list[dict[str, Any]] = []
    results = {m.get("tool_call_id"): m for m in messages if m["role"] == "tool"}
    for message in messages:
        if message["role"] in ("system", "user"):
            context.append(message)
            if message["role"] == "user":
                turns.append(Turn(context, []))
                context = []
        elif message["role"] == "assistant" and turns:
            for call in message.get("tool_calls") or []:
                if call["id"] in results:
                    turns[-1].recorded.append(RecordedCall(call["function"]["name"], results[call["id"]]))
    return turns


@dataclass(frozen=True)
class NextStep:
    messages: list[dict[str, Any]]  # the history to render, ending in a user or tool message
    kind: StepKind


@dataclass
class Trajectory:
    """The state of one conversation between steps (rebuilt by replaying stored steps on a resume)."""

    turns: list[Turn]
    max_tool_steps: int
    history: list[dict[str, Any]] = field(default_factory=list)
    turn: int = 0
    next_recorded: int = 0  # the first unused recorded call of the current turn
    tool_steps: int = 0

    @classmethod
    def of(cls, messages: list[dict[str, Any]], max_tool_steps: int) -> Trajectory:
        # a source without a user message (a system prompt and a tool result) has one step: its last answer
        return cls(split_turns(messages) or [Turn(list(messages), [])], max_tool_steps)

    def first_step(self) -> NextStep:
        self.history = list(self.turns[0].context)
        return NextStep(list(self.history), "user_turn")

    def after_answer(self, answer: AssistantMessage) -> NextStep | str:
        """The step that continues from the model's answer, or the trajectory's end reason."""
        if answer.problem is not None and answer.problem != "no think-end token":
            return "unparsable_output"
        self.history.append(answer.to_message())
        if not answer.tool_calls:
            self.turn += 1
            self.next_recorded = 0
            if self.turn == len(self.turns):
                return "complete"
            self.history.extend(self.turns[self.turn].context)
            return NextStep(list(self.history), "user_turn")
        recorded = self.turns[self.turn].recorded[self.next_recorded :]
        if len(answer.tool_calls) > len(recorded) or any(
            call.name != record.name for call, record in zip(answer.tool_calls, recorded, strict=False)
        ):
            return "no_recorded_result"
        if self.tool_steps >= self.max_tool_steps:
            return "max_tool_steps"
        for call, record in zip(answer.tool_calls, recorded, strict=False):
            self.history.append(record.result | {"tool_call_id": call.id})
        self.next_recorded += len(answer.tool_calls)
        self.tool_steps += 1
        return NextStep(list(self.history), "tool_result")
