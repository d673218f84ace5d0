"""A run's settings are declared once (eagle_datagen/settings.py): every front end's settings are in the table,
every table entry is where it says, and a setting missing from a front end says why.

The front ends: the `eagle-datagen run` flags, the recipe's keys, and Airflow (the trigger form's params, the
SGLang connection's extra keys, and `RunConfig`, which carries them to the steps)."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from pydantic import BaseModel

from eagle_datagen import settings
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


def option_leaves(cls: type, prefix: str = "") -> set[str]:
    """The dotted paths of an options dataclass's leaves (nested options dataclasses walked into)."""
    hints = typing.get_type_hints(cls)
    paths = set()
    for f in dataclasses.fields(cls):
        try:
            paths |= option_leaves(settings.options_class(hints[f.name]), f"{prefix}{f.name}.")
        except TypeError:
            paths.add(prefix + f.name)
    return paths


def test_every_setting_lands_in_the_layers_options_where_it_says():
    """Each RunConfig field has an `option`, every declared path is a leaf of RunOptions, and every RunOptions
    leaf is fed by a setting or is a declared tuning (settings.OPTION_TUNINGS): a setting added to a layer's
    options without its declaration, or a declaration pointing nowhere, fails here."""
    from eagle_datagen.generation.stage import RunOptions

    leaves = option_leaves(RunOptions)
    fed = {path for entry in RUN_SETTINGS for path in settings.option_paths(entry)}
    for entry in RUN_SETTINGS:
        assert bool(entry.config) == bool(entry.option), f"{entry.name}: a RunConfig field needs its `option`"
    assert fed - leaves == set(), "declared option paths that RunOptions does not have"
    tuned = {leaf for leaf in leaves if any(leaf == t or leaf.startswith(t + ".") for t in settings.OPTION_TUNINGS)}
    assert leaves - fed - tuned == set(), "RunOptions leaves no setting feeds: declare their `option` or a tuning"
    assert fed & tuned == set(), "a setting's option is also listed as a tuning"
    stale = {t for t in settings.OPTION_TUNINGS if not any(leaf == t or leaf.startswith(t + ".") for leaf in leaves)}
    assert stale == set(), "OPTION_TUNINGS lists options RunOptions no longer has"


def test_each_setting_value_reaches_its_option():
    """A distinct value per setting, through RunConfig.options(): each arrives at every path its `option` names
    (a setting mapped to the wrong place, or dropped, fails)."""
    from operator import attrgetter

    values = {}
    for i, entry in enumerate(s for s in RUN_SETTINGS if s.config):
        default = entry.default
        value = (
            f"r{i}"
            if entry.name == "run_id"
            else [f"v{i}"]
            if isinstance(default, list)
            else {"prompt_echo": 0.5}
            if entry.name == "max_rates"
            else {"prompt": f"c{i}"}
            if isinstance(default, dict)
            else not default
            if isinstance(default, bool)
            else f"v{i}"
            if isinstance(default, str)
            else type(default or 0)(1000 + i)  # None: a number, the options' checks compare some
        )
        values[entry.config] = value
    values["min_endpoints"] = 2
    options = RunConfig(**values).options()
    for entry in RUN_SETTINGS:
        for path in settings.option_paths(entry):
            assert attrgetter(path)(options) == values[entry.config], f"{entry.name} -> {path}"


def test_run_config_defaults_and_required_fields_come_from_the_declarations():
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    for entry in RUN_SETTINGS:
        if not entry.config:
            continue
        f = fields[entry.config]
        assert f.kw_only
        if entry.required:
            assert f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING, entry.name
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        assert default == settings.config_default(entry), entry.name
        if entry.flag and entry.flag.required:
            pytest.fail(f"{entry.name}: a required flag is a required setting")
    a = RunConfig(output="o", tokenizer="t", sglang_urls=["u"], run_id="r")
    b = RunConfig(output="o", tokenizer="t", sglang_urls=["u"], run_id="r")
    a.prompts.append("x")  # a default list is each config's own
    assert b.prompts == []


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


