"""A run over two stand-in replicas: with prefix affinity each prompt's samples reach one replica and the
replicas serve the repeats from their prefix caches; the run's statistics count it; least-outstanding does not."""

from __future__ import annotations

import json
import pathlib
from collections import defaultdict

import pytest

from eagle_datagen.generation.stage import SamplingOverrides
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.standin.sglang import SimConfig, SimServerThread
from generation_runs import run_options

pytestmark = pytest.mark.slow
K = 4
PROMPTS = 32


def endpoints_by_prompt(out: pathlib.Path, run_id: str) -> dict[str, set[str]]:
    replicas = defaultdict(set)
    for chunk in out.glob(f"checkpoints/run={run_id}/**/*.jsonl"):
        for line in chunk.read_text().splitlines():
            row = json.loads(line)
            replicas[row["prompt_id"]].add(row["endpoint"])
    return replicas


@pytest.mark.parametrize("balance", ["prefix-affinity", "least-outstanding"])
def test_samples_of_a_prompt_share_a_replica_and_its_cache(tmp_path, balance):
    config = SimConfig(max_running_requests=8).with_profile("fast")
    with SimServerThread(config) as a, SimServerThread(config) as b:
        options = run_options(
            tmp_path,
            [a.url, b.url],
            run_id=balance,
            prompts=PROMPTS,
            sampling=SamplingOverrides(max_new_tokens=1000, samples_per_prompt=K),
            balance=balance,
        )
        summary = run_generation(options)
        assert summary.pending == 0 and summary.generated == PROMPTS * K
        stats = [s.stats() for s in (a, b)]
    out = tmp_path / "out"
    replicas = endpoints_by_prompt(out, balance)
    together = sum(len(r) == 1 for r in replicas.values())
    cached = sum(s["cached_tokens"] for s in stats) / sum(s["prompt_tokens"] for s in stats)
    run_stats = json.loads(next(out.glob(f"manifests/run={balance}.statistics.json")).read_text())
    prefill = run_stats["all"]["prefill"]
    assert prefill["cached_tokens"] == sum(s["cached_tokens"] for s in stats)  # what the servers reported
    assert prefill["prompt_tokens_sent"] == sum(s["prompt_tokens"] for s in stats)
    if balance == "prefix-affinity":
        assert together >= 0.75 * PROMPTS  # on one replica (a few move to keep slots busy, more so at the end)
        assert cached > 0.7  # 3 of every 4 samples find their prompt cached (less the last id)
    else:
        assert together < 0.75 * PROMPTS and cached < 0.7
