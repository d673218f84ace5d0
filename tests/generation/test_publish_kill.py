"""SIGKILL a shard's bounded publishing at each of its new steps (rows being staged on local disk, the Parquet
file being written, between the data file's commit and the quarantine file's), then publish again: every
sample is in the shard's files exactly once, and the files are main's bytes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_bounded_publish import shard_inputs

from eagle_datagen.generation.publish import PublishOptions, data_key, publish_shard, quarantine_key
from eagle_datagen.storage.output_root import LocalOutputRoot
from old_publish import old_shard_bytes

from conftest import REPO

pytestmark = pytest.mark.slow

PUBLISH = """
import sys
from eagle_datagen.generation.plan import load_plan
from eagle_datagen.generation.publish import PublishOptions, publish_shard
from eagle_datagen.profile import load_profile
from eagle_datagen.storage.output_root import LocalOutputRoot
root = LocalOutputRoot(sys.argv[1])
publish_shard(root, load_plan(root, "kill"), 0, load_profile("kimi-k2.5"), PublishOptions())
"""


def _publish_until(out: Path, tmp: Path, when, timeout_s: float = 120) -> bool:
    """Publish shard 0 in a subprocess and SIGKILL it as soon as `when()` holds; True if it was killed."""
    env = dict(os.environ) | {"TMPDIR": str(tmp)}
    process = subprocess.Popen([sys.executable, "-c", PUBLISH, str(out)], cwd=REPO, env=env)
    deadline = time.monotonic() + timeout_s
    try:
        while process.poll() is None and time.monotonic() < deadline:
            if when():
                process.send_signal(signal.SIGKILL)
                break
            time.sleep(0.002)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode == -signal.SIGKILL


def test_sigkill_at_each_publishing_step_then_publish_again(tmp_path, kimi_profile):
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    root = LocalOutputRoot(str(out))
    # half the samples quarantined, so that the quarantine file takes as long as the data file
    plan, _ = shard_inputs.synthesize_shard(
        root, "kill", prompts=150, samples=2, output_tokens=(3000, 9000), chunk=16, bad_every=2, duplicate=True
    )
    expected = old_shard_bytes(root, plan, 0, kimi_profile, PublishOptions().limits)
    data, quarantine = (Path(root.location(k("kill", "chat", 0))) for k in (data_key, quarantine_key))

    def staged(name: str) -> bool:
        return any(tmp.glob(f"eagle-datagen-publish-*/{name}"))

    points = {
        "staging rows": lambda: staged("data.arrow") and not staged("data.parquet"),
        "writing the Parquet file": lambda: staged("data.parquet"),
        "between the data and the quarantine commit": lambda: data.exists() and not quarantine.exists(),
    }
    kills = []
    for name, when in points.items():
        if _publish_until(out, tmp, when):
            kills.append(name)
            assert not quarantine.exists()  # killed before the shard was done
    assert kills == list(points), f"only killed at {kills}"
    assert publish_shard(root, plan, 0, kimi_profile, PublishOptions()) == plan.shards[0].samples
    ids = [i for f in (data, quarantine) for i in pq.read_table(f, columns=["sample_id"]).column(0).to_pylist()]
    assert len(ids) == len(set(ids)) == plan.shards[0].samples == 300
    assert (data.read_bytes(), quarantine.read_bytes()) == expected
    # what a reader lists: the two committed files (a temporary file a kill left behind is hidden)
    assert root.list("data/") + root.list("quarantine/") == [
        data_key("kill", "chat", 0),
        quarantine_key("kill", "chat", 0),
    ]