def run_actions() -> dict[str, object]:
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    return {
        next(o for o in action.option_strings if o.startswith("--")): action
        for action in commands.choices["run"]._actions
        if action.option_strings and action.dest != "help"
    }


def stated(value: object) -> list[str]:
    """The ways a help text may state a default."""
    if isinstance(value, float):
        return [f"{value:g}", f"{value:,}", repr(value)]
    if isinstance(value, int) and not isinstance(value, bool):
        return [str(value), f"{value:,}"]
    return [str(value)]


UNSTATED = (None, False, True, [], {}, ())  # defaults that are "off", "none" or "decided elsewhere"


@pytest.mark.parametrize("entry", RUN_SETTINGS, ids=[s.name for s in RUN_SETTINGS])
def test_a_settings_front_ends_agree_with_its_declaration(entry):
    """Generated from the table, one test per setting: its flag's default (or the default its help states), its
    form param's default (or, empty, the default its description states), its recipe key's default and its
    RunConfig field's default are the declared default."""
    from eagle_datagen_airflow.form import category_params

    default = entry.default
    if entry.cli:
        action = run_actions()[entry.cli]
        if action.default not in UNSTATED:
            assert action.default == default, f"{entry.cli}: argparse default {action.default!r}"
        elif default not in UNSTATED and not isinstance(default, str):
            assert any(text in (action.help or "") for text in stated(default)), f"{entry.cli}: help omits {default}"
    if entry.form:
        bare = Recipe(categories={"x": {"sources": ["x.jsonl"]}})
        param = category_params(bare, "x", "s3://eagle/datagen", settings.DRAFT_VOCAB_SIZE)[entry.form]
        if entry.name == "incremental":  # the form asks the inverse (force_regenerate), off by default
            assert param.value is True and not default or param.value is False and not default
        elif entry.name == "max_rates":  # every reason's built-in rate, under the recipe's (none here)
            from eagle_datagen.validation.diagnosis import DiagnosisThresholds

            assert param.value == DiagnosisThresholds().rates()
        elif entry.name != "output":  # the deployment's output root
            if param.value is None and default is not None:
                assert any(t in param.description for t in stated(default)), f"{entry.form}: says no default"
            else:
                assert param.value == default, f"form {entry.form}: {param.value!r}"
    if entry.recipe and entry.recipe not in ("categories",) and not entry.recipe.startswith(("category.", "source.")):
        value = Recipe(categories={"x": {"sources": ["x.jsonl"]}})
        for part in entry.recipe.split("."):
            value = getattr(value, part) if value is not None else None
        if hasattr(value, "ngram"):  # decontamination / near_duplicates: off unless the recipe has the block
            value = None
        if value not in (None, [], {}) or default not in (None, [], {}):
            assert value in (None, default) or value == default, f"recipe {entry.recipe}: {value!r}"
    if entry.config:
        field = next(f for f in dataclasses.fields(RunConfig) if f.name == entry.config)
        if field.default is not dataclasses.MISSING and field.default is not None:
            assert field.default == default, f"RunConfig.{entry.config}: {field.default!r}"


def test_the_form_defaults_are_the_declared_ones_where_the_recipe_has_no_say():
    from eagle_datagen_airflow.form import category_params

    params = category_params(load_recipe(REPO / "include/recipes/demo.yaml"), "math", "s3://x/y", 32000)
    for name in ("shard_size", "dry_run", "sglang_conn_id", "aws_conn_id", "limit"):
        assert params[name].value == setting(name).default, name


def test_the_configuration_reference_is_generated_from_the_table():
    """docs/configuration.md's synopsis of tokenize and run, and its settings table, are what the declarations
    generate (cli/reference.py), so a new flag or a changed default shows up there or fails here."""
    from eagle_datagen.cli.reference import SYNOPSIS_START, generated

    text = (REPO / "docs/configuration.md").read_text()
    assert settings.REFERENCE_START in text and SYNOPSIS_START in text, "docs/configuration.md lost a generated part"
    assert text == generated(text), (
        "docs/configuration.md's synopsis or settings reference is stale: run "
        "`.venv/bin/python -m eagle_datagen.cli.reference docs/configuration.md`"
    )
    for entry in RUN_SETTINGS:
        if entry.cli:
            assert entry.cli in text.split(SYNOPSIS_START)[1], f"the synopsis lacks {entry.cli}"


