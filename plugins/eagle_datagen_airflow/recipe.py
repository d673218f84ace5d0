"""The recipe the DAGs are generated from, and the assets they update.

Read at parse time: a small local YAML file, to know the categories and their sampling defaults.
The recipe comes from `EAGLE_DATAGEN_RECIPE` (default: the project's demo recipe), the deployment's
output root from `EAGLE_DATAGEN_OUTPUT` (default `s3://eagle/datagen`; a trigger may override it), the
category DAGs' schedule from `EAGLE_DATAGEN_SCHEDULE` (default the nightly `0 3 * * *`; `none` for
deployments that only trigger and backfill by hand, such as the demo) and the default draft-vocabulary
size of the forms from `EAGLE_DATAGEN_DRAFT_VOCAB_SIZE` (default 32000, EAGLE-3's usual size); whether the evaluate
DAG also runs after each release from `EAGLE_DATAGEN_EVALUATE_AFTER_RELEASE`.

Assets are named by data product, `eagle-datagen://<recipe>/<category>` and `eagle-datagen://<recipe>/release`,
not by storage location: the output root is a per-run param, so each asset event carries the root, run
and manifest it refers to in its `extra`.
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow.sdk import Asset

from eagle_datagen.sources.recipe import Recipe, load_recipe

PROJECT = Path(__file__).resolve().parents[2]
DEFAULT_RECIPE = PROJECT / "include" / "recipes" / "demo.yaml"
DEFAULT_OUTPUT = "s3://eagle/datagen"
NIGHTLY = "0 3 * * *"
DEFAULT_DRAFT_VOCAB_SIZE = 32000
ASSET_GROUP = "eagle-datagen"


def recipe_path() -> str:
    return os.environ.get("EAGLE_DATAGEN_RECIPE") or str(DEFAULT_RECIPE)


def default_output() -> str:
    return os.environ.get("EAGLE_DATAGEN_OUTPUT") or DEFAULT_OUTPUT


def schedule() -> str | None:
    value = os.environ.get("EAGLE_DATAGEN_SCHEDULE", "").strip()
    if value.lower() in ("none", "off", "manual"):
        return None
    return value or NIGHTLY


def evaluate_after_release() -> bool:
    """Whether the evaluate DAG runs after every release (`EAGLE_DATAGEN_EVALUATE_AFTER_RELEASE`, default off: it is
    triggered from the UI), with its form's defaults: the SGLang connection's endpoints (point `sglang_conn_id`'s
    default at the speculative deployment) and the release's output root."""
    return os.environ.get("EAGLE_DATAGEN_EVALUATE_AFTER_RELEASE", "").strip().lower() in ("1", "true", "yes", "on")


def default_draft_vocab_size() -> int:
    value = os.environ.get("EAGLE_DATAGEN_DRAFT_VOCAB_SIZE", "").strip()
    if not value:
        return DEFAULT_DRAFT_VOCAB_SIZE
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"EAGLE_DATAGEN_DRAFT_VOCAB_SIZE={value!r} is not a positive integer (unset it for 32000)")
    return int(value)


def load() -> Recipe:
    return load_recipe(recipe_path())


def category_dag_id(category: str) -> str:
    return f"eagle_datagen__{category}"


def category_asset(recipe: Recipe, category: str) -> Asset:
    return Asset(name=f"eagle_datagen__{category}", uri=f"eagle-datagen://{recipe.name}/{category}", group=ASSET_GROUP)


def release_asset(recipe: Recipe) -> Asset:
    return Asset(name="eagle_datagen_release", uri=f"eagle-datagen://{recipe.name}/release", group=ASSET_GROUP)
