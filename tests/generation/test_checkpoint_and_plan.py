"""Checkpoints (immutable chunks, crash-tolerant reads) and run plans (fixed shards, reloadable)."""

from __future__ import annotations

import asyncio

import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.generation.checkpoint import (
    INDEX_SUFFIX,
    CheckpointPolicy,
    CheckpointWriter,
    checkpoint_prefix,
    finish_type,
    load_checkpoint_index,
    load_checkpoints,
)
from eagle_datagen.generation.plan import (
    CategorySettings,
    RunPlan,
    check_plan_matches,
    load_plan,
    shard_requests,
    split_into_shards,
    write_plan,
)
from eagle_datagen.inference.samples import SampleRequest, SampleResult
from eagle_datagen.records import validate_record
from eagle_datagen.storage.output_root import LocalOutputRoot
from eagle_datagen.tokenization.tokenize import TokenizedPrompt

from conftest import user_record


def result(i: int, shard: int = 0, retryable: bool = False) -> SampleResult:
    request = SampleRequest.create(
        prompt_id=f"p{i}",
        record_id=None,
        category="chat",
        sample_index=0,
        prompt_ids=[1],
        model="m",
        sampling={},
        shard=shard,
    )
    return SampleResult(
        request,
        output_ids=[5, 163586],
        finish_reason={"type": "stop", "matched": 163586},
        meta_info={"completion_tokens": 2},
        endpoint="http://e",
        attempts=1,
        error="gave up" if retryable else None,
        retryable=retryable,
    )


def chunks(root, run_id: str, shard: int) -> list[str]:
    return [k for k in root.list(checkpoint_prefix(run_id, shard)) if k.endswith(".jsonl")]


def test_writer_flushes_by_count_and_on_exit_and_skips_retryable(tmp_path):
    root = LocalOutputRoot(str(tmp_path))

    async def scenario():
        async with CheckpointWriter(root, "r1", CheckpointPolicy(max_samples=3, max_age_s=60)) as writer:
            for i in range(4):
                await writer.add(result(i))
            assert len(chunks(root, "r1", 0)) == 1  # flushed at 3
            await writer.add(result(99, retryable=True))
            await writer.add(result(5, shard=1))
        return writer.written

    assert asyncio.run(scenario()) == 5
    shard0 = load_checkpoints(root, "r1", 0)
    assert len(shard0) == 4 and result(99).request.sample_id not in shard0
    assert len(load_checkpoints(root, "r1", 1)) == 1


def test_writer_flushes_by_age(tmp_path):
    root = LocalOutputRoot(str(tmp_path))

    async def scenario():
        async with CheckpointWriter(root, "r1", CheckpointPolicy(max_samples=100, max_age_s=0.1)) as writer:
            await writer.add(result(1))
            await asyncio.sleep(0.3)
            return len(chunks(root, "r1", 0))

    assert asyncio.run(scenario()) == 1


def test_reading_tolerates_a_cut_chunk_and_keeps_the_first_copy(tmp_path):
    root = LocalOutputRoot(str(tmp_path))
    good = result(1).to_checkpoint()
    import json

    line = json.dumps(good)
    root.write_bytes(checkpoint_prefix("r", 0) + "chunk-1.jsonl", (line + "\n" + line[:40]).encode())
    root.write_bytes(checkpoint_prefix("r", 0) + "chunk-2.jsonl", (line + "\n").encode())
    assert list(load_checkpoints(root, "r", 0)) == [good["sample_id"]]
    assert load_checkpoint_index(root, "r", 0) == {good["sample_id"]: "stop"}  # chunks without an index: read


