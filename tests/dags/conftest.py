"""Airflow test setup: an isolated Airflow home and metadata DB, the DAG and plugin folders of the project.

Airflow reads its configuration when it is first imported, so the environment is set here, at import
time, before any test module imports it; the DB is reset once per session. Nothing here touches the
user's ~/airflow.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
PLUGINS = REPO / "plugins"

if "airflow" in sys.modules:  # pragma: no cover - the settings below would be ignored
    raise RuntimeError("airflow was imported before tests/dags/conftest.py could isolate it")

AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="eagle-datagen-airflow-"))
atexit.register(shutil.rmtree, AIRFLOW_HOME, ignore_errors=True)
os.environ.update(
    {
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}",
        # dag.test() re-serializes the DAG folder as the test's recipe shapes it; Airflow skips a DAG written less
        # than 30 s before, and the run would then use the previous test's version of the DAG (its assets)
        "AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL": "0",
    }
)
sys.path.insert(0, str(PLUGINS))  # Airflow does this for plugins/ too; tests import the glue directly


@pytest.fixture(scope="session", autouse=True)
def airflow_db():
    """A fresh metadata DB for the session, with the pool the generation tasks run in."""
    from airflow.models.pool import Pool
    from airflow.utils import db

    db.resetdb()
    Pool.create_or_update_pool("sglang", slots=2, description="shards generating at once", include_deferred=False)


@pytest.fixture
def assets_of_this_test():
    """Airflow activates one asset per name and per URI: an earlier test's recipe that gave this test's asset names to
    other URIs keeps this test's assets inactive, and a task whose outlet is inactive fails. A scheduler would
    orphan the earlier ones once no DAG references them (`_update_asset_orphanage`); none runs here, so the active
    assets are set aside while this test runs (its dag.test() activates its own) and put back after it."""
    from airflow.models.asset import AssetActive
    from airflow.utils.session import create_session
    from sqlalchemy import delete, select

    with create_session() as session:
        saved = [(row.name, row.uri) for row in session.scalars(select(AssetActive))]
        session.execute(delete(AssetActive))
    yield
    with create_session() as session:
        session.execute(delete(AssetActive))
        session.add_all(AssetActive(name=name, uri=uri) for name, uri in saved)