@pytest.mark.parametrize("entry", RUN_SETTINGS, ids=[s.name for s in RUN_SETTINGS])
def test_messages_name_a_setting_as_each_front_end_calls_it(entry):
    assert settings.named(entry.name, "cli") == (entry.cli or entry.name)
    airflow = settings.named(entry.name, "airflow")
    if entry.form:
        assert airflow == f"the {entry.form} param"
    elif (entry.airflow or "").startswith("extra:"):
        assert repr(entry.airflow.removeprefix("extra:")) in airflow
    elif entry.recipe and not entry.airflow:  # an Airflow run takes it from the DAG's recipe
        assert airflow == f"the recipe's {entry.recipe}"
    assert "--" not in airflow  # an Airflow user has no flags


def test_every_flag_reaches_its_run_config_field():
    """settings.from_flags finds each flag by its argparse attribute: a flag with another `dest` would be lost."""
    actions = run_actions()
    for entry in RUN_SETTINGS:
        if entry.cli and entry.config:
            assert actions[entry.cli].dest == settings.flag_dest(entry), entry.cli


def test_every_form_param_and_connection_extra_reaches_run_config():
    from eagle_datagen_airflow.deployment import Deployment
    from eagle_datagen_airflow.form import category_params

    params = category_params(load_recipe(REPO / "include/recipes/demo.yaml"), "math", "s3://x/y", 32000)
    values = settings.from_form({name: param.value for name, param in params.items()})
    assert set(values) >= {s.config for s in RUN_SETTINGS if s.form and s.config and params[s.form].value is not None}
    extra = {f.name: f"v-{f.name}" for f in dataclasses.fields(Deployment)}
    mapped = settings.from_connection(extra)
    assert set(mapped) == {s.config for s in RUN_SETTINGS if (s.airflow or "").startswith("extra:")}


# --- the flags and the form params are built from the declarations (cli/flags.py, form.param)


@pytest.mark.parametrize("entry", RUN_SETTINGS, ids=[s.name for s in RUN_SETTINGS])
def test_a_settings_flag_and_form_param_are_built_from_its_declaration(entry):
    """Generated from the table, one test per setting: the `run` flag has the declared group, help, metavar,
    type, choices, action and default; the form param the declared JSON type, schema keywords, title, section
    and description. A setting with a flag or param but no `Flag`/`FormParam` is a hand-written one."""
    import argparse

    from eagle_datagen.cli.flags import flag_arguments
    from eagle_datagen_airflow.form import category_params

    if entry.cli and entry.flag:
        action, flag = run_actions()[entry.cli], entry.flag
        built = flag_arguments(entry)
        assert action.dest == settings.flag_dest(entry)
        assert action.help == built["help"] and "{" not in action.help, entry.cli
        assert action.metavar == flag.metavar and action.required == flag.required
        assert action.type is built.get("type") and (flag.type is None) == (action.type is None)
        assert (tuple(action.choices) if action.choices else None) == settings.choices_of(entry)
        kind = (
            argparse._StoreTrueAction
            if isinstance(entry.default, bool)
            else argparse._AppendAction
            if flag.repeat
            else argparse._StoreAction
        )
        assert type(action) is kind, entry.cli
        assert action.default == settings.flag_default(entry)
        group = next(
            g for g in build_run_parser()._action_groups if any(a.dest == action.dest for a in g._group_actions)
        )
        assert group.title == flag.group
    if entry.form and entry.param:
        spec = entry.param
        bare = Recipe(categories={"x": {"sources": ["x.jsonl"]}})
        param = category_params(bare, "x", "s3://eagle/datagen", settings.DRAFT_VOCAB_SIZE)[entry.form]
        schema = param.schema
        assert schema["type"] == (["null", spec.type] if spec.nullable or param.value is None else spec.type)
        assert schema["title"] == spec.title and schema["section"] == spec.section
        assert {k: schema[k] for k in spec.schema} == spec.schema
        if settings.choices_of(entry):
            assert schema["enum"] == list(settings.choices_of(entry))
        assert param.description.startswith(spec.description.split("{")[0])
        assert "{" not in param.description.replace('{"urls"', ""), entry.form
        if spec.default is not settings.SHOWN:
            assert param.value == spec.default


