"""Airflow plugin: a "Report" tab on category DAG runs that shows the run's HTML report (plots, not logs), and on
evaluate DAG runs, the evaluation's report."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from eagle_datagen_airflow.report_view import app


class EagleDatagenReportPlugin(AirflowPlugin):
    name = "eagle_datagen_report"
    fastapi_apps = [{"app": app, "url_prefix": "/eagle-datagen", "name": "eagle-datagen reports"}]
    external_views = [
        {
            "name": "Report",
            "href": "eagle-datagen/report/{DAG_ID}/{RUN_ID}",  # relative: works behind a proxy prefix
            "destination": "dag_run",
            "url_route": "eagle-datagen-report",
            "category": "eagle-datagen",
        }
    ]
