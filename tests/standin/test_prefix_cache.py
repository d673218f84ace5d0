"""The stand-in's prefix cache: `cached_tokens` is what SGLang's radix cache would report for the same request
sequence (the longest cached prefix, at most len(prompt) - 1), LRU eviction, prefill charged for the rest."""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from eagle_datagen.standin.sglang import SimConfig, SimServerThread
from eagle_datagen.standin.sglang.cli import add_serve_sim_arguments, config_from_args
from eagle_datagen.standin.sglang.prefill_lane import PrefillLane
from eagle_datagen.standin.sglang.prefix_cache import PrefixCache


def ids(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


def test_match_is_the_longest_cached_prefix_to_the_token_and_never_the_last_token():
    cache = PrefixCache(capacity_tokens=10_000, block_tokens=16)
    prompt = ids(1000, 100)
    assert cache.match(prompt) == 0
    cache.insert(prompt)
    assert cache.match(prompt) == 99  # the last prompt token is always computed
    assert cache.match(prompt + [5, 6, 7]) == 100  # an extension reuses all of it
    assert cache.match(prompt[:37] + [1, 2, 3]) == 37  # diverges inside a block: exact to the token
    assert cache.match(prompt[:3] + [9] * 50) == 3
    assert cache.match([7] + prompt) == 0
    assert cache.match(prompt[:1]) == 0 and cache.match([]) == 0


def test_children_of_one_prefix_are_told_apart():
    cache = PrefixCache(capacity_tokens=10_000, block_tokens=8)
    shared = ids(0, 20)  # a system prompt
    cache.insert(shared + ids(500, 30))
    cache.insert(shared + ids(900, 30))
    assert cache.match(shared + ids(900, 10) + [1]) == 30
    assert cache.match(shared + ids(500, 25) + [1]) == 45
    assert cache.match(shared + [4242] * 10) == 20


def test_lru_eviction_keeps_capacity_and_drops_the_least_recently_used():
    cache = PrefixCache(capacity_tokens=256, block_tokens=16)
    a, b, c = ids(0, 96), ids(10_000, 96), ids(20_000, 96)
    cache.insert(a)
    cache.insert(b)
    assert cache.match(a) == 95  # a is now more recent than b
    cache.insert(c)  # 288 tokens > 256: b's blocks go first
    assert cache.tokens <= 256
    assert cache.match(b) < 95 and cache.match(a) == 95 and cache.match(c) == 95
    assert cache.evicted_tokens >= 32


def test_eviction_takes_leaves_so_a_shared_prefix_outlives_its_branches():
    cache = PrefixCache(capacity_tokens=64, block_tokens=16)
    system = ids(0, 32)
    for user in range(10):
        cache.insert(system + ids(1000 * (user + 1), 16))
        assert cache.tokens <= 64
    assert cache.match(system + [1]) == 32


def test_disabled_cache_matches_nothing():
    cache = PrefixCache(capacity_tokens=0)
    cache.insert(ids(0, 100))
    assert cache.match(ids(0, 100)) == 0 and cache.tokens == 0


# --- in the server -----------------------------------------------------------------------------------------


def serve(**overrides) -> SimServerThread:
    return SimServerThread(SimConfig(**overrides).with_profile("instant"))


def post(url: str, body: dict) -> dict | list:
    response = requests.post(url + "/generate", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def cached(url: str, prompt: list[int], **params) -> int:
    return post(url, {"input_ids": prompt, "sampling_params": {"max_new_tokens": 64, **params}})["meta_info"][
        "cached_tokens"
    ]


def test_server_reports_cached_tokens_from_its_cache_and_charges_prefill_for_the_rest():
    with serve(prefix_cache_tokens=100_000) as sim:
        system, user = ids(100, 300), ids(5000, 200)
        assert cached(sim.url, system + user) == 0
        assert cached(sim.url, system + user, sampling_seed=2) == 499  # a second sample of the prompt
        assert cached(sim.url, system + ids(9000, 50)) == 300  # another prompt with the same system prompt
        stats = requests.get(sim.url + "/sim/stats", timeout=10).json()
        assert stats["prompt_tokens"] == 1350 and stats["cached_tokens"] == 799
        assert stats["computed_prompt_tokens"] == 1350 - 799
        metrics = requests.get(sim.url + "/metrics", timeout=10).text
        assert "sglang:cache_hit_rate{" in metrics and "sglang:cached_tokens_total" not in metrics
        requests.post(sim.url + "/flush_cache", timeout=10)
        assert cached(sim.url, system + user) == 0


@pytest.mark.parametrize(
    ("sampling", "dropped"),
    [
        ({"max_new_tokens": 1000}, 0),  # stopped on EOS early: the overlap step computed the EOS id's KV too
        ({"max_new_tokens": 32}, 1),  # ran to max_new_tokens: the last id's KV was never computed
        ({"max_new_tokens": 32, "ignore_eos": True}, 1),
    ],
)
def test_finished_outputs_are_cached_too_so_a_continuation_hits_them(sampling, dropped):
    """As the real server does (tests/engine/test_differential.py::test_cached_tokens_follow_the_real_server)."""
    with serve(prefix_cache_tokens=100_000) as sim:
        prompt = ids(100, 200)
        answer = post(sim.url, {"input_ids": prompt, "sampling_params": sampling})
        assert answer["meta_info"]["finish_reason"]["type"] == ("stop" if dropped == 0 else "length")
        follow_up = prompt + answer["output_ids"] + ids(7000, 20)
        assert cached(sim.url, follow_up) == len(prompt) + len(answer["output_ids"]) - dropped


def test_flush_cache_refuses_while_a_request_runs_or_waits_for_idle_with_a_timeout():
    """As SGLang 0.5.23 (checked on the real server): 400 "Flush cache failed." while busy, the cache kept;
    `?timeout=S` waits up to S seconds for idle, then flushes (or answers 400 "Timed out ...")."""
    slow = dataclasses.replace(SimConfig(prefix_cache_tokens=100_000).with_profile("instant"), decode_s_per_token=0.01)
    with SimServerThread(slow) as sim, concurrent.futures.ThreadPoolExecutor(1) as pool:
        prompt = ids(100, 200)
        long_answer = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 150, "ignore_eos": True}}
        running = pool.submit(post, sim.url, long_answer)  # 1.5 s of decode
        time.sleep(0.3)
        busy = requests.post(sim.url + "/flush_cache", timeout=10)
        assert (busy.status_code, busy.text) == (400, "Flush cache failed.\n")
        short = requests.post(sim.url + "/flush_cache?timeout=0.2", timeout=10)
        assert (short.status_code, short.text) == (400, "Timed out waiting for idle state.")
        waited = requests.post(sim.url + "/flush_cache?timeout=30", timeout=40)
        # the server answers the flush once it is idle, which may be before this thread has read the long answer
        assert waited.status_code == 200 and running.result(timeout=10)
        assert cached(sim.url, prompt) == 0  # flushed after the request finished: its sequence is gone too
        assert requests.post(sim.url + "/flush_cache?timeout=x", timeout=10).status_code == 400


