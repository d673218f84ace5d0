"""Benchmark files in their published formats: what drafters are scored on, read two ways.

- For decontamination (sources/benchmarks.py): each row is a `BenchmarkItem` with its prompt texts and id, so
  that training prompts that overlap it never reach training data.
- As a prompt set (sources/formats.py): each row is a data-contract record with the benchmark's own category,
  so `eagle-datagen run --prompts` (and an evaluation) reads a benchmark file as it is published.

A format is named (recipe `format:`, `--prompts-format`, the benchmark's `format:`) or detected from a row's
keys, where the keys say it unambiguously (`detect`). No benchmark text ships with the project: the files are
the user's, and the tests use fixtures of the same shapes written for it (tests/data/benchmarks/).

The formats, as published:
- `mt_bench`: FastChat's `question.jsonl`: `question_id`, `category`, `turns` (two user turns); a copy renames
  `turns` to `prompt`.
- `speed_bench`: NVIDIA SPEED-Bench (Parquet, or the JSONL its prepare script writes with `messages`):
  `question_id, category, sub_category, turns, source, src_id, difficulty, multiturn`. Rows whose text may not be
  redistributed hold a placeholder until SPEED-Bench's prepare script fills them from their sources: such a row
  has no text to match, so it is matched on its `source` + `src_id` (a training record whose `source` and `id`
  are those), and as a prompt it is rejected (`benchmark_placeholder`).
- `bfcl`: Berkeley Function Calling Leaderboard v3 `BFCL_v3_*.json` (JSON Lines): `id`, `question` (turns, each
  a list of messages), `function` (specs with `type: "dict"`, Python type names, dots in names), turned into
  OpenAI tools as BFCL's own OpenAI handler does (object types, dots in names as underscores).
- `gsm8k`: `question`, `answer` (ending `#### N`); `math500`: `problem`, `subject`, `unique_id`;
  `ceval`: C-Eval's CSV or Parquet rows `id, question, A, B, C, D[, answer, explanation]` (the subject is the
  file's name: `computer_network_val.csv`, or its folder in the Hugging Face layout); `humaneval`: `task_id`,
  `prompt`, `entry_point`.
- `aime`: AIME problems as the hub copies publish them: `id, problem, solution, answer, url[, year]`
  (HuggingFaceH4/aime_2024, AI-MO/aimo-validation-aime), `ID, Problem, Solution, Answer` (Maxwell-Jia/AIME_2024)
  or `question, answer` (opencompass/AIME2025, which only the set's name or `format: aime` tells apart).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from eagle_datagen.records import CATEGORY_PATTERN

BENCHMARK_FORMAT_NAMES: tuple[str, ...] = (
    "mt_bench", "speed_bench", "bfcl", "gsm8k", "math500", "ceval", "aime", "humaneval"
)  # fmt: skip
AIME_TEXT = ("problem", "Problem", "question")  # HuggingFaceH4/aime_2024 and AI-MO; Maxwell-Jia; opencompass
# The text SPEED-Bench puts in the first turn of a row it does not redistribute (its prepare script's marker).
SPEED_BENCH_PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"
CEVAL_OPTIONS = ("A", "B", "C", "D")
_SPLIT_SUFFIX = re.compile(r"_(val|test|dev)$")
_BFCL_INDEX = re.compile(r"_\d+([-_]\d+)*$")  # simple_0, live_multiple_12-4-5, multi_turn_base_0
# BFCL's parameter types (Python's names) as JSON Schema's
_BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "str": "string",
               "int": "integer", "bool": "boolean"}  # fmt: skip


class NotInFormat(ValueError):
    """The row lacks what its format needs: (reject reason, detail)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def category_name(text: Any, fallback: str) -> str:
    """A benchmark's own category as a contract category: lowercase, other characters as `_` (`Intermediate
    Algebra` -> `intermediate_algebra`); `fallback` when there is none."""
    if not isinstance(text, str):
        return fallback
    name = re.sub(r"[^a-z0-9_-]+", "_", text.strip().lower()).strip("_-")[:64]
    return name if CATEGORY_PATTERN.fullmatch(name) else fallback


def placeholder(text: str) -> bool:
    return text.startswith(SPEED_BENCH_PLACEHOLDER)


