"""
### eagle-datagen release: every category's published data, one manifest and draft vocabulary

Runs whenever a category DAG publishes a run (any category asset). For each category of the recipe it
takes every published run under the output root for the newest run's model and weight version (the
nightly runs are incremental, so a category's data is the union of its runs), checks each data file
against its manifest, counts every sample once, and builds one draft vocabulary over the whole release.
It writes `releases/release=<id>.draft_vocab.safetensors` and then `releases/release=<id>.json`, and
updates the release asset, which a training DAG can be scheduled on. With `export_formats`, `export_release`
then writes the release in those trainers' formats under `exports/release=<id>/<format>/`, and each training mix
of `export_mixes` (the recipe's `mixes:`) under `exports/release=<id>/mix=<name>/<format>/` (docs/training.md).
"""

from __future__ import annotations

from datetime import UTC, datetime

from airflow.sdk import AssetAny, dag, task

from eagle_datagen_airflow import form, recipe, runs, tasks

RECIPE = recipe.load()
CATEGORIES = list(RECIPE.categories)
RELEASE = recipe.release_asset(RECIPE)


@dag(
    dag_id="eagle_datagen_release",
    schedule=AssetAny(*(recipe.category_asset(RECIPE, c) for c in CATEGORIES)),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    default_args=runs.DEFAULT_ARGS,
    params=form.release_params(recipe.default_output(), recipe.default_draft_vocab_size(), list(RECIPE.mixes)),
    tags=["eagle-datagen", "release"],
    doc_md=__doc__,
)
def eagle_datagen_release() -> None:
    @task(outlets=[RELEASE])
    def assemble_release(params=None, dag_run=None, outlet_events=None) -> dict:
        return tasks.assemble_release(CATEGORIES, params, dag_run, outlet_events[RELEASE])

    @task
    def export_release(release: dict, params=None) -> list[dict]:
        return tasks.export_release(release, params, RECIPE)

    export_release(assemble_release())


eagle_datagen_release()