def test_the_checkpoint_index_says_what_the_chunks_hold_without_reading_them(tmp_path):
    root = LocalOutputRoot(str(tmp_path))

    async def scenario():
        async with CheckpointWriter(root, "r1", CheckpointPolicy(max_samples=3, max_age_s=60)) as writer:
            for i in range(7):
                await writer.add(result(i))

    asyncio.run(scenario())
    rows = load_checkpoints(root, "r1", 0)
    assert load_checkpoint_index(root, "r1", 0) == {sid: finish_type(row) for sid, row in rows.items()}
    assert len([k for k in root.list(checkpoint_prefix("r1", 0)) if k.endswith(INDEX_SUFFIX)]) == 3
    # the chunks are not read when their index is there: a chunk made unreadable changes nothing
    first = chunks(root, "r1", 0)[0]
    root.write_bytes(first, b"not json")
    assert len(load_checkpoint_index(root, "r1", 0)) == 7
    # a chunk whose index was never written (a crash between the two writes) is read in full
    for key in root.list(checkpoint_prefix("r1", 0)):
        if key.endswith(INDEX_SUFFIX) and not key.startswith(first.removesuffix(".jsonl")):
            root.delete(key)
    assert len(load_checkpoint_index(root, "r1", 0)) == 7


def tokenized(n: int, category: str) -> list[TokenizedPrompt]:
    return [
        TokenizedPrompt(
            validate_record(user_record(f"{category} {i}", category=category, id=f"{category}-{i}"), "o"),
            [1, 2, i, 163606],
        )
        for i in range(n)
    ]


def make_plan(tmp_path, samples_per_prompt=2):
    root = LocalOutputRoot(str(tmp_path))
    prompts = tokenized(5, "math") + tokenized(3, "chat")
    settings = {
        c: CategorySettings({"temperature": 1.0, "max_new_tokens": 64}, samples_per_prompt) for c in ("math", "chat")
    }
    planned = [(p, list(range(samples_per_prompt))) for p in prompts]
    planned[0] = (planned[0][0], [1])  # an incremental plan may keep only some samples of a prompt
    shards = split_into_shards(planned, 2)
    plan = RunPlan("r1", "moonshotai/Kimi-K2.5", "kimi-k2.5", settings, [s for s, _ in shards], {"x": 1})
    write_plan(root, plan, [p for _, p in shards])
    return root, plan


def test_shards_are_per_category_and_fixed(tmp_path):
    root, plan = make_plan(tmp_path)
    assert [(s.category, s.prompts, s.samples) for s in plan.shards] == [
        ("chat", 2, 4),
        ("chat", 1, 2),
        ("math", 2, 3),
        ("math", 2, 4),
        ("math", 1, 2),
    ]
    assert plan.total_samples == 15
    loaded = load_plan(root, "r1")
    assert loaded == plan
    requests = shard_requests(root, loaded, 2)
    assert [(r.record_id, r.sample_index) for r in requests] == [
        ("math-0", 1),
        ("math-1", 0),
        ("math-1", 1),
    ]
    assert len({r.sample_id for r in requests}) == 3
    assert requests == shard_requests(root, loaded, 2)  # same ids, seeds and rids every time
    assert load_plan(root, "other") is None


def test_a_rerun_with_other_settings_is_refused(tmp_path):
    _, plan = make_plan(tmp_path)
    other = RunPlan(
        plan.run_id,
        plan.model,
        plan.profile,
        {
            c: CategorySettings(s.sampling | {"temperature": 0.5}, s.samples_per_prompt)
            for c, s in plan.categories.items()
        },
        plan.shards,
        plan.provenance,
    )
    check_plan_matches(plan, plan)
    with pytest.raises(ConfigError, match="already exists at this output with other settings"):
        check_plan_matches(plan, other)


