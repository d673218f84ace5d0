"""An Airflow task is green only when its part is done: a shard task whose shard is found incomplete when it
publishes fails with the reason (its retry, on any worker, then finishes it), and a finalize task with no plan to
publish fails instead of ending green with nothing published."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from eagle_datagen.errors import DataGenError
from eagle_datagen.generation.steps import RetryableShardError, RunConfig, RunContext, plan_step, preflight_step
from eagle_datagen.storage.output_root import LocalOutputRoot

from conftest import user_record, write_jsonl

PARAMS = {"aws_conn_id": "aws_missing"}


def test_a_shard_task_whose_shard_is_incomplete_at_publish_fails_with_the_reason_and_its_retry_publishes(tmp_path):
    from eagle_datagen.generation.stage import generate_pending
    from eagle_datagen.inference.preflight import ServerInfo
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread
    from eagle_datagen_airflow import tasks

    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"question {i}") for i in range(8)])
    output = str(tmp_path / "out")
    root = LocalOutputRoot(output)
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        config = RunConfig(
            output=output,
            tokenizer="standin:kimi-k2.5",
            trust_remote_code=True,
            sglang_urls=[sim.url],
            run_id="inc",
            prompts=[str(src)],
            shard_size=4,
            canary=False,
            checkpoint_every=1,
            draft_vocab_size=16,
            front_end="airflow",
        ).to_dict()
        servers = preflight_step(config)
        assert plan_step(config, servers)["shards"] == [0, 1]
        ctx = RunContext.of(config)  # shard 0 generated and checkpointed, not published (a task killed then)
        infos = [ServerInfo(**s) for s in servers]
        asyncio.run(generate_pending(root, ctx.plan(), [0], infos, ctx.options, vocab_size=163840))
        chunk = next(k for k in sorted(root.list("checkpoints/run=inc/shard=00000/")) if k.endswith(".jsonl"))
        root.write_bytes(chunk, root.read_bytes(chunk)[:10])  # damaged at rest; its index still lists the sample

        with pytest.raises(RetryableShardError) as failed:  # the task fails (Airflow retries it), never green
            tasks.generate_shard(config, servers, 0, PARAMS)
        message = str(failed.value)
        assert "shard 0 of run inc: 1 of its 4 samples are listed by checkpoint indexes but missing" in message
        assert "\n" not in message
        assert root.list("data/") == []

        retried = tasks.generate_shard(config, servers, 0, PARAMS)  # the retry generates the sample again
    assert retried["rows"] == 4 and retried["generated"] == 1


def test_a_finalize_task_with_nothing_planned_fails(tmp_path):
    from eagle_datagen_airflow import tasks

    config = RunConfig(
        output=str(tmp_path / "out"),
        tokenizer="standin:kimi-k2.5",
        sglang_urls=["http://127.0.0.1:9"],
        run_id="never-planned",
        prompts=["p.jsonl"],
        front_end="airflow",
    ).to_dict()
    with pytest.raises(DataGenError, match="run never-planned has no plan under .*: nothing to publish"):
        tasks.finalize(config, PARAMS, SimpleNamespace(extra=None))
