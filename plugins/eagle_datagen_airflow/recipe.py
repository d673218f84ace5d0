"""The recipe the DAGs are generated from, and the assets they update.

Read at parse time: a small local YAML file, to know the categories and their sampling defaults.
The recipe comes from `EAGLE_DATAGEN_RECIPE` (default: the project's demo recipe), the deployment's
output root from `EAGLE_DATAGEN_OUTPUT` (default `s3://eagle/datagen`; a trigger may override it).

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
ASSET_GROUP = "eagle-datagen"


def recipe_path() -> str:
    return os.environ.get("EAGLE_DATAGEN_RECIPE") or str(DEFAULT_RECIPE)


def default_output() -> str:
    return os.environ.get("EAGLE_DATAGEN_OUTPUT") or DEFAULT_OUTPUT


def load() -> Recipe:
    return load_recipe(recipe_path())


def category_dag_id(category: str) -> str:
    return f"eagle_datagen__{category}"


def category_asset(recipe: Recipe, category: str) -> Asset:
    return Asset(name=f"eagle_datagen__{category}", uri=f"eagle-datagen://{recipe.name}/{category}", group=ASSET_GROUP)


def release_asset(recipe: Recipe) -> Asset:
    return Asset(name="eagle_datagen_release", uri=f"eagle-datagen://{recipe.name}/release", group=ASSET_GROUP)
