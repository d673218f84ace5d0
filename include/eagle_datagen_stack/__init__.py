"""A whole eagle-datagen deployment on one machine, for `make demo`, `make airflow` and the system tests.

It starts real processes on 127.0.0.1, each in its own process group and stopped by that group: a
SeaweedFS S3 server, a stand-in SGLang server, and Airflow's own components (`api-server`, `scheduler`,
`dag-processor`, optionally Celery workers) over the project's `dags/` and `plugins/`. Like the pipeline
package it imports nothing from Airflow: it drives Airflow as an operator would, through its command line
and its REST API.

- `processes`: a component in its own process group with its log, waits, free ports;
- `airflow_env`: the environment that configures an Airflow deployment (home, DB, executor, connections);
- `api`: a small client of Airflow's REST API (token, trigger, runs, task instances);
- `stack`: `LocalStack`, everything above started in order and stopped in reverse;
- `demo` (`make demo`) and `ui` (`make airflow`).
"""
