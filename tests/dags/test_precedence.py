"""The one precedence (settings.PRECEDENCE: flag or form > recipe category > recipe defaults > model profile >
built-in default), the same for every front end. The case that broke it: `--profile qwen3` with a recipe that
sets no temperature sampled at 1.0 (the recipe model's own default), while profiles/qwen3.yaml recommends 0.6;
the Airflow form showed and used 1.0 too."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from eagle_datagen import settings
from eagle_datagen.cli import build_parser
from eagle_datagen.cli.run import run_config
from eagle_datagen.generation.stage import category_settings
from eagle_datagen.generation.steps import RunConfig
from eagle_datagen.profile import load_profile
from eagle_datagen.sources.recipe import load_recipe

RECIPE = """\
version: 1
name: qwen
defaults:
  sampling: {max_new_tokens: 512}
categories:
  chat: {sources: [chat.jsonl]}
  math:
    sources: [math.jsonl]
    sampling: {top_p: 0.8}
"""


@pytest.fixture
def recipe(tmp_path) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE)
    return path


def planned_sampling(config: RunConfig) -> dict[str, dict]:
    """The sampling a run with this configuration plans per category (what the plan step computes)."""
    options = config.options()
    recipe = load_recipe(options.prompts.recipe)
    profile = load_profile(options.prompts.profile)
    chosen = category_settings(sorted(recipe.categories), recipe, profile, options.sampling)
    return {c: s.sampling for c, s in chosen.items()}


def cli_config(recipe: Path, *flags: str) -> RunConfig:
    args = build_parser().parse_args(
        ["run", "--recipe", str(recipe), "--tokenizer", "standin:kimi-k2.5", "--sglang-url", "http://127.0.0.1:1"]
        + ["--output", "/tmp/x", "--run-id", "r", *flags]
    )
    return run_config(args)


def airflow_config(recipe: Path, category: str, profile: str, **conf) -> RunConfig:
    from eagle_datagen_airflow.deployment import Deployment
    from eagle_datagen_airflow.form import category_params
    from eagle_datagen_airflow.runs import run_config as dag_run_config

    params = {name: p.value for name, p in category_params(load_recipe(recipe), category, "/tmp/x", 32000).items()}
    params |= conf
    deployment = Deployment(urls=["http://127.0.0.1:1"], tokenizer="standin:kimi-k2.5", profile=profile)
    return RunConfig.from_dict(dag_run_config(category, str(recipe), "r", params, deployment))


def test_qwen3_profile_sampling_applies_under_a_recipe_that_sets_none(recipe):
    sampling = planned_sampling(cli_config(recipe, "--profile", "qwen3"))
    assert sampling["chat"] == {"max_new_tokens": 512, "temperature": 0.6, "top_p": 0.95}
    assert sampling["math"] == {"max_new_tokens": 512, "temperature": 0.6, "top_p": 0.8}  # the category's wins


def test_the_airflow_form_plans_the_same_sampling_as_the_command_line(recipe):
    for category in ("chat", "math"):
        dag = planned_sampling(airflow_config(recipe, category, "qwen3"))[category]
        assert dag == planned_sampling(cli_config(recipe, "--profile", "qwen3"))[category]
    assert planned_sampling(airflow_config(recipe, "chat", "qwen3"))["chat"]["temperature"] == 0.6


def test_a_flag_or_form_value_wins_over_every_layer(recipe):
    cli = planned_sampling(cli_config(recipe, "--profile", "qwen3", "--temperature", "0.3", "--top-p", "0.5"))
    dag = planned_sampling(airflow_config(recipe, "math", "qwen3", temperature=0.3, top_p=0.5))
    assert cli["math"]["temperature"] == dag["math"]["temperature"] == 0.3
    assert cli["math"]["top_p"] == dag["math"]["top_p"] == 0.5


def test_without_a_recipe_value_or_profile_recommendation_the_built_in_default_applies(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text("version: 1\ncategories:\n  chat: {sources: [chat.jsonl]}\n")
    profile = tmp_path / "bare.yaml"
    qwen3 = resources.files("eagle_datagen.profiles").joinpath("qwen3.yaml").read_text()
    profile.write_text(qwen3.replace("sampling: {temperature: 0.6, top_p: 0.95}", "").replace("qwen3", "bare"))
    sampling = planned_sampling(cli_config(path, "--profile", str(profile)))["chat"]
    assert sampling == {name: settings.default_of(name) for name in ("max_new_tokens", "temperature", "top_p")}
    assert "top_k" not in sampling and "min_p" not in sampling  # off by default: not sent