@dataclass(frozen=True)
class BenchmarkRow:
    """One benchmark row, read in its format."""

    item_id: str | None  # None: the row number is its id
    category: str
    turns: tuple[str, ...]  # the user turns (their text), in order; empty for a placeholder
    system: str | None = None
    tools: list[dict[str, Any]] | None = None
    source: str | None = None
    source_key: tuple[str, str] | None = None  # SPEED-Bench: (source, src_id), to match a placeholder row
    matched: tuple[str, ...] | None = None  # what decontamination matches, when not the turns (HumanEval's code)

    @property
    def texts(self) -> tuple[str, ...]:
        """The texts decontamination matches: the user turns (HumanEval: its code itself)."""
        return self.turns if self.matched is None else self.matched

    def record(self, fallback_id: str) -> dict[str, Any]:
        """The row as a contract record: its first user turn (a later turn needs the model's own answer first);
        `fallback_id` when the row has no id of its own (GSM8K: where it was read)."""
        if not self.turns:
            raise NotInFormat(
                "benchmark_placeholder",
                "the row's text is SPEED-Bench's placeholder: fill it from its source with SPEED-Bench's prepare "
                "script (its source and src_id are still matched by decontamination)",
            )
        messages = ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": self.turns[0]}
        ]
        record: dict[str, Any] = {"id": self.item_id or fallback_id, "category": self.category}
        record["messages"] = messages
        if self.tools:
            record["tools"] = self.tools
        if self.source:
            record["source"] = self.source
        return record


def _text(raw: dict[str, Any], key: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise NotInFormat("missing_field", f"the row has no text in {key!r}")
    return value


def _strings(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(t, str) for t in value):
        raise NotInFormat("missing_field", f"{key!r} must be a non-empty list of strings")
    return tuple(value)


def _id(value: Any) -> str | None:
    return str(value) if isinstance(value, str | int) and not isinstance(value, bool) and str(value) else None


def _mt_bench(raw: dict[str, Any], origin: str) -> BenchmarkRow:
    key = "turns" if "turns" in raw else "prompt"
    return BenchmarkRow(_id(raw.get("question_id")), category_name(raw.get("category"), "mt_bench"),
                        _strings(raw.get(key), key))  # fmt: skip


def _speed_bench(raw: dict[str, Any], origin: str) -> BenchmarkRow:
    if "messages" in raw and "turns" not in raw:  # the JSONL of SPEED-Bench's prepare script
        messages = raw["messages"]
        if not isinstance(messages, list):
            raise NotInFormat("missing_field", "'messages' must be a list of user messages")
        turns = _strings([m.get("content") if isinstance(m, dict) else m for m in messages], "messages")
    else:
        turns = _strings(raw.get("turns"), "turns")
    source, src_id = raw.get("source"), _id(raw.get("src_id"))
    key = (source, src_id) if isinstance(source, str) and source and src_id else None
    return BenchmarkRow(
        _id(raw.get("question_id")),
        category_name(raw.get("category"), "speed_bench"),
        () if any(placeholder(t) for t in turns) else turns,
        source=source if isinstance(source, str) and source else None,
        source_key=key,
    )


def bfcl_tool(function: Any) -> dict[str, Any]:
    """A BFCL function spec as an OpenAI tool: `dict` and the other Python type names as JSON Schema types
    (`any` leaves the type open), dots in the name as underscores (OpenAI names allow none)."""
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise NotInFormat("bad_tool", "a BFCL function must be an object with a name")
    spec: dict[str, Any] = {"name": function["name"].replace(".", "_")}
    if isinstance(function.get("description"), str):
        spec["description"] = function["description"]
    if isinstance(function.get("parameters"), dict):
        spec["parameters"] = _json_schema(function["parameters"])
    return {"type": "function", "function": spec}


def _json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    converted = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            kind = value.lower()
            if kind == "any":
                continue
            converted[key] = _BFCL_TYPES.get(kind, kind)
        elif key == "properties" and isinstance(value, dict):
            converted[key] = {name: _json_schema(p) if isinstance(p, dict) else p for name, p in value.items()}
        elif key == "items" and isinstance(value, dict):
            converted[key] = _json_schema(value)
        else:
            converted[key] = value
    return converted


def _bfcl(raw: dict[str, Any], origin: str) -> BenchmarkRow:
    question = raw.get("question")
    if not isinstance(question, list) or not question or not all(isinstance(turn, list) for turn in question):
        raise NotInFormat("missing_field", "'question' must be a list of turns, each a list of messages")
    first = question[0]
    system = next((m.get("content") for m in first if isinstance(m, dict) and m.get("role") == "system"), None)
    turns = tuple(
        m["content"]
        for turn in question
        for m in turn
        if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str) and m["content"]
    )
    if not turns:
        raise NotInFormat("missing_field", "'question' holds no user message")
    item_id = _id(raw.get("id"))
    stem = PurePosixPath(origin.rpartition(":")[0]).stem.removeprefix("BFCL_v3_").removeprefix("BFCL_v4_")
    category = category_name(_BFCL_INDEX.sub("", item_id) if item_id else stem, "bfcl")
    functions = raw.get("function")
    tools = [bfcl_tool(f) for f in functions] if isinstance(functions, list) and functions else None
    return BenchmarkRow(item_id, category, turns, system if isinstance(system, str) else None, tools)


def _gsm8k(raw: dict[str, Any], origin: str) -> BenchmarkRow:
    return BenchmarkRow(_id(raw.get("id", raw.get("idx"))), "math", (_text(raw, "question"),))