def build_run_parser():
    parser = build_parser()
    return next(a for a in parser._actions if a.dest == "command").choices["run"]


def test_a_new_setting_is_one_declaration(monkeypatch):
    """A declaration with its Flag and FormParam is enough: the `run` flag and the form param appear, with the
    declared default, type check and schema, and both reach RunConfig's field by the derived maps."""
    from eagle_datagen_airflow.form import category_params

    new = settings.Setting(
        "min_widgets",
        3,
        "3 widgets: a test's setting",
        cli="--min-widgets",
        form="min_widgets",
        config="min_widgets",
        flag=settings.Flag(
            settings.SGLANG, "at least N widgets (default: {default})", metavar="N", type="positive_int"
        ),
        param=settings.FormParam("integer", "Min widgets", "At least this many.", settings.FORM_RUN, {"minimum": 1}),
    )
    monkeypatch.setattr(settings, "RUN_SETTINGS", (*RUN_SETTINGS, new))
    action = run_actions()["--min-widgets"]
    assert (action.default, action.metavar, action.help) == (3, "N", "at least N widgets (default: 3)")
    with pytest.raises(SystemExit):  # the declared type checks the value: 0 is not a positive integer
        build_parser().parse_args(
            ["run", "--sglang-url", "u", "--output", "o", "--tokenizer", "t", "--min-widgets", "0"]
        )
    bare = Recipe(categories={"x": {"sources": ["x.jsonl"]}})
    param = category_params(bare, "x", "s3://eagle/datagen", 32000)["min_widgets"]
    assert (param.value, param.schema["type"], param.schema["minimum"]) == (3, "integer", 1)
    assert settings.from_flags({"min_widgets": 5})["min_widgets"] == 5
    assert settings.from_form({"min_widgets": 7}) == {"min_widgets": 7}


def test_a_new_setting_reaches_its_layer_by_its_declaration(monkeypatch):
    """The RunConfig field and the options come from the declaration: a setting with `option` lands in the layer's
    options without a hand-written map (here a layer the test adds, as a new setting's use would)."""
    from eagle_datagen.generation import stage

    @dataclasses.dataclass(frozen=True)
    class WidgetPolicy:
        min_widgets: int = 0

    @dataclasses.dataclass(frozen=True)
    class Options(stage.RunOptions):
        widgets: WidgetPolicy = dataclasses.field(default_factory=WidgetPolicy)

    new = settings.Setting("min_widgets", 3, "a test's setting", config="min_widgets", option="widgets.min_widgets")
    monkeypatch.setattr(settings, "RUN_SETTINGS", (*RUN_SETTINGS, new))
    config_type = dataclasses.make_dataclass("Config", settings.config_fields(), kw_only=True)
    config = config_type(output="o", tokenizer="t", sglang_urls=["u"], run_id="r")
    assert config.min_widgets == 3
    monkeypatch.setitem(globals(), "WidgetPolicy", WidgetPolicy)  # get_type_hints resolves it by name
    built = settings.build_options(Options, dataclasses.replace(config, min_widgets=9))
    assert built.widgets == WidgetPolicy(9) and built.prompts.output == "o"


@pytest.mark.parametrize(
    ("front_end", "says", "never"),
    [("cli", "--min-endpoints", "the min_endpoints param"), ("airflow", "the min_endpoints param", "--min")],
)
def test_a_preflight_message_names_the_setting_as_the_running_front_end_does(front_end, says, never):
    """The preflight the Airflow task runs names the form param and the connection's extra; the command line's
    names the flags: the same code, told its front end by RunConfig.front_end."""
    import asyncio
    import socket

    from eagle_datagen.errors import ConfigError
    from eagle_datagen.inference.preflight import judge_endpoints
    from eagle_datagen.profile import load_profile

    with socket.socket() as closed:  # a port nothing listens on: the endpoint is left out at once
        closed.bind(("127.0.0.1", 0))
        urls = [f"http://127.0.0.1:{closed.getsockname()[1]}", f"http://127.0.0.1:{closed.getsockname()[1]}/"]
    for given, flag, extra in ((urls, says, never), (urls[:1], "--sglang-url", "extra 'urls'")):
        with pytest.raises(ConfigError) as failed:
            asyncio.run(
                judge_endpoints(given, load_profile("qwen3"), "m", None, wait_s=0, min_endpoints=1, front_end=front_end)
            )
        message = str(failed.value)
        if len(given) == 2:
            assert says in message and never not in message, message
        elif front_end == "cli":
            assert flag in message and extra not in message, message
        else:
            assert extra in message and flag not in message, message


