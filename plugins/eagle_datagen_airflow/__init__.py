"""Airflow glue for eagle-datagen: what maps Airflow concepts onto the pipeline package.

The package (`include/eagle_datagen`) never imports Airflow; the DAG files in `dags/` stay configuration.
Everything in between lives here:

- `recipe`: a recipe's DAGs: their ids, connections, output root, pool and the assets they update;
- `recipe_set`: the recipes one Airflow runs side by side (`EAGLE_DATAGEN_RECIPE`), named and kept apart;
- `form`: the trigger form (typed params with titles, descriptions and JSON-schema validation);
- `deployment`: the SGLang connection (endpoint URLs, tokenizer) and the AWS connection (object store);
- `runs`: a DAG run's params and connection as the package's `RunConfig`, run ids, retry policy;
- `tasks`: the bodies of the category DAG's tasks;
- `release`: a release across categories (manifest and draft vocabulary over the whole release);
- `evaluation`: the evaluate DAG's task bodies (a drafter's acceptance per category, eagle_datagen/evaluation);
- `report_view`: the run's HTML report on the API server (the plugin `plugins/eagle_datagen_report.py`).

`plugins/.airflowignore` keeps Airflow's plugin loader from importing these files as loose modules.
"""