def _math500(raw: dict[str, Any], origin: str) -> BenchmarkRow:
    return BenchmarkRow(_id(raw.get("unique_id")), category_name(raw.get("subject"), "math"), (_text(raw, "problem"),))


def _aime(raw: dict[str, Any], origin: str) -> BenchmarkRow:
    key = next((k for k in AIME_TEXT if isinstance(raw.get(k), str) and raw[k].strip()), None)
    if key is None:
        raise NotInFormat("missing_field", f"an AIME row needs its problem in one of {', '.join(AIME_TEXT)}")
    return BenchmarkRow(_id(raw.get("id", raw.get("ID"))), "math", (raw[key],))


def ceval_subject(origin: str) -> str | None:
    """C-Eval's subject from where a row was read: `val/computer_network_val.csv`, or the Hugging Face layout's
    `computer_network/val-00000-of-00001.parquet`."""
    path = PurePosixPath(origin.rpartition(":")[0])
    stem = _SPLIT_SUFFIX.sub("", path.stem)
    if stem.split("-")[0] in ("val", "test", "dev"):
        stem = path.parent.name
    return stem or None


def _ceval(raw: dict[str, Any], origin: str) -> BenchmarkRow:
    question = _text(raw, "question")
    options = [raw.get(letter) for letter in CEVAL_OPTIONS]
    if not all(isinstance(o, str | int | float) and not isinstance(o, bool) for o in options):
        raise NotInFormat("missing_field", "a C-Eval row needs the options A, B, C and D")
    text = question + "".join(f"\n{letter}. {option}" for letter, option in zip(CEVAL_OPTIONS, options, strict=True))
    subject = ceval_subject(origin)
    row_id = _id(raw.get("id"))
    item_id = f"{subject}-{row_id}" if subject and row_id is not None else row_id
    return BenchmarkRow(item_id, category_name(subject, "ceval"), (text,))


def _humaneval(raw: dict[str, Any], origin: str) -> BenchmarkRow:
    prompt = _text(raw, "prompt")
    # a chat model is asked to complete the function (HumanEval's prompt is the code to complete)
    ask = f"Complete the following Python function.\n\n{prompt}"
    return BenchmarkRow(_id(raw.get("task_id")), "code", (ask,), matched=(prompt,))


@dataclass(frozen=True)
class BenchmarkFormat:
    name: str
    key_columns: tuple[str, ...]  # a tabular source needs one of these columns
    detect: Callable[[dict[str, Any]], bool]  # the row's keys say this format, unambiguously
    read: Callable[[dict[str, Any], str], BenchmarkRow]

    def row(self, raw: dict[str, Any], origin: str) -> BenchmarkRow:
        """The row read in this format; `NotInFormat` when it lacks what the format needs."""
        return self.read(raw, origin)


def _is_list(value: Any) -> bool:
    return isinstance(value, list)


FORMATS: dict[str, BenchmarkFormat] = {
    f.name: f
    for f in (
        BenchmarkFormat(
            "speed_bench",
            ("turns", "messages"),
            lambda r: "src_id" in r and "sub_category" in r and ("turns" in r or "messages" in r),
            _speed_bench,
        ),
        BenchmarkFormat(
            "mt_bench",
            ("turns", "prompt"),
            lambda r: "question_id" in r and "src_id" not in r and any(_is_list(r.get(k)) for k in ("turns", "prompt")),
            _mt_bench,
        ),
        BenchmarkFormat(
            "bfcl",
            ("question",),
            lambda r: _is_list(r.get("question")) and bool(r["question"]) and _is_list(r["question"][0]),
            _bfcl,
        ),
        BenchmarkFormat(
            "ceval",
            ("question",),
            lambda r: isinstance(r.get("question"), str) and all(k in r for k in CEVAL_OPTIONS),
            _ceval,
        ),
        BenchmarkFormat(
            "gsm8k",
            ("question",),
            lambda r: isinstance(r.get("question"), str) and "####" in str(r.get("answer", "")),
            _gsm8k,
        ),
        BenchmarkFormat("math500", ("problem",), lambda r: "problem" in r and "unique_id" in r, _math500),
        BenchmarkFormat(
            "aime",
            AIME_TEXT,
            lambda r: ("problem" in r and "answer" in r and "url" in r and "unique_id" not in r)
            or ("Problem" in r and "Answer" in r),
            _aime,
        ),
        BenchmarkFormat(
            "humaneval", ("prompt",), lambda r: "task_id" in r and "prompt" in r and "entry_point" in r, _humaneval
        ),
    )
}
assert tuple(sorted(FORMATS)) == tuple(sorted(BENCHMARK_FORMAT_NAMES))


def detect_benchmark(raw: dict[str, Any]) -> str | None:
    """The benchmark format whose keys the row has (at most one does), or None."""
    found = [name for name, fmt in FORMATS.items() if fmt.detect(raw)]
    return found[0] if len(found) == 1 else None