def test_server_evicts_least_recently_used_prompts_at_its_capacity():
    with serve(prefix_cache_tokens=2_000) as sim:
        prompts = [ids(10_000 * (k + 1), 600) for k in range(4)]  # 4 x (600 + output) > 2,000
        for prompt in prompts:
            assert cached(sim.url, prompt, max_new_tokens=1) == 0
        assert cached(sim.url, prompts[0], max_new_tokens=1) < 599  # the oldest was evicted
        assert cached(sim.url, prompts[-1], max_new_tokens=1) == 599


def test_n_samples_share_one_prefill():
    with serve(prefix_cache_tokens=100_000) as sim:
        answers = post(sim.url, {"input_ids": ids(100, 400), "sampling_params": {"max_new_tokens": 16, "n": 4}})
        assert [a["meta_info"]["cached_tokens"] for a in answers] == [399] * 4
        stats = requests.get(sim.url + "/sim/stats", timeout=10).json()
        assert stats["computed_prompt_tokens"] == 400 + 4 * 1 and stats["prefill_passes"] == 5


def test_disable_radix_cache_and_capacity_flags():
    parser = argparse.ArgumentParser()
    add_serve_sim_arguments(parser)
    assert config_from_args(parser.parse_args([])).prefix_cache_tokens == SimConfig().prefix_cache_tokens > 0
    assert config_from_args(parser.parse_args(["--prefix-cache-tokens", "1234"])).prefix_cache_tokens == 1234
    assert config_from_args(parser.parse_args(["--disable-radix-cache"])).prefix_cache_tokens == 0
    with pytest.raises(SystemExit):
        parser.parse_args(["--prefix-cache-tokens", "-1"])
    with serve(prefix_cache_tokens=0) as sim:
        prompt = ids(100, 50)
        assert cached(sim.url, prompt) == cached(sim.url, prompt) == 0


