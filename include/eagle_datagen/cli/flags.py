"""The flags of `eagle-datagen run` (and `tokenize`'s share of them), built from their declarations in
eagle_datagen/settings.py: a setting's `Flag` says its group, help, metavar, type, choices and whether it repeats;
its default is the setting's (settings.flag_default). Nothing here names a setting."""

from __future__ import annotations

import argparse
import builtins
from typing import Any

from eagle_datagen import settings
from eagle_datagen.cli import arguments


def _type(name: str) -> Any:
    """An argument type of cli/arguments.py (or a builtin, such as int) by name."""
    return getattr(arguments, name, None) or getattr(builtins, name)


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
    if flag.type:
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


def add_flags(parser: argparse.ArgumentParser, *groups: str) -> dict[str, argparse._ArgumentGroup]:
    """Every declared flag of these groups, in the table's order, each group titled as declared; returns the
    groups by title, for a flag written by hand (see cli/run.py)."""
    made: dict[str, argparse._ArgumentGroup] = {}
    for entry in settings.RUN_SETTINGS:
        if entry.cli and entry.flag and entry.flag.group in groups:
            if entry.flag.group not in made:
                made[entry.flag.group] = parser.add_argument_group(entry.flag.group)
            made[entry.flag.group].add_argument(entry.cli, **flag_arguments(entry))
    return made
