"""
### eagle-datagen evaluate: a drafter's acceptance per category on a speculative SGLang deployment

Triggered from the UI with the endpoints to evaluate (`sglang_urls`: SGLang started with `--speculative-algorithm
EAGLE3 --speculative-draft-model-path ...`; empty: the `sglang_conn_id` connection's) and, optionally, a second
deployment (`compare_urls`) or an earlier evaluation (`baseline`) to compare with prompt for prompt. With
`EAGLE_DATAGEN_EVALUATE_AFTER_RELEASE` it also runs after every release of its recipe, with the form's defaults.
Several recipes side by side: one evaluate DAG each, `eagle_datagen_evaluate__<recipe>`.

`prepare` checks every endpoint (an endpoint without a drafter fails it at once, before any request) and chooses the
prompts: the held-out prompts of the output root's published runs, which no export holds; `measure` (mapped, one
task per category, in the recipe's pool) sends a category's requests to every deployment; `finish` computes accept
length and accept rate per category with 95% intervals and writes `evaluations/eval=<id>.json`, the per-request
records and the report, which this DAG run's Report tab shows. docs/internals/evaluation.md.
"""

from __future__ import annotations

from datetime import UTC, datetime

from airflow.sdk import dag, task

from eagle_datagen_airflow import evaluation, form, recipe, recipe_set, runs
from eagle_datagen_airflow.recipe import AirflowRecipe


def evaluate_dag(of: AirflowRecipe) -> None:
    @dag(
        dag_id=of.evaluate_dag_id,
        schedule=[of.release_asset] if recipe.evaluate_after_release() else None,
        start_date=datetime(2026, 1, 1, tzinfo=UTC),
        catchup=False,
        default_args=runs.DEFAULT_ARGS,
        params=form.evaluate_params(of.output, of.connections()),
        tags=of.tags("evaluate"),
        doc_md=__doc__,
    )
    def eagle_datagen_evaluate() -> None:
        @task
        def prepare(params=None, dag=None, dag_run=None) -> list[dict]:
            return evaluation.prepare(of.path, params, dag, dag_run)

        @task(pool=of.pool, map_index_template="{{ task.op_kwargs['work']['category'] }}")
        def measure(work: dict, params=None) -> dict:
            return evaluation.measure(work, params)

        @task
        def finish(works: list, params=None) -> dict:
            return evaluation.finish(works[0], params)

        works = prepare()
        measure.expand(work=works) >> finish(works)

    eagle_datagen_evaluate()


for _recipe in recipe_set.configured():
    evaluate_dag(_recipe)
