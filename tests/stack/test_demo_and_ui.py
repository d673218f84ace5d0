"""`make demo` and `make airflow` as a user runs them: subprocesses that start the whole stack, do their job and
stop everything they started."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from eagle_datagen_stack.api import AirflowApi
from eagle_datagen_stack.processes import free_port

pytestmark = pytest.mark.slow

CATEGORIES = {"chat", "code", "math", "multilingual", "reasoning", "tool_use", "writing"}


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that name `text` (the stack's home): what was left running."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in args and str(os.getpid()) != cmdline.parent.name:
            found.append(args)
    return found


def test_make_demo_runs_every_category_through_airflow_and_stops_everything(tmp_path):
    from eagle_datagen.storage.manifest import list_manifests, verify_manifest
    from eagle_datagen.storage.output_root import open_output_root

    home = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "eagle_datagen_stack.demo", "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "triggered 7 category DAGs" in out and "category runs: " in out  # progress lines
    for category in CATEGORIES:
        assert re.search(rf"eagle_datagen__{category}\s+success\s+\d+\s+{category}-manual__", out), out
    assert "<|im_assistant|>assistant<|im_middle|><think>" in out and "everything started was stopped" in out
    assert re.search(r"release \S+: \d[\d,]* samples of 7 categories", out), out

    root = open_output_root(str(home / "output"))  # the copy of the object store
    manifests = list_manifests(root)
    assert len(manifests) == 7 and {c for m in manifests for c in m["counts"]["by_category"]} == CATEGORIES
    for manifest in manifests:
        assert verify_manifest(root, manifest) == [], manifest["run_id"]
    rows = [r for p in (home / "output").glob("data/category=*/run=*/*.parquet") for r in pq.read_table(p).to_pylist()]
    assert rows and all(r["prompt_ids"][-1] == 163606 and r["output_ids"][-1] == 163586 for r in rows)
    assert all(r["output_ids"].count(163607) == 1 for r in rows)
    assert len({r["sample_id"] for r in rows}) == len(rows)
    [release] = [json.loads(root.read_bytes(k)) for k in root.list("releases/") if k.endswith(".json")][-1:]
    assert set(release["categories"]) == CATEGORIES and release["counts"]["samples"] == len(rows)
    assert processes_mentioning(str(home)) == []


def test_make_airflow_serves_the_ui_until_stopped_and_keeps_its_runs(tmp_path):
    home = tmp_path / "ui"

    def start(port: int) -> tuple[subprocess.Popen, str, str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "eagle_datagen_stack.ui", "--home", str(home), "--port", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            found = re.match(r"Airflow UI: (\S+)\s+login: admin / (\S+)", line)
            if found:
                return proc, found.group(1), found.group(2)
        pytest.fail(f"make airflow ended without serving the UI:\n{''.join(seen)[-3000:]}")

    def stop(proc: subprocess.Popen) -> None:
        proc.send_signal(signal.SIGTERM)  # what Ctrl-C or a service manager does
        rest = proc.communicate(timeout=120)[0]
        assert proc.returncode == 0 and "stopped." in rest, rest[-3000:]
        assert processes_mentioning(str(home)) == []

    proc, url, password = start(free_port())
    try:
        api = AirflowApi(url, "admin", password)
        assert {f"eagle_datagen__{c}" for c in CATEGORIES} <= api.dag_ids()
        run_id = api.trigger("eagle_datagen__chat", {"limit": 2})
        assert api.wait_for_run("eagle_datagen__chat", run_id, 300) == "success"
    finally:
        stop(proc)

    # A second start of the same home: the same login, the earlier run still there.
    proc, url, again = start(free_port())
    try:
        assert again == password
        assert [r["dag_run_id"] for r in AirflowApi(url, "admin", again).dag_runs("eagle_datagen__chat")] == [run_id]
    finally:
        stop(proc)
