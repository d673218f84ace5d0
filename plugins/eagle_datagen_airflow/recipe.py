"""A recipe's DAGs in Airflow: the names, connections, output root and pool they use, and the assets they update.

Read at parse time: small local YAML files, to know the categories and their sampling defaults. Which recipes an
Airflow runs is `EAGLE_DATAGEN_RECIPE` (recipe_set.py: one file, a folder of them, or several, comma-separated;
default the project's demo recipe). The deployment's output root comes from `EAGLE_DATAGEN_OUTPUT` (default
`s3://eagle/datagen`; a recipe's `airflow.output` and a trigger may override it), the category DAGs' schedule from
`EAGLE_DATAGEN_SCHEDULE` (default the nightly `0 3 * * *`; `none` for deployments that only trigger and backfill by
hand, such as the demo) and the default draft-vocabulary size of the forms from `EAGLE_DATAGEN_DRAFT_VOCAB_SIZE`
(default 32000, EAGLE-3's usual size); whether the evaluate DAG also runs after each release from
`EAGLE_DATAGEN_EVALUATE_AFTER_RELEASE`.

A recipe's Airflow name (`airflow.name`) is in its DAG ids and asset names: `eagle_datagen__<name>__<category>`,
`eagle_datagen_release__<name>`, `eagle_datagen_evaluate__<name>`. An empty name keeps the ids of a single recipe,
`eagle_datagen__<category>`, `eagle_datagen_release` and `eagle_datagen_evaluate`, so a deployment of one recipe
keeps its DAGs, their history and their schedules. Asset URIs are named by data product,
`eagle-datagen://<recipe>/<category>` and `eagle-datagen://<recipe>/release`, not by storage location: the output
root is a per-run param, so each asset event carries the root, run and manifest it refers to in its `extra`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from airflow.sdk import Asset

from eagle_datagen.sources.recipe import Recipe

PROJECT = Path(__file__).resolve().parents[2]
DEFAULT_RECIPE = PROJECT / "include" / "recipes" / "demo.yaml"
DEFAULT_OUTPUT = "s3://eagle/datagen"
DEFAULT_POOL = "sglang"
NIGHTLY = "0 3 * * *"
DEFAULT_DRAFT_VOCAB_SIZE = 32000
ASSET_GROUP = "eagle-datagen"
CATEGORY_DAG_PREFIX = "eagle_datagen__"
RELEASE_DAG_ID = "eagle_datagen_release"
EVALUATE_DAG_ID = "eagle_datagen_evaluate"


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


@dataclass(frozen=True)
class AirflowRecipe:
    """One recipe as its DAGs use it: the file (the tasks read it again), the parsed recipe, and what its `airflow:`
    block says or recipe_set.py derived: the name in the ids ("" for today's), the forms' default connections and
    output root, and the pool of its SGLang tasks."""

    path: str
    recipe: Recipe
    name: str
    output: str
    sglang_conn_id: str
    aws_conn_id: str
    pool: str

    def _suffixed(self, dag_id: str) -> str:
        return f"{dag_id}__{self.name}" if self.name else dag_id

    def category_dag_id(self, category: str) -> str:
        return f"{CATEGORY_DAG_PREFIX}{self.name}__{category}" if self.name else f"{CATEGORY_DAG_PREFIX}{category}"

    @property
    def release_dag_id(self) -> str:
        return self._suffixed(RELEASE_DAG_ID)

    @property
    def evaluate_dag_id(self) -> str:
        return self._suffixed(EVALUATE_DAG_ID)

    def dag_ids(self) -> list[str]:
        return [*(self.category_dag_id(c) for c in self.recipe.categories), self.release_dag_id, self.evaluate_dag_id]

    def category_asset(self, category: str) -> Asset:
        """Named as the DAG that updates it: Airflow keeps one asset per name."""
        uri = f"eagle-datagen://{self.recipe.name}/{category}"
        return Asset(name=self.category_dag_id(category), uri=uri, group=ASSET_GROUP)

    @property
    def release_asset(self) -> Asset:
        return Asset(name=self.release_dag_id, uri=f"eagle-datagen://{self.recipe.name}/release", group=ASSET_GROUP)

    def tags(self, *more: str) -> list[str]:
        """The UI's filters: every DAG of the project, this recipe's, and what the DAG is."""
        return ["eagle-datagen", f"recipe:{self.recipe.name}", *more]

    def connections(self) -> dict[str, str]:
        """The forms' default connection ids."""
        return {"sglang_conn_id": self.sglang_conn_id, "aws_conn_id": self.aws_conn_id}
