"""Run by a clean Airflow venv's python (tests/deploy/test_airflow_versions.py), with AIRFLOW_HOME and the DAG and
plugin folders set in the environment: a fresh metadata DB and the `sglang` pool, the plugins loaded, every DAG
parsed, then one category DAG run with `dag.test()`. Prints one JSON line of what it found.

DAGs are found by their `category:` tag, not by id, so a change of DAG ids does not break it.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    import airflow
    from airflow import plugins_manager

    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow before 3.1: what shows an older version's import errors, not a probe of its own
        from airflow.models.dagbag import DagBag
    from airflow.models.pool import Pool
    from airflow.utils import db

    db.resetdb()
    Pool.create_or_update_pool("sglang", slots=2, description="shards generating at once", include_deferred=False)
    facts: dict = {"airflow": airflow.__version__}
    plugins_manager.ensure_plugins_loaded()
    facts["plugins"] = sorted(p["name"] for p in plugins_manager.get_plugin_info())
    errors = getattr(plugins_manager, "get_import_errors", None)  # before 3.2: a module-level dict
    facts["plugin_errors"] = errors() if errors else dict(plugins_manager.import_errors)
    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    facts["import_errors"] = {path: error[-3000:] for path, error in bag.import_errors.items()}
    facts["dags"] = {dag_id: sorted(dag.tags) for dag_id, dag in bag.dags.items()}
    categories = sorted(d for d, tags in facts["dags"].items() if any(t.startswith("category:") for t in tags))
    if categories and not facts["import_errors"]:
        run = bag.get_dag(categories[0]).test(run_conf=json.loads(sys.argv[1]))
        facts["run"] = {
            "dag_id": categories[0],
            "state": str(getattr(run.state, "value", run.state)),
            "tasks": {f"{ti.task_id}[{ti.map_index}]": str(ti.state) for ti in run.get_task_instances()},
        }
    print("PROBE " + json.dumps(facts))


if __name__ == "__main__":
    main()
