"""The run's HTML report in the Airflow UI: a FastAPI app on the API server, shown as a tab of a category
DAG run (an external view with destination `dag_run`), and of an evaluate DAG run (its evaluation's report).

`GET /eagle-datagen/report/{dag_id}/{run_id}` finds the recipe whose DAG it is (recipe_set.py), the DAG run's
output root (its conf, else the recipe's default) and pipeline run id, reads the run's manifest and serves the
report it lists, after checking its sha256. Access needs the same right as reading the DAG's runs. The object
store is reached through the run's AWS connection with the Amazon provider's own client (no process environment
is touched on the API server).
"""

from __future__ import annotations

from pathlib import Path

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import requires_access_dag
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import HTMLResponse

can_read_runs = requires_access_dag(method="GET", access_entity=DagAccessEntity.RUN)
app = FastAPI(title="eagle-datagen reports", description="HTML reports of published eagle-datagen runs")


def _read(output: str, aws_conn_id: str, key: str) -> bytes | None:
    from eagle_datagen.objectstore.s3 import S3Uri, is_s3_uri

    if not is_s3_uri(output):
        path = Path(output) / key
        return path.read_bytes() if path.is_file() else None
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook
    from botocore.exceptions import ClientError

    location = S3Uri.parse(f"{output.rstrip('/')}/{key}")
    try:
        answer = S3Hook(aws_conn_id=aws_conn_id).get_conn().get_object(Bucket=location.bucket, Key=location.key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return None
        raise
    return answer["Body"].read()


def _dag_run_conf(dag_id: str, run_id: str) -> dict:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        if run is None:
            raise HTTPException(404, f"no run {run_id!r} of {dag_id!r}")
        return dict(run.conf or {})


@app.get("/report/{dag_id}/{run_id}", response_class=HTMLResponse, dependencies=[Depends(can_read_runs)])
def report(dag_id: str, run_id: str) -> HTMLResponse:
    from eagle_datagen.errors import DataGenError
    from eagle_datagen.storage.manifest import manifest_key, parse_manifest
    from eagle_datagen.storage.objects import sha256_hex
    from eagle_datagen_airflow.recipe_set import owner_of
    from eagle_datagen_airflow.runs import run_id_for

    try:
        owner = owner_of(dag_id)
    except DataGenError as exc:  # EAGLE_DATAGEN_RECIPE as the DAG files' import errors show it
        raise HTTPException(409, str(exc)) from None
    if owner is None or (owner[1] is None and dag_id != owner[0].evaluate_dag_id):
        raise HTTPException(404, f"{dag_id!r} is neither an eagle-datagen category nor an evaluate DAG: no report")
    recipe, category = owner
    conf = _dag_run_conf(dag_id, run_id)
    output, aws_conn_id = conf.get("output") or recipe.output, conf.get("aws_conn_id") or recipe.aws_conn_id
    if category is None:
        return _evaluation_report(output, aws_conn_id, run_id)
    pipeline_run = run_id_for(category, run_id)
    raw = _read(output, aws_conn_id, manifest_key(pipeline_run))
    if raw is None:
        raise HTTPException(
            404, f"run {pipeline_run} has published nothing under {output} (still running, a dry run, or nothing new)"
        )
    try:
        manifest = parse_manifest(raw, f"{output.rstrip('/')}/{manifest_key(pipeline_run)}", pipeline_run)
    except DataGenError as exc:
        raise HTTPException(409, str(exc)) from None
    reports = [f for f in manifest["files"] if f["kind"] == "report"]
    if not reports:
        raise HTTPException(404, f"run {pipeline_run} has no report in its manifest")
    entry = reports[0]
    page = _read(output, aws_conn_id, entry["key"])
    if page is None or sha256_hex(page) != entry["sha256"]:
        raise HTTPException(409, f"{entry['key']} under {output} is missing or differs from the run's manifest")
    return HTMLResponse(page)


def _evaluation_report(output: str, aws_conn_id: str, dag_run_id: str) -> HTMLResponse:
    """The evaluate DAG run's report: the one its evaluation's JSON lists, after checking its sha256."""
    import json

    from eagle_datagen.evaluation.place import EVALUATIONS, evaluation_key
    from eagle_datagen.storage.objects import sha256_hex
    from eagle_datagen_airflow.evaluation import eval_id_for

    key = evaluation_key(eval_id_for(dag_run_id))
    raw = _read(output, aws_conn_id, key)
    if raw is None:
        raise HTTPException(404, f"no evaluation at {output.rstrip('/')}/{key} (still running, or it failed before)")
    try:
        entry = json.loads(raw)["report"]
        report_key = f"{EVALUATIONS}/{entry['key']}"
    except (ValueError, KeyError, TypeError):
        raise HTTPException(409, f"{key} under {output} is not an evaluation's results") from None
    page = _read(output, aws_conn_id, report_key)
    if page is None or sha256_hex(page) != entry["sha256"]:
        raise HTTPException(409, f"{report_key} under {output} is missing or differs from the evaluation's results")
    return HTMLResponse(page)