def recipe_with(key: str, value: object) -> dict:
    """A bare recipe (as YAML would give it) that sets the recipe key `key` (settings.py's dotted names)."""
    raw: dict = {"categories": {"x": {"sources": [{"path": "x.jsonl"}]}}}
    head, _, rest = key.partition(".")
    if head == "category":
        raw["categories"]["x"][rest] = value
    elif head == "source":
        raw["categories"]["x"]["sources"][0][rest] = value
    else:
        node = raw
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return raw


BOUNDED = [s for s in RUN_SETTINGS if s.bounds]


@pytest.mark.parametrize("entry", BOUNDED, ids=[s.name for s in BOUNDED])
def test_a_settings_range_is_declared_once_and_every_front_end_checks_it(entry):
    """Generated from the table, one test per bounded setting: the flag, the form param's schema and the recipe
    key accept the declared range's ends and refuse what lies just outside it."""
    from pydantic import ValidationError

    from eagle_datagen_airflow.form import category_params

    bounds = entry.bounds
    inside, outside = [], []
    if bounds.minimum is not None:
        (outside if bounds.above else inside).append(bounds.minimum)
        outside.append(bounds.minimum - 1)
        if bounds.above:
            inside.append(bounds.minimum + (bounds.maximum - bounds.minimum if bounds.maximum else 1) / 2)
    if bounds.maximum is not None:
        inside.append(bounds.maximum)
        outside.append(bounds.maximum + 1)
    integer = isinstance(entry.default, int) or (entry.flag and entry.flag.type in ("positive_int", "int"))
    shown = [int(v) if integer and float(v).is_integer() else v for v in inside + outside]
    inside, outside = shown[: len(inside)], shown[len(inside) :]
    if entry.cli:
        base = ["run", "--sglang-url", "u", "--output", "o", "--tokenizer", "t"]
        for value in inside:
            args = build_parser().parse_args([*base, f"{entry.cli}={value}"])
            assert getattr(args, settings.flag_dest(entry)) == value, (entry.cli, value)
        for value in outside:
            with pytest.raises(SystemExit):
                build_parser().parse_args([*base, f"{entry.cli}={value}"])
    if entry.form:
        bare = Recipe(categories={"x": {"sources": ["x.jsonl"]}})
        schema = category_params(bare, "x", "s3://eagle/datagen", 32000)[entry.form].schema
        assert {k: schema.get(k) for k in bounds.schema()} == bounds.schema()
    if entry.recipe:
        for value in inside:
            Recipe.model_validate(recipe_with(entry.recipe, value))
        for value in outside:
            with pytest.raises(ValidationError):
                Recipe.model_validate(recipe_with(entry.recipe, value))


def test_a_diagnosis_names_the_fix_as_the_running_front_end_does():
    """The run-level diagnosis (the answer screen during generate, finalize's check) is the same code for both
    front ends; its fix says the flag on the command line and the form param or connection extra in Airflow."""
    from eagle_datagen.validation.diagnosis import diagnose

    for reason, cli, airflow in (
        ("finish_length", "raise --max-new-tokens", "raise the max_new_tokens param"),
        ("finish_abort", "lower --concurrency, and rerun with the same --run-id", "clear the DAG run's failed"),
        ("prompt_suffix", "check --tokenizer and --profile", "check the SGLang connection's extra 'tokenizer'"),
        ("request_error", "fix --max-prompt-tokens", "fix the recipe's defaults.max_prompt_tokens"),
    ):
        [on_cli] = diagnose({reason: 100}, 100, front_end="cli")
        [in_airflow] = diagnose({reason: 100}, 100, front_end="airflow")
        assert cli in on_cli and "--" not in in_airflow and airflow in in_airflow, (on_cli, in_airflow)


