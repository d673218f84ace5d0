"""Publishing a shard holds a row group, not the shard: a 16M-token shard peaks near a 2M-token one (in a
subprocess, peak RSS). Main's in-memory publisher held about 45 bytes per token: 16M tokens added about 550 MB
(measured 242 MB at 2M, 796 MB at 16M); the bounded one adds what a larger reorder bucket and row group hold."""

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
GROWTH_MB = 150  # 8x the tokens may fill a 64 MB reorder bucket and a row group, not hold the shard
CEILING_MB = 1536

PUBLISH = """
import json, resource, sys
from eagle_datagen.generation.plan import load_plan
from eagle_datagen.generation.publish import PublishOptions, publish_shard
from eagle_datagen.profile import load_profile
from eagle_datagen.storage.output_root import LocalOutputRoot
root = LocalOutputRoot(sys.argv[1])
rows = publish_shard(root, load_plan(root, "mem"), 0, load_profile("kimi-k2.5"), PublishOptions())
print(json.dumps({"rows": rows, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def test_publishing_16m_tokens_peaks_near_publishing_2m(tmp_path):
    peaks = {}
    for prompts in (18, 143):  # 4 samples of 24k-32k tokens: 2M and 16M output tokens
        out = tmp_path / f"out{prompts}"
        plan, tokens = shard_inputs.synthesize_shard(
            LocalOutputRoot(str(out)), "mem", prompts, 4, (24_000, 32_000), seed=prompts
        )
        done = subprocess.run(
            [sys.executable, "-c", PUBLISH, str(out)], cwd=REPO, env=dict(os.environ), capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.splitlines()[-1])
        assert result["rows"] == plan.total_samples == prompts * 4
        peaks[tokens] = result["peak_mb"]
    small, large = sorted(peaks)
    assert large > 7 * small
    assert peaks[large] - peaks[small] < GROWTH_MB, peaks
    assert peaks[large] < CEILING_MB, peaks
