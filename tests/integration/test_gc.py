"""gc removes a published run's checkpoints and plan shards, keeps what a retry and an audit need, and never
touches a run without a manifest; a rerun and an export of the run work as before after it."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from eagle_datagen.generation.claims import claim_key, heartbeat_key
from eagle_datagen.generation.plan import plan_key
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from eagle_datagen.storage.output_root import LocalOutputRoot
from generation_runs import run_options

pytestmark = pytest.mark.slow


def test_gc_removes_the_work_files_of_published_runs_only(tmp_path):
    output = str(tmp_path / "out")
    root = LocalOutputRoot(output)
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        first = run_generation(run_options(tmp_path, [sim.url], run_id="done", prompts=12, output=output))
    assert first.published is not None
    root.write_bytes("checkpoints/run=busy/shard=00000/chunk-1-x.jsonl", b"{}\n")  # a run in flight
    root.write_bytes("plans/run=busy/shard-00000.parquet", b"x")
    before = set(root.list())
    assert any(k.startswith("checkpoints/run=done/shard=") for k in before)
    assert any(k.startswith(heartbeat_key("done")) for k in before)  # the run's process beat

    cli = [sys.executable, "-m", "eagle_datagen.cli", "gc", "--output", output]
    dry = json.loads(subprocess.run([*cli, "--dry-run"], capture_output=True, text=True, check=True).stdout)
    assert dry["runs"] == ["done"] and dry["removed"] > 0 and set(root.list()) == before
    done = json.loads(subprocess.run(cli, capture_output=True, text=True, check=True).stdout)
    assert done["removed"] == dry["removed"] and done["bytes"] > 0

    after = set(root.list())
    assert not any(
        k.startswith(("checkpoints/run=done/shard=", "plans/run=done/shard-", heartbeat_key("done"))) for k in after
    )
    assert {"checkpoints/run=busy/shard=00000/chunk-1-x.jsonl", "plans/run=busy/shard-00000.parquet"} <= after
    assert {plan_key("done"), claim_key("done"), "manifests/run=done.json"} <= after  # retry and audit
    assert pq.read_table(root.path / claim_key("done")).num_rows == 12  # every planned sample id
    # a rerun is recognised from the manifest; the data is exported from the data shards
    again = run_generation(run_options(tmp_path, ["http://127.0.0.1:9"], run_id="done", prompts=12, output=output))
    assert again.published["already_published"] and again.generated == 0
    exported = tmp_path / "export.jsonl"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "eagle_datagen.cli",
            "export",
            "--output",
            output,
            "--run-id",
            "done",
            "--to",
            str(exported),
        ],
        check=True,
        capture_output=True,
    )
    assert len(exported.read_text().splitlines()) == first.published["data"]
