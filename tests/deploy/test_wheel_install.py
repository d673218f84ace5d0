"""The package as users install it: not editable, outside the checkout.

Every other test imports the package from include/ (the editable install of `make venv`), where every file of
the source tree is at hand. The Docker image and `pip install` get only what the wheel ships, so a data file
missing from pyproject.toml's package-data (the stand-in's chat template was) fails only there. This test
repeats the Dockerfile's own install steps: the files it copies into /opt/airflow/project are copied into a
temporary folder (less what .dockerignore leaves out of the build context), installed with the same
`pip install --no-deps` into a fresh venv, and the installed `eagle-datagen` then runs `tokenize`, `serve-sim`
and a short `run`, from a temporary working folder, with a fresh cache (the stand-in tokenizer is built from
the installed files) and nothing of include/ on sys.path.

The image's first step (`pip install -r requirements.txt -c constraints.txt`, Airflow included) is not
repeated: into a fresh venv from pip's warm cache it took 1,001 s on 2026-12-02 (niced, on the 2-core machine
under other load; venv creation included), against 20-35 s for this whole test. The fresh venv reaches the
project venv's site-packages instead (built by `make venv` from the same pins, checked below against
requirements.txt), by a
.pth line, which puts that folder on sys.path after the venv's own site-packages without running its .pth
files, so the editable install's path to include/ stays out. The image itself cannot be built here (no Docker
engine, no base image): tests/deploy/test_compose.py checks the rest of the Dockerfile.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from installed_standin import installed_serve_sim

from conftest import REPO, user_record, write_jsonl

DOCKERFILE = REPO / "Dockerfile"
PROJECT = "/opt/airflow/project"
PACKAGE = REPO / "include" / "eagle_datagen"


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(instruction, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def project_install_steps() -> tuple[list[tuple[list[str], str]], list[str]]:
    """The Dockerfile's COPYs into the project folder and its `pip install` of that folder."""
    copies, install = [], None
    for word, rest in dockerfile_instructions():
        args = [a for a in shlex.split(rest) if not a.startswith("--chown")]
        if word == "COPY" and args[-1].startswith(PROJECT):
            copies.append((args[:-1], args[-1]))
        elif word == "RUN" and PROJECT in rest and "pip install" in rest:
            install = shlex.split(rest)
    assert copies and install, "the Dockerfile no longer copies and installs the project as this test expects"
    return copies, install


def dockerignore_patterns() -> list[str]:
    """.dockerignore's patterns as name globs (what the build context leaves out: an editable install's
    egg-info, whose file list would otherwise put missing package data back into the wheel)."""
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip().removeprefix("**/") for line in lines if line.strip() and not line.startswith("#")]


def test_every_data_file_of_the_package_is_package_data():
    """A file under include/eagle_datagen that is not a module must match pyproject.toml's package-data."""
    import fnmatch
    import tomllib

    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = patterns["eagle_datagen"]
    missing = []
    for path in PACKAGE.rglob("*"):
        if path.is_dir() or path.suffix in (".py", ".pyc") or "__pycache__" in path.parts:
            continue
        relative = path.relative_to(PACKAGE).as_posix()
        if not any(fnmatch.fnmatch(relative, pattern) for pattern in shipped):
            missing.append(relative)
    assert not missing, f"not in pyproject.toml's package-data, so missing from the wheel: {missing}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with the project installed as the Dockerfile installs it; returns its bin folder."""
    tmp = tmp_path_factory.mktemp("wheel")
    copies, install = project_install_steps()
    project = tmp / PROJECT.lstrip("/")
    for sources, dest in copies:
        target = tmp / dest.lstrip("/")
        for source in sources:
            src = REPO / source
            if src.is_dir():
                ignore = shutil.ignore_patterns(*dockerignore_patterns())
                shutil.copytree(src, target, ignore=ignore, dirs_exist_ok=True)
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target / src.name)
    venv = tmp / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True, capture_output=True)  # noqa: SLF001
    probe = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(subprocess.check_output([venv / "bin/python", "-c", probe], text=True).strip())
    (site / "project_requirements.pth").write_text(sysconfig.get_path("purelib") + "\n")
    pip = [str(venv / "bin/python"), "-m", "pip"]
    command = [*pip, *install[install.index("install") :]]
    command = [str(project) if arg == PROJECT else arg for arg in command]
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return venv / "bin"


def in_venv(bin_dir: Path, *args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"EAGLE_DATAGEN_CACHE": str(cwd / "cache"), "HF_HUB_OFFLINE": "1", "PATH": f"{bin_dir}:{env['PATH']}"}
    return subprocess.run(list(args), capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


@pytest.mark.slow
def test_installed_package_is_the_wheel_with_the_pinned_requirements(installed, tmp_path):
    probe = (
        "import json, sys, importlib.metadata as m, eagle_datagen\n"
        "print(json.dumps({'file': eagle_datagen.__file__, 'path': sys.path,"
        " 'versions': {d.metadata['Name'].lower(): d.version for d in m.distributions()}}))"
    )
    result = in_venv(installed, str(installed / "python"), "-c", probe, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    facts = json.loads(result.stdout)
    assert Path(facts["file"]).is_relative_to(installed.parent), facts["file"]
    assert not [p for p in facts["path"] if p.startswith(str(REPO / "include"))], facts["path"]
    for line in (REPO / "requirements.txt").read_text().splitlines():
        pin = line.split("#")[0].strip()
        if "==" in pin:
            name, version = pin.split("==")
            assert facts["versions"].get(name.lower()) == version, f"{name}: not the pinned {version}"


@pytest.mark.slow
def test_installed_cli_tokenizes_serves_and_runs(installed, tmp_path):
    prompts = write_jsonl(
        tmp_path / "prompts.jsonl", [user_record(f"Write a haiku about the number {i}.") for i in range(6)]
    )
    result = in_venv(
        installed,
        "eagle-datagen",
        "tokenize",
        "--prompts",
        str(prompts),
        "--tokenizer",
        "standin:kimi-k2.5",
        "--trust-remote-code",
        "--output",
        str(tmp_path / "tokenized"),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "6" in result.stdout

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    with installed_serve_sim([str(installed / "eagle-datagen")], tmp_path, env) as url:
        result = in_venv(
            installed,
            "eagle-datagen",
            "run",
            "--prompts",
            str(prompts),
            "--tokenizer",
            "standin:kimi-k2.5",
            "--trust-remote-code",
            "--sglang-url",
            url,
            "--output",
            str(tmp_path / "out"),
            "--run-id",
            "wheel",
            "--draft-vocab-size",
            "16",
            cwd=tmp_path,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "out" / "manifests" / "run=wheel.json").read_text())
    assert manifest["counts"]["data"] + manifest["counts"]["quarantine"] == 6, manifest["counts"]
