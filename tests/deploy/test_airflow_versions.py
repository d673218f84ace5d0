"""The package in a user's existing Airflow, at both ends of the supported range (docs/install.md).

For the lowest supported Airflow (the `airflow` extra's floor in pyproject.toml) and the highest (requirements.txt's
pin), a clean venv gets that Airflow from the registry and then the project's wheel with its `airflow` extra, as a
user would install it (tests/deploy/airflow_venvs.py; the venvs are cached under .cache/airflow-venvs/). The lowest
end installs without the project's constraints, as a user's environment would; the highest with them, as the image
does. Then, from a temporary AIRFLOW_HOME holding copies of dags/ and plugins/: the plugins load, every DAG parses,
and one category DAG runs with `dag.test()` against the stand-in server (`eagle-datagen serve-sim`) into a local
output root, whose manifest and shards must be there. Last, the retry rules: a task whose package step raises a
terminal error fails on its first try (Airflow 3.3's retry policy, or compat.py's AirflowFailException before it),
and one that opts out of them is retried.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from airflow_venvs import airflow_venv, build_wheel, overlay, supported_range
from installed_standin import installed_serve_sim

from conftest import REPO

PROBE = Path(__file__).with_name("airflow_probe.py")
RETRY_RULES_DAG = Path(__file__).with_name("retry_rules_dag.py")
DEMO_MATH = REPO / "include" / "data" / "demo_prompts" / "math.jsonl"
RUN_CONF = {"shard_size": 2, "samples_per_prompt": 1, "draft_vocab_size": 16}
LOWEST, HIGHEST = supported_range()


def test_supported_range_is_airflow_3_and_documented():
    """The range CI proves is the range docs/install.md states."""
    assert LOWEST.startswith("3.") and HIGHEST.startswith("3."), (LOWEST, HIGHEST)
    assert tuple(map(int, LOWEST.split("."))) <= tuple(map(int, HIGHEST.split(".")))
    install = (REPO / "docs" / "install.md").read_text()
    assert f"Airflow {LOWEST} to {HIGHEST}" in install, "docs/install.md must state the supported range"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def clean_env(**extra: str) -> dict[str, str]:
    """The test process's environment without anything of this checkout's Airflow or Python setup."""
    dropped = ("PYTHONPATH", "VIRTUAL_ENV", "EAGLE_DATAGEN_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", *dropped))}
    return env | {"HF_HUB_OFFLINE": "1"} | extra


def airflow_home(folder: Path) -> tuple[Path, Path]:
    """AIRFLOW_HOME with copies of dags/ and plugins/, and a one-category recipe of a few demo prompts."""
    home = folder / "airflow"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "dags", home / "dags", ignore=ignore)
    shutil.copytree(REPO / "plugins", home / "plugins", ignore=ignore)
    shutil.copy2(RETRY_RULES_DAG, home / "dags" / RETRY_RULES_DAG.name)
    lines = DEMO_MATH.read_text(encoding="utf-8").splitlines()[:4]
    (folder / "math.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    recipe = folder / "recipe.yaml"
    recipe.write_text(
        "version: 1\nname: versions\nseed: 7\ncategories:\n"
        "  math:\n    sources: [math.jsonl]\n    sampling: {max_new_tokens: 128}\n",
        encoding="utf-8",
    )
    return home, recipe


@pytest.mark.slow
@pytest.mark.timeout(1500)  # an uncached venv build: 1-2 minutes from pip's cache, more from the registry
@pytest.mark.parametrize("end", ["lowest", "highest"])
def test_wheel_runs_in_a_clean_airflow(end, wheel, tmp_path):
    version = LOWEST if end == "lowest" else HIGHEST
    venv, build = airflow_venv(version, wheel, constrained=end == "highest")
    python = venv / "bin" / "python"
    # the wheel goes into Airflow's environment without replacing Airflow, and leaves it consistent; what pip did
    # change of Airflow's environment (python-dateutil 4 down to 2.9 for botocore, on 2026-12-07) is printed
    print(f"Airflow {version}: installing the wheel changed {build['changed']}, added {len(build['added'])} packages")
    assert not [name for name in build["changed"] if name.startswith("apache-airflow")], build["changed"]
    check = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True, env=clean_env())
    assert check.returncode == 0, check.stdout
    site = overlay(wheel, tmp_path / "site", venv)
    home, recipe = airflow_home(tmp_path)
    env = clean_env(
        PYTHONPATH=str(site),
        EAGLE_DATAGEN_CACHE=str(tmp_path / "cache"),
        EAGLE_DATAGEN_RECIPE=str(recipe),
        EAGLE_DATAGEN_SCHEDULE="none",
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__UNIT_TEST_MODE="True",
        AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
        AIRFLOW__CORE__PLUGINS_FOLDER=str(home / "plugins"),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
    )
    with installed_serve_sim([str(python), "-m", "eagle_datagen.cli"], tmp_path, env) as url:
        host, port = url.removeprefix("http://").split(":")
        sglang = {"conn_type": "http", "host": host, "port": int(port)}
        sglang["extra"] = {"tokenizer": "standin:kimi-k2.5", "trust_remote_code": True}
        env["AIRFLOW_CONN_SGLANG_DEFAULT"] = json.dumps(sglang)
        output = tmp_path / "out"
        conf = json.dumps(RUN_CONF | {"output": str(output)})
        result = subprocess.run(
            [str(python), str(PROBE), conf], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600
        )
    lines = [line for line in result.stdout.splitlines() if line.startswith("PROBE ")]
    assert result.returncode == 0 and lines, result.stderr[-4000:]
    facts = json.loads(lines[-1].removeprefix("PROBE "))
    assert facts["airflow"] == version
    assert "eagle_datagen_report" in facts["plugins"] and facts["plugin_errors"] == {}, facts
    assert facts["import_errors"] == {}, facts["import_errors"]
    assert any("category:math" in tags for tags in facts["dags"].values()), facts["dags"]
    assert facts["run"]["state"] == "success", facts["run"]
    manifests = [p for p in (output / "manifests").glob("run=*.json") if p.name.count(".") == 1]  # not .summary.json
    assert len(manifests) == 1, sorted(p.name for p in (output / "manifests").iterdir())
    manifest = json.loads(manifests[0].read_text())
    shards = [entry for entry in manifest["files"] if entry["key"].startswith("data/")]
    assert shards and all((output / entry["key"]).is_file() for entry in shards), manifest["files"]
    assert manifest["counts"]["data"] + manifest["counts"]["quarantine"] == 4, manifest["counts"]
    assert facts["retries"] == {"terminal": ["failed", 1], "healing": ["success", 2]}, facts["retries"]