def test_the_reject_rate_and_remote_code_refusals_name_the_setting_as_the_running_front_end_does():
    from types import SimpleNamespace

    from eagle_datagen.sources.collect import RejectRateExceeded, check_reject_rate
    from eagle_datagen.tokenization.remote_code import refuse_without_flag

    collected = SimpleNamespace(reject_rate=0.5, invalid=5, records_read=10)
    for front_end, says in (("cli", "raise --max-reject-rate"), ("airflow", "raise the recipe's max_reject_rate")):
        with pytest.raises(RejectRateExceeded, match=says):
            check_reject_rate(collected, 0.05, "rejects.jsonl", front_end)
    assert "pass --trust-remote-code" in str(refuse_without_flag("t", "m.C", "cli"))
    airflow = str(refuse_without_flag("t", "m.C", "airflow"))
    assert "the SGLang connection's extra 'trust_remote_code' to true" in airflow and "--" not in airflow


def test_a_changed_rerun_is_told_how_to_start_anew_in_the_running_front_ends_words():
    """A DAG run retried with other params, or a CLI rerun with other flags, meets the same refusal; the way out
    is a new --run-id on the command line and a new DAG run in Airflow (whose run id is the DAG run's)."""
    from eagle_datagen.errors import ConfigError
    from eagle_datagen.generation.plan import RunPlan, check_plan_matches
    from eagle_datagen.tokenization.provenance import check_same_tokenizer

    planned, wanted = RunPlan("r", "m1", "qwen3", {}, [], {}), RunPlan("r", "m2", "qwen3", {}, [], {})
    for front_end, says in (
        ("cli", "the same flags, or start a new --run-id"),
        ("airflow", "the same params, or trigger a new DAG run"),
    ):
        with pytest.raises(ConfigError, match=says):
            check_plan_matches(planned, wanted, front_end)
        with pytest.raises(ConfigError, match=says.split(", or ")[1]):
            check_same_tokenizer("r", {"chat_template_sha256": "a"}, {"chat_template_sha256": "b"}, "run", front_end)


def test_a_collision_and_an_empty_plan_name_the_way_out_as_the_running_front_end_does(tmp_path):
    """Messages an Airflow task can show: a run's commit that meets other content, and a plan with no prompt left."""
    from eagle_datagen.errors import DataGenError
    from eagle_datagen.generation.steps import plan_step
    from eagle_datagen.storage.objects import ObjectCollision, put_once
    from eagle_datagen.storage.output_root import LocalOutputRoot

    root = LocalOutputRoot(str(tmp_path / "out"))
    put_once(root, "data/x.parquet", b"one")
    with pytest.raises(ObjectCollision) as collided:
        put_once(root, "data/x.parquet", b"two")
    assert "--" not in str(collided.value)  # the store's own words name no front end's setting
    assert str(collided.value.for_run("cli")).endswith("or start a new --run-id")
    airflow = str(collided.value.for_run("airflow"))
    assert airflow.endswith("or trigger a new DAG run") and "--" not in airflow

    (tmp_path / "empty.jsonl").write_text("")
    server = {"url": "http://127.0.0.1:9", "model_path": "moonshotai/Kimi-K2.5", "weight_version": None}
    servers = [server | {"version": None, "max_running_requests": None}]
    for front_end, says in (("cli", "check the sources and --categories"), ("airflow", "the recipe's categories")):
        config = RunConfig(
            output=str(tmp_path / front_end),
            tokenizer="standin:kimi-k2.5",
            trust_remote_code=True,
            sglang_urls=[server["url"]],
            run_id="r",
            prompts=[str(tmp_path / "empty.jsonl")],
            front_end=front_end,
        )
        with pytest.raises(DataGenError, match="no prompts left to generate") as refused:
            plan_step(config.to_dict(), servers)
        assert str(refused.value).endswith(says) and (front_end == "cli" or "--" not in str(refused.value))
