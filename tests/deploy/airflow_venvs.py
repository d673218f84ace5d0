"""Clean virtualenvs with one Airflow release and the project's wheel, as a user's existing Airflow would have them.

A venv is built once per Airflow version and requirement hash under `.cache/airflow-venvs/` and reused while neither
changes (the wheel's code is laid over it per test, see `overlay`); one unused for a day is removed. Builders take a
lock per venv, so two test processes never build the same one at once; a build that died leaves no stamp and is
built again.

Each build installs Airflow alone first, then the wheel with its `airflow` extra the way a user would
(`pip install eagle-datagen[airflow]` into that environment), and records in `build.json` every package the second
step changed: what pip had to replace of Airflow's own environment.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = REPO / "pyproject.toml"
REQUIREMENTS = REPO / "requirements.txt"
CONSTRAINTS = REPO / "constraints.txt"
BUILDER = "1"  # bump when the build steps below change: old venvs are then left alone and new ones built


def supported_range() -> tuple[str, str]:
    """(lowest, highest) supported Airflow: the `airflow` extra's floor and requirements.txt's pin."""
    extra = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]["airflow"]
    spec = next(s for s in extra if s.startswith("apache-airflow") and not s.startswith("apache-airflow-"))
    lowest = spec.split(">=")[1].split(",")[0].strip()
    pins = dict(
        line.split("#")[0].strip().split("==") for line in REQUIREMENTS.read_text().splitlines() if "==" in line
    )
    return lowest, pins["apache-airflow"]


def venv_root() -> Path:
    return Path(os.environ.get("EAGLE_DATAGEN_CACHE") or REPO / ".cache") / "airflow-venvs"


def requirement_hash(version: str, constrained: bool) -> str:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    facts = {
        "builder": BUILDER,
        "python": sys.version_info[:2],
        "airflow": version,
        "dependencies": project["dependencies"],
        "extras": project["optional-dependencies"],
        "constraints": CONSTRAINTS.read_text() if constrained else None,
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def build_wheel(folder: Path) -> Path:
    """The project's wheel, built from a copy of what the Dockerfile installs (no editable install's egg-info)."""
    source = folder / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    shutil.copytree(REPO / "include" / "eagle_datagen", source / "include" / "eagle_datagen", ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    dist = folder / "dist"
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist)]
    subprocess.run([*command, str(source)], check=True, capture_output=True, timeout=300)
    return next(dist.glob("eagle_datagen-*.whl"))


def _freeze(python: Path) -> dict[str, str]:
    out = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"], check=True, capture_output=True, text=True
    ).stdout
    return {p["name"].lower(): p["version"] for p in json.loads(out)}


def _pip(python: Path, *args: str) -> None:
    # --no-compile: byte-compiling Airflow and botocore at install time costs more than the few modules a run imports
    command = [str(python), "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-4000:]}")


def _build(venv: Path, version: str, wheel: Path, constrained: bool) -> dict:
    started = time.monotonic()
    subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True, capture_output=True)  # noqa: SLF001
    python = venv / "bin" / "python"
    pins = ["-c", str(CONSTRAINTS)] if constrained else []
    _pip(python, f"apache-airflow=={version}", *pins)
    before = _freeze(python)
    _pip(python, f"{wheel}[airflow]", *pins)
    after = _freeze(python)
    changed = {name: [old, after.get(name)] for name, old in before.items() if after.get(name) != old}
    added = sorted(set(after) - set(before))
    return {"airflow": version, "changed": changed, "added": added, "build_s": round(time.monotonic() - started, 1)}


def airflow_venv(version: str, wheel: Path, constrained: bool) -> tuple[Path, dict]:
    """The cached venv for `version` (built now if missing) and its build record."""
    root = venv_root()
    root.mkdir(parents=True, exist_ok=True)
    venv = root / f"airflow-{version}-{requirement_hash(version, constrained)}"
    record = venv / "build.json"
    with open(root / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits here for the first one's build, then reuses it
        if not record.exists():
            shutil.rmtree(venv, ignore_errors=True)  # a build that died half-way
            facts = _build(venv, version, wheel, constrained)
            tmp = record.with_suffix(".tmp")
            tmp.write_text(json.dumps(facts, indent=1))
            tmp.rename(record)  # the stamp, written last
        os.utime(record)  # when it was last used
    prune(root, version, keep=venv)
    return venv, json.loads(record.read_text())


def prune(root: Path, version: str, keep: Path, unused_s: float = 86400) -> None:
    """Remove this version's venvs of other requirements (about 700 MB each) unused for a day, unless one is being
    built; a checkout that still has those requirements builds its venv again."""
    for other in root.glob(f"airflow-{version}-*"):
        record = other / "build.json"
        if not other.is_dir() or other == keep or (record.exists() and time.time() - record.stat().st_mtime < unused_s):
            continue
        with open(root / f"{other.name}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # being built right now
            shutil.rmtree(other, ignore_errors=True)


def overlay(wheel: Path, folder: Path, venv: Path) -> Path:
    """This checkout's wheel installed into `folder` (put first on PYTHONPATH), so a cached venv built from an earlier
    commit with the same requirements runs today's code without being changed itself."""
    python = venv / "bin" / "python"
    _pip(python, "--no-deps", "--target", str(folder), str(wheel))
    return folder
