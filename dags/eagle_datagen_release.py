"""
### eagle-datagen release: every category's published data, one manifest and draft vocabulary

Runs whenever a category DAG of its recipe publishes a run (any of the recipe's category assets). For each category
of the recipe it takes every published run under the output root for the newest run's model and weight version
(the nightly runs are incremental, so a category's data is the union of its runs), checks each data file
against its manifest, counts every sample once, and builds one draft vocabulary over the whole release.
It writes `releases/release=<id>.draft_vocab.safetensors` and then `releases/release=<id>.json`, and
updates the recipe's release asset, which a training DAG can be scheduled on. With `export_formats`,
`export_release` then writes the release in those trainers' formats under `exports/release=<id>/<format>/`, and
each training mix of `export_mixes` (the recipe's `mixes:`) under `exports/release=<id>/mix=<name>/<format>/`
(docs/internals/training.md). Several recipes side by side: one release DAG each, `eagle_datagen_release__<recipe>`.
"""

from __future__ import annotations

from datetime import UTC, datetime

from airflow.sdk import AssetAny, dag, task

from eagle_datagen_airflow import form, recipe, recipe_set, runs, tasks
from eagle_datagen_airflow.recipe import AirflowRecipe


def release_dag(of: AirflowRecipe) -> None:
    categories = list(of.recipe.categories)
    release_asset = of.release_asset

    @dag(
        dag_id=of.release_dag_id,
        schedule=AssetAny(*(of.category_asset(c) for c in categories)),
        start_date=datetime(2026, 1, 1, tzinfo=UTC),
        catchup=False,
        max_active_runs=1,
        default_args=runs.DEFAULT_ARGS,
        params=form.release_params(
            of.output, recipe.default_draft_vocab_size(), list(of.recipe.mixes), of.connections()
        ),
        tags=of.tags("release"),
        doc_md=__doc__,
    )
    def eagle_datagen_release() -> None:
        @task(outlets=[release_asset])
        def assemble_release(params=None, dag_run=None, outlet_events=None) -> dict:
            return tasks.assemble_release(categories, params, dag_run, outlet_events[release_asset])

        @task
        def export_release(release: dict, params=None) -> list[dict]:
            return tasks.export_release(release, params, of.recipe)

        export_release(assemble_release())

    eagle_datagen_release()


for _recipe in recipe_set.configured():
    release_dag(_recipe)