def test_pending_requests_hold_one_shard_at_a_time_and_skip_checkpointed_samples(tmp_path):
    """A run of a million prompts must not load every shard before its first request."""
    from eagle_datagen.generation.plan import shard_key
    from eagle_datagen.generation.stage import pending_requests

    root, plan = make_plan(tmp_path)
    reads: list[str] = []

    class CountingRoot(LocalOutputRoot):
        def read_bytes(self, key: str) -> bytes:
            reads.append(key)
            return super().read_bytes(key)

    counting = CountingRoot(str(tmp_path))
    shards = [s.index for s in plan.shards]
    first_shard = shard_requests(root, plan, shards[0])
    done = {index: set() for index in shards} | {shards[0]: {first_shard[0].sample_id}}
    pending = pending_requests(counting, plan, shards, done)
    first = next(pending)
    assert first == first_shard[1]  # the checkpointed sample is skipped
    assert set(reads) <= {shard_key(plan.run_id, i) for i in shards[:2]}  # this shard and the one prefetched
    rest = list(pending)
    everything = [r for i in shards for r in shard_requests(root, plan, i)]
    # every other sample once (in cache-friendly order: prompts sorted by ids, a prompt's samples spaced)
    assert sorted(r.sample_id for r in [first, *rest]) == sorted(r.sample_id for r in everything[1:])


def test_cached_tokens_of_meta_info_reach_the_published_rows(tmp_path, kimi_profile):
    """meta_info.cached_tokens is stored per sample; a server that does not report it leaves it null."""
    import pyarrow.parquet as pq

    from eagle_datagen.generation.publish import PublishOptions, publish_shard, shard_rows

    root, plan = make_plan(tmp_path)
    requests = shard_requests(root, plan, 0)  # chat, two prompts of two samples
    answers = []
    for i, request in enumerate(requests):
        meta = {"completion_tokens": 4, "prompt_tokens": len(request.prompt_ids), "weight_version": "w1"}
        if i != 1:
            meta["cached_tokens"] = [3, None, 0, 2][i]
        answers.append(
            SampleResult(
                request,
                output_ids=[5, 163607, 6, 163586],
                finish_reason={"type": "stop", "matched": 163586},
                meta_info=meta,
                endpoint="http://e",
                attempts=1,
            )
        )

    async def store() -> None:
        async with CheckpointWriter(root, plan.run_id, CheckpointPolicy(max_samples=100, max_age_s=60)) as writer:
            for answer in answers:
                await writer.add(answer)

    asyncio.run(store())
    assert [r["cached_tokens"] for r in shard_rows(root, plan, 0)] == [3, None, 0, 2]
    publish_shard(root, plan, 0, kimi_profile, PublishOptions())
    [part] = list(tmp_path.glob("data/category=chat/run=r1/part-*.parquet"))
    table = pq.read_table(part)
    assert table.schema.field("cached_tokens").type == "int32"
    assert table.column("cached_tokens").to_pylist() == [3, None, 0, 2]


def test_a_flush_cancelled_before_its_write_started_still_writes_its_batch(tmp_path):
    """The age ticker is cancelled when the writer closes; a flush it began, queued behind a busy executor, once
    dropped its batch (24 of 71 results of a real run, 2026-12-07). Every added row must be on disk at exit."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    root = LocalOutputRoot(str(tmp_path))
    busy = threading.Event()

    async def scenario():
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))
        async with CheckpointWriter(root, "r1", CheckpointPolicy(max_samples=100, max_age_s=0.05)) as writer:
            blocker = asyncio.get_running_loop().run_in_executor(None, busy.wait, 5)  # the only thread, held
            for i in range(5):
                await writer.add(result(i))
            await asyncio.sleep(0.2)  # the ticker's flush has taken the batch and waits for the executor
            asyncio.get_running_loop().call_later(0.2, busy.set)
        await blocker
        return writer.written

    assert asyncio.run(scenario()) == 5
    assert len(load_checkpoints(root, "r1", 0)) == 5


def test_a_failed_flush_by_age_is_raised_at_exit(tmp_path):
    class Broken(LocalOutputRoot):
        def write_bytes(self, key, data):
            raise OSError("disk full")

    async def scenario():
        policy = CheckpointPolicy(max_samples=100, max_age_s=0.05)
        async with CheckpointWriter(Broken(str(tmp_path)), "r1", policy) as writer:
            await writer.add(result(1))
            await asyncio.sleep(0.2)

    with pytest.raises(OSError, match="disk full"):
        asyncio.run(scenario())
