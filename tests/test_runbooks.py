"""The two runbooks cannot drift from the code: each shell block carries a mark (an HTML comment before its
fence) and the tests act on it.

- `run`: run here, in the page's order, as one bash script, against stand-ins (serve-sim, a local output root, the
  stand-in tokenizer) that the test names in the variables of the page's `env` block;
- `gpu`, `cluster`: need a GPU or a real cluster; every `eagle-datagen` command in them is parsed by the real
  argument parser, and every Airflow connection's extra is checked against the keys the DAGs accept;
- `env`: the variables a reader sets once; the test sets them instead, and checks it sets the same ones.

The README and the runbooks, with the reference pages they link, stay short enough to read: a word budget."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

RUNBOOKS = {name: REPO / "docs" / f"runbook-{name}.md" for name in ("cluster", "train")}
MARKED = re.compile(r"<!-- runbook: (\w+)[^>]*-->\n```(?:sh|bash)\n(.*?)^```", re.M | re.S)
SHELL_FENCE = re.compile(r"^```(?:sh|bash)\n", re.M)
MARKS = {"run", "gpu", "cluster", "env"}
WORD_BUDGET = 15_000  # README + runbooks + the docs/ pages they link (docs/internals/ is background)


def blocks(page: Path) -> list[tuple[str, str]]:
    return MARKED.findall(page.read_text())


def commands(block: str) -> list[list[str]]:
    """Each command of a block as argv (continuation lines joined, comments dropped, `$VAR` kept as a word)."""
    text = block.replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            found.append(words)
    return found


@pytest.mark.parametrize("name", sorted(RUNBOOKS))
def test_every_shell_block_is_marked(name):
    text = RUNBOOKS[name].read_text()
    marks = [mark for mark, _ in blocks(RUNBOOKS[name])]
    assert len(marks) == len(SHELL_FENCE.findall(text)), f"runbook-{name}.md has a shell block without a mark"
    assert set(marks) <= MARKS, f"runbook-{name}.md: unknown marks {set(marks) - MARKS}"
    assert "run" in marks


@pytest.mark.parametrize("name", sorted(RUNBOOKS))
def test_commands_that_need_a_gpu_or_cluster_parse(name):
    from eagle_datagen.cli import build_parser

    parser = build_parser()
    checked = 0
    for mark, block in blocks(RUNBOOKS[name]):
        if mark not in ("gpu", "cluster"):
            continue
        for argv in commands(block):
            if argv[0] == "eagle-datagen":
                try:
                    parser.parse_args(argv[1:])
                except SystemExit as exit_:
                    pytest.fail(f"runbook-{name}.md: `{shlex.join(argv)}` does not parse (exit {exit_.code})")
                checked += 1
            checked += check_airflow_connection(argv) + check_run_conf(argv)
    assert checked or name == "train"


def check_airflow_connection(argv: list[str]) -> int:
    """An SGLang connection (`airflow connections add ... --conn-type http --conn-extra JSON`): its extra keys are
    ones the DAGs accept."""
    if argv[:3] != ["airflow", "connections", "add"] or "--conn-extra" not in argv:
        return 0
    if argv[argv.index("--conn-type") + 1] != "http":
        return 0  # the Amazon provider's connection: its extra is the provider's
    sys.path.insert(0, str(REPO / "plugins"))
    from eagle_datagen_airflow.deployment import EXTRA_KEYS

    extra = json.loads(argv[argv.index("--conn-extra") + 1])
    assert set(extra) <= EXTRA_KEYS, f"connection extra keys the DAGs refuse: {set(extra) - EXTRA_KEYS}"
    return 1


def check_run_conf(argv: list[str]) -> int:
    """An `airflow dags trigger -c JSON` or `backfill create --dag-run-conf JSON`: its keys are the category DAGs'
    form params (a run refuses any other key)."""
    flags = {"-c", "--conf", "--dag-run-conf"} & set(argv)
    if argv[:1] != ["airflow"] or not flags:
        return 0
    from eagle_datagen import settings

    params = {entry.form for entry in settings.RUN_SETTINGS if entry.form and entry.param}
    conf = json.loads(argv[argv.index(flags.pop()) + 1])
    assert set(conf) <= params, f"run conf keys the category DAGs refuse: {set(conf) - params}"
    return 1


def env_names(page: Path) -> set[str]:
    return {
        argv[1].split("=", 1)[0]
        for mark, block in blocks(page)
        if mark == "env"
        for argv in commands(block)
        if argv[0] == "export"
    }


def run_blocks(page: Path, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    assert env_names(page) <= set(env), f"{page.name} sets variables the test does not: {env_names(page) - set(env)}"
    script = "set -euo pipefail\n" + "\n".join(block for mark, block in blocks(page) if mark == "run")
    full = {**os.environ, **env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "include"), os.environ.get("PYTHONPATH")]))
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=full, capture_output=True, text=True, timeout=300)


def cli(*argv: str) -> None:
    from eagle_datagen.cli import main

    assert main(list(argv)) == 0, argv


TOKENIZER = ["--tokenizer", "standin:kimi-k2.5", "--trust-remote-code"]


@pytest.mark.slow
def test_the_cluster_runbook_runs_against_stand_ins(tmp_path):
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        env = {
            "SGLANG_URL": sim.url,
            "TOKENIZER": "standin:kimi-k2.5",
            "OUTPUT": str(tmp_path / "out"),
            "RECIPE": str(REPO / "include" / "recipes" / "demo.yaml"),
            "EAGLE_DATAGEN_DRAFT_VOCAB_SIZE": "64",
        }
        result = run_blocks(RUNBOOKS["cluster"], env, tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert list((tmp_path / "out" / "manifests").glob("run=*.json"))


@pytest.mark.slow
def test_the_train_runbook_runs_against_stand_ins(tmp_path):
    import dataclasses

    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread
    from eagle_datagen.standin.sglang.speculative import SpeculativeConfig

    out = str(tmp_path / "out")
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        cli(
            "run",
            "--recipe",
            str(REPO / "include/recipes/demo.yaml"),
            *TOKENIZER,
            "--sglang-url",
            sim.url,
            "--output",
            out,
            "--run-id",
            "night1",
            "--heldout-fraction",
            "0.4",
            "--draft-vocab-size",
            "64",
        )
    cli("release", "--output", out, "--release-id", "rel1", "--draft-vocab-size", "64")

    def speculative(path: str, rate: float) -> SimServerThread:
        spec = SpeculativeConfig(draft_model_path=path, accept_rate=rate)
        return SimServerThread(dataclasses.replace(SimConfig().with_profile("instant"), speculative=spec))

    with speculative("drafter-new", 0.8) as new, speculative("drafter-old", 0.55) as old:
        env = {
            "OUTPUT": out,
            "RELEASE_ID": "rel1",
            "TOKENIZER": "standin:kimi-k2.5",
            "NEW_URL": new.url,
            "OLD_URL": old.url,
        }
        result = run_blocks(RUNBOOKS["train"], env, tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "train-data" / "export_info.yaml").exists()
    assert "accept_length_total" in result.stdout


def linked_pages(page: Path) -> set[Path]:
    found = set()
    for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", page.read_text()):
        path = (page.parent / target).resolve()
        if path.exists() and "internals" not in path.parts:
            found.add(path)
    return found


def test_what_a_user_reads_fits_the_word_budget():
    pages = {(REPO / "README.md").resolve(), *(p.resolve() for p in RUNBOOKS.values())}
    for page in list(pages):
        pages |= linked_pages(page)
    words = {p.relative_to(REPO).as_posix(): len(p.read_text().split()) for p in pages}
    assert sum(words.values()) < WORD_BUDGET, f"{sum(words.values())} words: {words}"


def test_every_docs_page_is_a_user_page_or_internal():
    user = {(REPO / "README.md").resolve(), *(p.resolve() for p in RUNBOOKS.values())}
    for page in list(user):
        user |= linked_pages(page)
    stray = [p.name for p in (REPO / "docs").glob("*.md") if p.resolve() not in user]
    assert not stray, f"docs/ pages no user page links: move them under docs/internals/ ({stray})"
