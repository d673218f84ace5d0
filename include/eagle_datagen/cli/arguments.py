"""What several commands share: the argument types (a bad value is argparse's one-line usage error; a flag's
declaration in eagle_datagen/settings.py names its type here) and the options `tokenize` and `run` build."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

from eagle_datagen import settings
from eagle_datagen.errors import ConfigError, DataGenError
from eagle_datagen.inference.endpoint_minimum import parse_min_endpoints

if TYPE_CHECKING:
    from eagle_datagen.tokenization.stage import TokenizeOptions

EPILOG = """\
SRC is a file (.jsonl, .jsonl.gz, .parquet, .csv), a folder, a quoted glob or an s3:// URI (a key, a prefix
or a glob), or a Hugging Face dataset: a save_to_disk folder, a folder of Parquet or Arrow files in a dataset's
layout, or hf://datasets/OWNER/NAME[?config=C&split=S] (offline: from the local cache). Records may be
messages, ShareGPT, Alpaca or prompt-column records (docs/internals/prompt-sources.md). S3 endpoint and credentials
come from the standard AWS environment variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
TOK is a tokenizer directory, a hub id, or standin:kimi-k2.5 for the stand-in tokenizer the project builds
itself (tests and the demo use it).
"""


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive integer")
    return value


def endpoint_minimum(text: str) -> int | str:
    """A count of endpoints (2) or a share of them (50%, 0.5): inference/endpoint_minimum.py."""
    try:
        return parse_min_endpoints(text)
    except ConfigError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a number of endpoints (2) nor a share (50%)") from None


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):  # float() takes "nan" and "inf"; neither is a setting
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def positive_float(text: str) -> float:
    if (value := finite_float(text)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def non_negative_float(text: str) -> float:
    if (value := finite_float(text)) < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def probability(text: str) -> float:
    if not 0 < (value := finite_float(text)) <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in (0, 1]")
    return value


def fraction(text: str) -> float:
    value = finite_float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 1 (a fraction, e.g. 0.05)")
    return value


def max_rate(text: str) -> tuple[str, float]:
    from eagle_datagen.validation.diagnosis import parse_rates

    reason, sep, rate = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not REASON=RATE (e.g. prompt_echo=0.05)")
    try:
        return next(iter(parse_rates({reason.strip(): fraction(rate)}, f"--max-rate {text}").items()))
    except DataGenError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def top_k(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1 and value != -1:
        raise argparse.ArgumentTypeError(f"{text!r} must be -1 (off) or at least 1")
    return value


def source_spec(text: str) -> str:
    if not text.strip() or "\x00" in text:  # an empty spec would name the current folder
        raise argparse.ArgumentTypeError(f"{text!r} names no prompt source: give a file, folder, glob or s3:// URI")
    return text


def column_mapping(text: str) -> tuple[str, str]:
    from eagle_datagen.sources.formats import MAPPABLE_FIELDS

    name, _, column = text.partition("=")
    if name not in MAPPABLE_FIELDS or not column:
        raise argparse.ArgumentTypeError(f"{text!r}: give FIELD=COLUMN with FIELD one of {', '.join(MAPPABLE_FIELDS)}")
    return name, column


def category_list(text: str) -> list[str]:
    from eagle_datagen.records import CATEGORY_PATTERN

    names = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in names if not CATEGORY_PATTERN.fullmatch(c)]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"bad category list {text!r}: give lowercase names separated by commas")
    return names


def prompt_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The flags every command that reads prompts shares, as TokenizeOptions fields: the settings whose declared
    `option` lands in RunOptions.prompts (settings.from_flags, so `tokenize` and `run` map them the same way)."""
    values = settings.from_flags(vars(args))
    return {
        path.removeprefix("prompts."): values[entry.config]
        for entry in settings.RUN_SETTINGS
        if entry.config in values
        for path in settings.option_paths(entry)
        if path.startswith("prompts.")
    }


def tokenize_options(args: argparse.Namespace) -> TokenizeOptions:
    from eagle_datagen.tokenization.stage import TokenizeOptions

    return TokenizeOptions(**prompt_settings(args))