# --- the prefill lane --------------------------------------------------------------------------------------


def test_prefill_runs_one_batch_at_a_time_so_a_shared_prefix_arriving_together_is_computed_per_batch():
    cache = PrefixCache(capacity_tokens=100_000)
    lane = PrefillLane(cache, lambda: 0.00001)
    system = ids(100, 3000)
    prompts = [system + ids(10_000 * (k + 1), 100) for k in range(20)]

    async def together() -> list[int]:
        running = asyncio.create_task(lane.prefill(ids(90_000, 5000)))  # a batch that runs as the 20 arrive
        await asyncio.sleep(0)
        cached = await asyncio.gather(*(lane.prefill(p) for p in prompts))
        await running
        return list(cached)

    cached_tokens = asyncio.run(together())
    # after the running batch: two fresh prompts fit the 8,192-token budget (SGLang matches each as it is
    # added, and a batch's prompts enter the tree only once it has run); then the other 18 find the system prompt
    assert cached_tokens == [0, 0] + [3000] * 18 and lane.batches == 3


def test_a_cancelled_prefill_leaves_the_lane_and_the_others_finish():
    cache = PrefixCache(capacity_tokens=100_000)
    lane = PrefillLane(cache, lambda: 0.01)

    async def scenario() -> list[int]:
        first = asyncio.create_task(lane.prefill(ids(100, 9000)))  # its batch takes 90 ms
        await asyncio.sleep(0)
        queued = [asyncio.create_task(lane.prefill(ids(100, 9000) + ids(50_000, k + 1))) for k in range(3)]
        await asyncio.sleep(0.01)
        queued[0].cancel()  # waiting behind the first batch
        first.cancel()  # runs the first batch: the batch still completes for everyone in it
        results = await asyncio.gather(first, *queued, return_exceptions=True)
        return [r if isinstance(r, int) else type(r).__name__ for r in results]

    first, cancelled, *rest = asyncio.run(scenario())
    assert first == cancelled == "CancelledError" and rest == [9000, 9000]  # the first batch's prompt, all of it
    assert cache.match(ids(100, 9000)) == 8999  # the cancelled batch's prompt entered the tree anyway


def test_server_prefills_concurrent_requests_in_batches():
    config = dataclasses.replace(SimConfig(prefix_cache_tokens=100_000).with_profile("fast"), prefill_s_per_token=1e-4)
    with SimServerThread(config) as sim:
        system = ids(100, 3000)
        with ThreadPoolExecutor(max_workers=12) as pool:
            answers = list(pool.map(lambda k: cached(sim.url, system + ids(10_000 * (k + 1), 100)), range(12)))
        # the first batch forms as the first request arrives (0.31 s of prefill); the others queue behind it
        assert sorted(answers).count(3000) >= 10, answers
        stats = requests.get(sim.url + "/sim/stats", timeout=10).json()
        assert stats["computed_prompt_tokens"] <= 2 * 3100 + 10 * 100
