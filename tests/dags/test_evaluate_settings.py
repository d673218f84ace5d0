"""The evaluate command's settings are declared once (settings.EVALUATE_SETTINGS): its flags and its carrier are
built from the table, the settings it shares with `run` are the run's own declarations, every value reaches its
place in EvaluateOptions, and the flags the CPU loop's contract names (/work's EVAL-CONTRACT) exist as promised."""

from __future__ import annotations

import dataclasses
from operator import attrgetter

import pytest

from eagle_datagen import settings
from eagle_datagen.cli import build_parser
from eagle_datagen.evaluation.options import EvaluateConfig, EvaluateOptions

from .test_run_settings import option_leaves

# the command line the evaluation contract fixes (flags may be added, never renamed or dropped)
CONTRACT_FLAGS = {
    "--sglang-url": True,  # repeatable
    "--tokenizer": False,
    "--trust-remote-code": False,
    "--profile": False,
    "--output": False,
    "--run-id": True,
    "--prompts": True,
    "--categories": False,
    "--max-prompts-per-category": False,
    "--max-new-tokens": False,
    "--temperature": False,
    "--top-p": False,
    "--seed": False,
    "--label": False,
    "--compare-url": True,
    "--compare-label": False,
    "--baseline": False,
    "--to": False,
    "--eval-id": False,
    "--concurrency": False,
}


def evaluate_actions() -> dict[str, object]:
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    return {
        next(o for o in action.option_strings if o.startswith("--")): action
        for action in commands.choices["evaluate"]._actions
        if action.option_strings and action.dest != "help"
    }


def test_every_evaluate_flag_is_declared_and_the_contracts_flags_exist():
    actions = evaluate_actions()
    declared = {s.cli for s in settings.EVALUATE_SETTINGS if s.cli}
    assert set(actions) == declared
    for flag, repeated in CONTRACT_FLAGS.items():
        assert flag in actions, flag
        assert (actions[flag].__class__.__name__ == "_AppendAction") == repeated, flag
    assert {f for f, a in actions.items() if a.required} == {"--sglang-url", "--tokenizer"}


def test_shared_settings_are_the_runs_own_declarations():
    for entry in settings.EVALUATE_SETTINGS:
        try:
            run = next(s for s in settings.RUN_SETTINGS if s.name == entry.name)
        except StopIteration:
            assert entry in settings.EVALUATE_OWN, f"{entry.name}: neither the run's nor evaluate's own"
            continue
        for name in ("default", "why", "cli", "config", "bounds", "recipe"):
            assert getattr(entry, name) == getattr(run, name), f"{entry.name}.{name}"
        if run.flag is not None:
            assert (entry.flag.type, entry.flag.metavar, entry.flag.repeat) == (
                run.flag.type,
                run.flag.metavar,
                run.flag.repeat,
            ), entry.name


def test_evaluate_config_fields_are_the_declared_settings_and_each_reaches_its_option():
    fields = {f.name for f in dataclasses.fields(EvaluateConfig)}
    assert fields == {s.config for s in settings.EVALUATE_SETTINGS if s.config}
    leaves = option_leaves(EvaluateOptions)
    values = {}
    for i, entry in enumerate(s for s in settings.EVALUATE_SETTINGS if s.config):
        assert set(settings.option_paths(entry)) <= leaves, entry.name
        default = entry.default
        values[entry.config] = (
            [f"v{i}"]
            if isinstance(default, list)
            else not default
            if isinstance(default, bool)
            else f"v{i}"
            if isinstance(default, str) or default is None and entry.name in ("label", "eval_id", "to", "model")
            else 1000 + i
        )
    values |= {"eval_id": "e1", "compare_urls": [], "front_end": "cli"}
    options = EvaluateConfig(**values).options()
    for entry in settings.EVALUATE_SETTINGS:
        for path in settings.option_paths(entry):
            assert attrgetter(path)(options) == values[entry.config], f"{entry.name} -> {path}"


def test_flags_parse_into_the_carrier_by_the_declaration():
    from eagle_datagen.cli.evaluate import evaluate_config

    args = build_parser().parse_args(
        ["evaluate", "--sglang-url", "http://a:1", "--sglang-url", "http://a:2", "--tokenizer", "t", "--output", "/o"]
        + ["--compare-url", "http://b:1", "--seed", "7", "--temperature", "0", "--max-prompts-per-category", "50"]
    )
    options = evaluate_config(args).options()
    assert options.sglang_urls == ["http://a:1", "http://a:2"] and options.compare_urls == ["http://b:1"]
    assert (options.seed, options.sampling.temperature, options.max_prompts_per_category) == (7, 0.0, 50)
    assert options.sampling.top_p is None  # unset: the recipe's, the profile's, then the default decide
    assert options.prompts.output == "/o" and options.prompts.tokenizer == "t"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["evaluate", "--sglang-url", "u", "--tokenizer", "t", "--requests-per-prompt", "0"])


def test_compare_url_and_baseline_exclude_each_other():
    from eagle_datagen.errors import ConfigError

    with pytest.raises(ConfigError, match="--compare-url or --baseline, not both"):
        EvaluateConfig(tokenizer="t", sglang_urls=["u"], compare_urls=["v"], baseline="b.json")
