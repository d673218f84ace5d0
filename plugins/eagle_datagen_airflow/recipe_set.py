"""The recipes one Airflow runs, side by side: which files, the names each recipe's DAGs get, and the checks that
keep them apart.

`EAGLE_DATAGEN_RECIPE` names a recipe file, a folder (its `*.yaml` and `*.yml` files), or several of either,
separated by commas. A recipe's `airflow:` block (sources/recipe.py's AirflowSpec) may set its name in the DAG ids,
its connections, output root and pool; what it leaves unset is derived:

- one recipe: today's names (`eagle_datagen__<category>`), `sglang_default`, `EAGLE_DATAGEN_OUTPUT`, pool `sglang`;
- several: from the recipe's name (`kimi-k2.5` -> `kimi_k2_5`): `eagle_datagen__kimi_k2_5__<category>`, connection
  `sglang_kimi_k2_5`, output root `EAGLE_DATAGEN_OUTPUT/kimi_k2_5`, pool `sglang_kimi_k2_5`.

The AWS connection stays `aws_default` (one object store, other roots). Recipes that would share a name, a DAG id,
or an output root (or one root inside another) are refused at parse time, in one line that says what to change:
their runs would otherwise read and publish each other's data.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from eagle_datagen import settings
from eagle_datagen.errors import ConfigError
from eagle_datagen.sources.recipe import Recipe, load_recipe
from eagle_datagen_airflow.recipe import DEFAULT_POOL, DEFAULT_RECIPE, AirflowRecipe, default_output

VARIABLE = "EAGLE_DATAGEN_RECIPE"
RECIPE_SUFFIXES = (".yaml", ".yml")


def recipe_files() -> list[Path]:
    """The recipe files `EAGLE_DATAGEN_RECIPE` names, in its order (a folder's sorted by name)."""
    entries = [e.strip() for e in os.environ.get(VARIABLE, "").split(",") if e.strip()]
    files: list[Path] = []
    for entry in entries or [str(DEFAULT_RECIPE)]:
        path = Path(entry)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in RECIPE_SUFFIXES and p.is_file())
            if not found:
                raise ConfigError(f"{VARIABLE} names the folder {path}, which holds no *.yaml recipe: add one")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise ConfigError(f"{VARIABLE} names {entry}, which is neither a recipe file nor a folder: fix the path")
    return files


def airflow_name(recipe: Recipe) -> str:
    """The recipe's name as Airflow ids and environment variables take it: lower case, `_` for anything else."""
    return re.sub(r"[^a-z0-9_]", "_", recipe.name.lower())


def resolve(path: Path, recipe: Recipe, several: bool) -> AirflowRecipe:
    """The recipe's DAG names, connections, output root and pool: its `airflow:` block, else derived."""
    spec = recipe.airflow
    name = spec.name if spec.name is not None else (airflow_name(recipe) if several else "")
    base = default_output()
    return AirflowRecipe(
        path=str(path),
        recipe=recipe,
        name=name,
        output=spec.output or (f"{base.rstrip('/')}/{name}" if name else base),
        sglang_conn_id=spec.sglang_conn_id or (f"sglang_{name}" if name else settings.default_of("sglang_conn_id")),
        aws_conn_id=spec.aws_conn_id or settings.default_of("aws_conn_id"),
        pool=spec.pool or (f"{DEFAULT_POOL}_{name}" if name else DEFAULT_POOL),
    )


def configured() -> list[AirflowRecipe]:
    """Every recipe this Airflow runs, with its names; ConfigError (one line, with the fix) when two collide."""
    files = recipe_files()
    recipes = [resolve(path, load_recipe(path), len(files) > 1) for path in files]
    check_apart(recipes)
    return recipes


def _root(output: str) -> str:
    return output.rstrip("/") if output.startswith("s3://") else os.path.normpath(output)


def check_apart(recipes: list[AirflowRecipe]) -> None:
    """Two recipes may share a server, a pool or a connection, but not a file, a name, a DAG id or an output root."""
    for i, a in enumerate(recipes):
        for b in recipes[i + 1 :]:
            both = f"recipes {a.path} and {b.path}"
            if Path(a.path).resolve() == Path(b.path).resolve():
                raise ConfigError(f"{VARIABLE} names the recipe {a.path} twice: name it once")
            if a.recipe.name == b.recipe.name:
                raise ConfigError(
                    f"{both} are both named {a.recipe.name!r}: change the name: of one of them (asset URIs carry it)"
                )
            if a.name == b.name:
                named = f"name their DAGs {a.name!r}" if a.name else 'keep the DAG ids of a single recipe (name: "")'
                raise ConfigError(f"{both} both {named}: set airflow.name in one of them to another name")
            shared = sorted(set(a.dag_ids()) & set(b.dag_ids()))
            if shared:
                raise ConfigError(f"{both} both make the DAG {shared[0]}: set airflow.name in one of them to another")
            ra, rb = _root(a.output), _root(b.output)
            if ra == rb or rb.startswith(ra + "/") or ra.startswith(rb + "/"):
                raise ConfigError(
                    f"{both} write to the output roots {a.output} and {b.output}, one the same as or inside the "
                    "other: give each its own root (airflow.output), or their runs and releases would mix"
                )


def owner_of(dag_id: str) -> tuple[AirflowRecipe, str | None] | None:
    """The configured recipe whose DAG `dag_id` is, with the category of a category DAG (None for its release and
    evaluate DAGs); None when no configured recipe makes it."""
    for recipe in configured():
        for category in recipe.recipe.categories:
            if recipe.category_dag_id(category) == dag_id:
                return recipe, category
        if dag_id in (recipe.release_dag_id, recipe.evaluate_dag_id):
            return recipe, None
    return None
