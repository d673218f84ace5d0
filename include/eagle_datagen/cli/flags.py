"""The flags of `eagle-datagen run` (and `tokenize`'s share of them), built from their declarations in
eagle_datagen/settings.py: a setting's `Flag` says its group, help, metavar, type, choices and whether it repeats;
its default is the setting's (settings.flag_default). Nothing here names a setting."""

from __future__ import annotations

import argparse
import builtins
import functools
from typing import Any

from eagle_datagen import settings
from eagle_datagen.cli import arguments


def _type(name: str) -> Any:
    """An argument type of cli/arguments.py (or a builtin, such as int) by name."""
    return getattr(arguments, name, None) or getattr(builtins, name)


@functools.cache
def _bounded(type_name: str | None, bounds: settings.Bounds) -> Any:
    """The flag's declared type, then its declared range (the type's own message first, so a positive_int
    still says 'must be a positive integer'); one function per (type, range), so a flag's type is stable."""
    parse = _type(type_name) if type_name else str

    def bounded(text: str) -> Any:
        value = parse(text)
        if (problem := bounds.problem(value)) is not None:
            raise argparse.ArgumentTypeError(f"{text!r} {problem}")
        return value

    bounded.__name__ = getattr(parse, "__name__", "bounded")  # argparse names the type in its messages
    return bounded


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def flag_arguments(entry: settings.Setting) -> dict[str, Any]:
    """The keyword arguments of `add_argument(entry.cli, ...)`."""
    flag = entry.flag
    kwargs: dict[str, Any] = {}
    choices = settings.choices_of(entry)
    kwargs["help"] = flag.help.replace("{default}", _shown(entry.default)).replace(
        "{choices}", ", ".join(choices or ())
    )
    if isinstance(entry.default, bool):
        kwargs["action"] = "store_true"
    elif flag.repeat:
        kwargs["action"] = "append"
    if entry.bounds is not None:
        kwargs["type"] = _bounded(flag.type, entry.bounds)
    elif flag.type:
        kwargs["type"] = _type(flag.type)
    if choices is not None:
        kwargs["choices"] = choices
    if flag.metavar:
        kwargs["metavar"] = flag.metavar
    if flag.required:
        kwargs["required"] = True
    default = settings.flag_default(entry)
    if default is not None or entry.recipe:  # argparse's own default is None (False for a store_true flag)
        kwargs["default"] = default
    return kwargs


def add_flags(
    parser: argparse.ArgumentParser, *groups: str, table: tuple[settings.Setting, ...] | None = None
) -> dict[str, argparse._ArgumentGroup]:
    """Every declared flag of these groups, in the table's order (the run's, or another command's `table`), each
    group titled as declared; returns the groups by title, for a flag written by hand (see cli/run.py)."""
    made: dict[str, argparse._ArgumentGroup] = {}
    for entry in settings.RUN_SETTINGS if table is None else table:
        if entry.cli and entry.flag and entry.flag.group in groups:
            if entry.flag.group not in made:
                made[entry.flag.group] = parser.add_argument_group(entry.flag.group)
            made[entry.flag.group].add_argument(entry.cli, **flag_arguments(entry))
    return made
