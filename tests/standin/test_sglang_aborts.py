"""serve-sim honours `POST /abort_request` as SGLang 0.5.23 does (measured on the real engine: the same
observations in tests/engine/test_lost_request_real_engine.py): by rid prefix, running, queued and lost
requests alike."""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from abort_probe import EXPECTED, PROMPT, observe_abort_semantics
from eagle_datagen.standin.sglang import SimConfig, SimServerThread
from eagle_datagen.standin.sglang.aborts import ABORTED_QUEUED, ABORTED_RUNNING


def post(url: str, path: str, body: object, timeout: float = 10) -> tuple[int, bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def long_request(rid: str, tokens: int = 2000) -> dict:
    return {"input_ids": PROMPT, "rid": rid, "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}


def slow_sim(**changes) -> SimServerThread:
    config = SimConfig(**changes).with_profile("instant")
    return SimServerThread(dataclasses.replace(config, decode_s_per_token=0.005))


def test_abort_request_ends_running_requests_by_rid_prefix_as_the_real_server_does():
    with slow_sim() as sim:
        assert observe_abort_semantics(sim.url, max_new_tokens=2000) == EXPECTED
        assert sim.stats()["aborted"] == 3  # probe, probe-h (its prefix), other (abort_all)


def test_a_queued_request_aborted_answers_abort_in_waiting_queue_and_the_running_one_goes_on():
    with slow_sim(max_running_requests=1) as sim, ThreadPoolExecutor(2) as pool:
        running = pool.submit(post, sim.url, "/generate", long_request("running", 400))
        time.sleep(0.2)
        queued = pool.submit(post, sim.url, "/generate", long_request("queued"))
        time.sleep(0.2)
        assert post(sim.url, "/abort_request", {"rid": "queued"}) == (200, b"")
        status, body = queued.result(timeout=5)
        answer = json.loads(body)
        assert status == 200 and answer["output_ids"] == [] and answer["meta_info"]["finish_reason"] == ABORTED_QUEUED
        status, body = running.result(timeout=30)
        assert status == 200 and json.loads(body)["meta_info"]["finish_reason"]["type"] == "length"  # untouched


def test_a_lost_request_is_answered_once_aborted_and_no_longer_held():
    with SimServerThread(SimConfig(faults={"lose": 1.0}).with_profile("instant")) as sim, ThreadPoolExecutor(1) as pool:
        lost = pool.submit(post, sim.url, "/generate", long_request("lost-1", 8), 30)
        time.sleep(0.5)
        assert not lost.done()  # held: accepted, never answered
        assert post(sim.url, "/abort_request", {"rid": "lost-1"}) == (200, b"")
        status, body = lost.result(timeout=5)
        assert status == 200 and json.loads(body)["meta_info"]["finish_reason"] == ABORTED_QUEUED
        assert sim.stats()["aborted"] == 1 and sim.stats()["faults"]["lose"] == 1


def test_abort_request_refuses_a_body_that_is_not_json_and_ignores_an_empty_rid():
    with slow_sim() as sim, ThreadPoolExecutor(1) as pool:
        running = pool.submit(post, sim.url, "/generate", long_request("kept", 300))
        time.sleep(0.2)
        status, body = post(sim.url, "/abort_request", b"xx")
        assert status == 400 and "JSON object" in json.loads(body)["message"]
        assert post(sim.url, "/abort_request", {"rid": ""}) == (200, b"")
        assert post(sim.url, "/abort_request", {}) == (200, b"")
        status, body = running.result(timeout=30)
        assert json.loads(body)["meta_info"]["finish_reason"]["type"] == "length"
        assert sim.stats()["aborted"] == 0


@pytest.mark.parametrize("stream", [False, True])
def test_an_aborted_running_request_carries_the_ids_decoded_so_far(stream):
    with slow_sim() as sim, ThreadPoolExecutor(1) as pool:
        running = pool.submit(post, sim.url, "/generate", long_request("part") | {"stream": stream})
        time.sleep(1.0)
        post(sim.url, "/abort_request", {"rid": "part"})
        status, body = running.result(timeout=10)
    assert status == 200
    if stream:
        events = [json.loads(line[6:]) for line in body.decode().split("\n\n") if line.startswith("data: {")]
        answer = events[-1]
    else:
        answer = json.loads(body)
    meta = answer["meta_info"]
    assert meta["finish_reason"] == ABORTED_RUNNING
    assert 0 < meta["completion_tokens"] == len(answer["output_ids"]) < 2000
