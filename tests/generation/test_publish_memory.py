"""Publishing a shard holds a row group, not the shard: a 16M-token shard peaks near a 2M-token one when their
row groups are alike (in a subprocess, peak RSS). Main's in-memory publisher held about 45 bytes per token."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from test_bounded_publish import shard_inputs

from eagle_datagen.storage.output_root import LocalOutputRoot

from conftest import REPO

pytestmark = pytest.mark.slow
GROWTH_MB = 120  # 8x the tokens in row groups of the same size: more rows staged, not a larger working set
CEILING_MB = 1536

PUBLISH = """
import json, resource, sys
from eagle_datagen.storage import parquet
parquet.ROW_GROUP_BYTES = int(sys.argv[2]) or parquet.ROW_GROUP_BYTES
from eagle_datagen.generation.plan import load_plan
from eagle_datagen.generation.publish import PublishOptions, publish_shard
from eagle_datagen.profile import load_profile
from eagle_datagen.storage.output_root import LocalOutputRoot
root = LocalOutputRoot(sys.argv[1])
rows = publish_shard(root, load_plan(root, "mem"), 0, load_profile("kimi-k2.5"), PublishOptions())
print(json.dumps({"rows": rows, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _publish_peak(out, row_group_bytes: int = 0) -> tuple[int, float]:
    done = subprocess.run(
        [sys.executable, "-c", PUBLISH, str(out), str(row_group_bytes)],
        cwd=REPO,
        env=dict(os.environ),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    return result["rows"], result["peak_mb"]


def test_publishing_16m_tokens_peaks_near_publishing_2m(tmp_path):
    """Memory is set by the row group: 16M tokens in row groups of 8 MiB (what 2M tokens make: one group) peak
    near 2M tokens; with the default 128 MiB groups (16M tokens: one 64 MB group) under the ceiling."""
    outs, tokens = {}, {}
    for prompts in (18, 143):  # 4 samples of 24k-32k tokens: 2M and 16M output tokens
        outs[prompts] = tmp_path / f"out{prompts}"
        plan, tokens[prompts] = shard_inputs.synthesize_shard(
            LocalOutputRoot(str(outs[prompts])), "mem", prompts, 4, (24_000, 32_000), seed=prompts
        )
    assert tokens[143] > 7 * tokens[18]
    rows, small = _publish_peak(outs[18])
    assert rows == 72
    rows, large = _publish_peak(outs[143], 8 * 2**20)
    assert rows == 572
    assert large - small < GROWTH_MB, (small, large)
    for path in [*outs[143].glob("data/**/*.parquet"), *outs[143].glob("quarantine/**/*.parquet")]:
        path.unlink()
    rows, default = _publish_peak(outs[143])
    assert rows == 572 and default < CEILING_MB, default
