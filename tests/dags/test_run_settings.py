"""A run's settings are declared once (eagle_datagen/settings.py): every front end's settings are in the table,
every table entry is where it says, and a setting missing from a front end says why.

The front ends: the `eagle-datagen run` flags, the recipe's keys, and Airflow (the trigger form's params, the
SGLang connection's extra keys, and `RunConfig`, which carries them to the steps)."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from pydantic import BaseModel

from eagle_datagen.cli import build_parser
from eagle_datagen.generation.steps import RunConfig
from eagle_datagen.settings import RECIPE_STRUCTURE, RUN_SETTINGS, setting
from eagle_datagen.sources.benchmarks import BenchmarkSource
from eagle_datagen.sources.recipe import CategorySpec, Defaults, Recipe, SourceSpec, load_recipe

from conftest import REPO

# models that are the shape of one entry of a list setting, not settings of their own
LEAVES = (CategorySpec, SourceSpec, BenchmarkSource)


def run_flags() -> dict[str, object]:
    """`--flag` -> its argparse default, for every option of `eagle-datagen run`."""
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    run = commands.choices["run"]
    return {
        next(o for o in action.option_strings if o.startswith("--")): action.default
        for action in run._actions
        if action.option_strings and action.dest != "help"
    }


def model_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Dotted keys of a recipe model, nested models included (and listed themselves)."""
    keys = set()
    for name, info in model.model_fields.items():
        if info.exclude:
            continue
        keys.add(prefix + name)
        for arg in typing.get_args(info.annotation) or (info.annotation,):
            if isinstance(arg, type) and issubclass(arg, BaseModel) and arg not in LEAVES:
                keys |= model_keys(arg, f"{prefix}{name}.")
    return keys


def recipe_keys() -> set[str]:
    keys = model_keys(Recipe) - {"categories.sources"}
    keys |= {f"category.{k}" for k in model_keys(CategorySpec)} | {f"source.{k}" for k in model_keys(SourceSpec)}
    # a category repeats the defaults for itself: those are the defaults' settings
    defaults = {k.removeprefix("defaults.") for k in model_keys(Defaults, "defaults.")}
    return {k for k in keys if not (k.startswith("category.") and k.removeprefix("category.") in defaults)} | {
        "category.sampling"
    }


def form_params() -> set[str]:
    from eagle_datagen_airflow.form import category_params

    recipe = load_recipe(REPO / "include/recipes/demo.yaml")
    return set(category_params(recipe, "math", "s3://eagle/datagen", 32000))


def connection_keys() -> set[str]:
    from eagle_datagen_airflow.deployment import EXTRA_KEYS

    return set(EXTRA_KEYS)


def test_setting_names_are_unique():
    names = [s.name for s in RUN_SETTINGS]
    assert len(names) == len(set(names))


def test_every_run_flag_is_a_declared_setting():
    declared = {s.cli for s in RUN_SETTINGS if s.cli}
    flags = set(run_flags())
    assert flags - declared == set(), "eagle-datagen run has flags that eagle_datagen/settings.py does not declare"
    assert declared - flags == set(), "eagle_datagen/settings.py declares run flags that do not exist"


def test_every_recipe_key_is_a_declared_setting():
    declared = {s.recipe for s in RUN_SETTINGS if s.recipe} | RECIPE_STRUCTURE
    keys = recipe_keys()
    assert keys - declared == set(), "the recipe has keys that eagle_datagen/settings.py does not declare"
    assert declared - keys == set(), "eagle_datagen/settings.py declares recipe keys that do not exist"


def test_every_form_param_and_connection_key_is_a_declared_setting():
    declared = {s.form for s in RUN_SETTINGS if s.form}
    assert form_params() == declared
    extras = {s.airflow.removeprefix("extra:") for s in RUN_SETTINGS if (s.airflow or "").startswith("extra:")}
    assert connection_keys() == extras


def test_every_run_config_field_is_a_declared_setting():
    declared = {s.config for s in RUN_SETTINGS if s.config}
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    assert fields == declared


@pytest.mark.parametrize("entry", RUN_SETTINGS, ids=[s.name for s in RUN_SETTINGS])
def test_a_setting_missing_from_a_front_end_says_why(entry):
    missing = [
        name
        for name, present in (("cli", entry.in_cli), ("recipe", entry.in_recipe), ("airflow", entry.in_airflow))
        if not present
    ]
    assert not missing or entry.only, f"{entry.name} is not in {missing}: add it there or mark it front-end-only"
    assert entry.why, f"{entry.name}: say why its default is what it is"
    if entry.in_airflow and entry.form is None and entry.airflow.startswith("extra:"):
        assert entry.config, f"{entry.name} comes from the connection but no RunConfig field carries it"


def test_the_front_ends_defaults_are_the_declared_ones():
    """A front end that states a constant default states the table's (None, False, []: "decided elsewhere")."""
    flags = run_flags()
    problems = []
    for entry in RUN_SETTINGS:
        if entry.cli and flags[entry.cli] not in (None, False, [], ()) and flags[entry.cli] != entry.default:
            problems.append(f"{entry.cli}: {flags[entry.cli]!r} != {entry.default!r}")
    config_defaults = {f.name: f.default for f in dataclasses.fields(RunConfig) if f.default is not dataclasses.MISSING}
    for entry in RUN_SETTINGS:
        value = config_defaults.get(entry.config or "")
        if value not in (None, False) and value != entry.default:
            problems.append(f"RunConfig.{entry.config}: {value!r} != {entry.default!r}")
    recipe_defaults = Recipe(categories={"x": {"sources": ["x.jsonl"]}})
    for entry in RUN_SETTINGS:
        if entry.recipe in (None, "categories"):  # the categories are the recipe's content, not a setting's value
            continue
        if not entry.recipe.startswith(("category.", "source.")) and "." not in entry.recipe:
            value = getattr(recipe_defaults, entry.recipe)
            if value not in (None, False, {}, []) and value != entry.default:
                problems.append(f"recipe {entry.recipe}: {value!r} != {entry.default!r}")
        elif entry.recipe.startswith("defaults."):
            value = recipe_defaults.defaults
            for part in entry.recipe.split(".")[1:]:
                value = getattr(value, part)
            if value is not None and value != entry.default:
                problems.append(f"recipe {entry.recipe}: {value!r} != {entry.default!r}")
    assert not problems


def test_the_form_defaults_are_the_declared_ones_where_the_recipe_has_no_say():
    from eagle_datagen_airflow.form import category_params

    params = category_params(load_recipe(REPO / "include/recipes/demo.yaml"), "math", "s3://x/y", 32000)
    for name in ("shard_size", "dry_run", "sglang_conn_id", "aws_conn_id", "limit"):
        assert params[name].value == setting(name).default, name
