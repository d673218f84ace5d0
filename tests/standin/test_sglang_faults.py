"""Injected faults of the stand-in SGLang server: each at rate 1.0 shows its exact signature on the wire.

Also: rates below 1 mix faults with successes (so retries can succeed), fault counters, and restarts.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import aiohttp
import pytest
import requests

from eagle_datagen.standin.sglang import FaultRates, SimConfig, SimServerThread

EOS, THINK_START, THINK_END = 163586, 163606, 163607
PROMPT = [220, 17, 10, 17, 30, 163586, 163588, 69702, 163601, 163606]
BODY = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 1000, "sampling_seed": 4}}


@pytest.fixture(scope="module")
def server():
    with SimServerThread(SimConfig(slow_seconds=0.3).with_profile("instant")) as sim:
        yield sim


@pytest.fixture
def sim(server):
    server.set_faults({})
    requests.post(server.url + "/sim/reset_stats").raise_for_status()
    yield server
    server.set_faults({})


def post(sim, body=BODY, timeout: float = 30, **kwargs) -> requests.Response:
    return requests.post(sim.url + "/generate", json=body, timeout=timeout, **kwargs)


def clean_output(sim) -> list[int]:
    sim.set_faults({})
    return post(sim).json()["output_ids"]


@pytest.mark.parametrize(
    ("kind", "status", "body"),
    [
        (
            "error_503",
            503,
            {
                "object": "error",
                "message": "The request queue is full.",
                "type": "ServiceUnavailableError",
                "param": None,
                "code": 503,
            },
        ),
        ("error_429", 429, {"error": {"message": "Too many requests: router queue is full", "code": 429}}),
        ("error_408", 408, {"error": {"message": "Request timed out in router queue", "code": 408}}),
    ],
)
def test_error_faults_answer_their_status_and_body(sim, kind, status, body):
    sim.set_faults({kind: 1.0})
    response = post(sim)
    assert response.status_code == status
    assert response.json() == body
    stats = sim.stats()
    assert stats["faults"] == {kind: 1} and stats["requests"]["by_outcome"] == {str(status): 1}


def test_abort_is_http_200_with_an_abort_finish_reason(sim):
    sim.set_faults({"abort": 1.0})
    answer = post(sim)
    assert answer.status_code == 200
    meta = answer.json()["meta_info"]
    assert answer.json()["output_ids"] == [] and meta["completion_tokens"] == 0
    assert meta["finish_reason"] == {"type": "abort", "message": "Abort before prefill", "status_code": 503}


def test_drop_closes_the_connection_without_an_answer(sim):
    sim.set_faults({"drop": 1.0})
    with pytest.raises(requests.ConnectionError):
        post(sim)

    async def with_aiohttp() -> None:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.ServerDisconnectedError):
                async with session.post(sim.url + "/generate", json=BODY) as response:
                    await response.read()

    asyncio.run(with_aiohttp())
    assert sim.stats()["requests"]["by_outcome"] == {"dropped": 2}


def test_drop_in_a_stream_cuts_it_after_the_first_event(sim):
    sim.set_faults({"drop": 1.0})
    with requests.post(sim.url + "/generate", json={**BODY, "stream": True}, stream=True, timeout=30) as response:
        assert response.status_code == 200
        received = b""
        with pytest.raises(requests.exceptions.ChunkedEncodingError):
            for chunk in response.iter_content(chunk_size=None):
                received += chunk
    assert received.count(b"data: ") == 1 and b"[DONE]" not in received


def test_slow_answers_late(sim):
    started = time.monotonic()
    post(sim).raise_for_status()
    fast = time.monotonic() - started
    sim.set_faults({"slow": 1.0})
    started = time.monotonic()
    response = post(sim)
    assert response.status_code == 200 and response.json()["meta_info"]["e2e_latency"] >= 0.3
    assert time.monotonic() - started >= 0.3 > fast


def test_no_think_end_leaves_out_the_think_end_token(sim):
    clean = clean_output(sim)
    sim.set_faults({"no_think_end": 1.0})
    answer = post(sim).json()
    ids = answer["output_ids"]
    assert THINK_END not in ids and ids[-1] == EOS
    assert ids == [t for t in clean if t != THINK_END]
    assert answer["meta_info"]["completion_tokens"] == len(ids)


def test_echo_prefixes_the_prompt_tail_and_miscounts(sim):
    seen = set()
    for seed in range(8):
        body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 1000, "sampling_seed": seed}}
        sim.set_faults({})
        clean = post(sim, body).json()["output_ids"]
        sim.set_faults({"echo": 1.0})
        answer = post(sim, body).json()
        ids, meta = answer["output_ids"], answer["meta_info"]
        echoed = len(ids) - len(clean)
        assert 1 <= echoed <= 5
        assert ids[:echoed] == PROMPT[-echoed:] and ids[echoed:] == clean
        assert meta["completion_tokens"] == len(clean) != len(ids)
        seen.add(echoed)
    assert len(seen) > 1  # the echo length varies


def test_strip_think_removes_think_tokens_without_claiming_a_reasoning_parser(sim):
    """As a proxy that rewrites answers would: SGLang's own --reasoning-parser leaves /generate alone
    (inference/server_flags.py), so the stand-in no longer reports one for this fault."""
    clean = clean_output(sim)
    assert requests.get(sim.url + "/get_server_info").json()["reasoning_parser"] is None
    sim.set_faults({"strip_think": 1.0})
    answer = post(sim).json()
    ids = answer["output_ids"]
    assert THINK_END not in ids and THINK_START not in ids
    assert ids == [t for t in clean if t not in (THINK_START, THINK_END)]
    assert answer["meta_info"]["completion_tokens"] == len(ids)
    assert requests.get(sim.url + "/get_server_info").json()["reasoning_parser"] is None


def test_prompt_tokens_reports_another_tokenizers_count(sim):
    clean = clean_output(sim)
    sim.set_faults({"prompt_tokens": 1.0})
    answer = post(sim).json()
    assert answer["output_ids"] == clean  # the output is right; only the count disagrees with the ids sent
    assert answer["meta_info"]["prompt_tokens"] == len(PROMPT) + 1
    assert sim.stats()["faults"]["prompt_tokens"] == 1


def test_output_faults_apply_to_streams_too(sim):
    sim.set_faults({"echo": 1.0})
    response = post(sim, {**BODY, "stream": True})
    chunks = [json.loads(c[6:]) for c in response.text.split("\n\n")[:-1] if c != "data: [DONE]"]
    final = chunks[-1]
    echoed = len(final["output_ids"]) - final["meta_info"]["completion_tokens"]
    assert 1 <= echoed <= 5 and final["output_ids"][:echoed] == PROMPT[-echoed:]
    assert all(c["output_ids"][:echoed] == PROMPT[-echoed:] for c in chunks)


def test_injected_503_in_a_stream_arrives_as_an_error_event(sim):
    sim.set_faults({"error_503": 1.0})
    response = post(sim, {**BODY, "stream": True})
    assert response.status_code == 200
    assert response.text == 'data: {"error": {"message": "The request queue is full."}}\n\ndata: [DONE]\n\n'


def test_partial_rates_mix_faults_and_successes_deterministically():
    rates = FaultRates(error_503=0.3, abort=0.2)

    def run() -> list[str]:
        with SimServerThread(SimConfig(faults=rates, fault_seed=11).with_profile("instant")) as sim:
            outcomes = []
            for _ in range(40):
                response = post(sim)
                finish = response.json().get("meta_info", {}).get("finish_reason", {}) if response.ok else {}
                outcomes.append(finish.get("type", str(response.status_code)))
            stats = sim.stats()
        assert stats["faults"].get("error_503", 0) == outcomes.count("503")
        assert stats["faults"].get("abort", 0) == outcomes.count("abort")
        return outcomes

    first = run()
    assert first == run()  # same seed, same order: same faults
    assert {"503", "abort", "stop"} <= set(first)  # a retry can succeed


def test_fault_rates_can_be_replaced_over_http(sim):
    response = requests.post(sim.url + "/sim/faults", json={"error_429": 1.0})
    assert response.json()["faults"]["error_429"] == 1.0 and response.json()["faults"]["error_503"] == 0.0
    assert post(sim).status_code == 429
    for bad in ({"error_429": 2}, {"teapot": 1.0}):
        assert requests.post(sim.url + "/sim/faults", json=bad).status_code == 400
    requests.post(sim.url + "/sim/faults", json={}).raise_for_status()
    assert post(sim).status_code == 200
    text = requests.get(sim.url + "/metrics").text
    assert 'sglang_sim:faults_injected_total{model_name="moonshotai/Kimi-K2.5",kind="error_429"} 1.0' in text


# --- restarts ----------------------------------------------------------------------------------------------


def test_restart_refuses_connections_then_comes_back_starting():
    config = SimConfig(startup_seconds=0.3, decode_s_per_token=0.01, output_tokens_min=100, output_tokens_max=100)
    with SimServerThread(config) as sim:
        time.sleep(0.3)
        assert requests.get(sim.url + "/health_generate").status_code == 200
        in_flight: list[BaseException | int] = []

        def long_request() -> None:
            try:
                in_flight.append(post(sim).status_code)  # ~1 s of decode
            except requests.ConnectionError as exc:
                in_flight.append(exc)

        thread = threading.Thread(target=long_request)
        thread.start()
        while sim.stats()["running"] < 1:
            time.sleep(0.01)
        assert requests.post(sim.url + "/sim/restart", json={"downtime_s": 0.4}).json() == {
            "restarting": True,
            "downtime_s": 0.4,
        }
        thread.join(timeout=5)
        assert isinstance(in_flight[0], requests.ConnectionError)  # in-flight requests are cut
        with pytest.raises(requests.ConnectionError):
            requests.get(sim.url + "/health", timeout=2)  # nothing listens during the downtime
        deadline = time.monotonic() + 5
        while True:
            try:
                status = requests.get(sim.url + "/health_generate", timeout=2).status_code
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        assert status == 503  # back on the same port, still starting
        time.sleep(0.35)
        assert requests.get(sim.url + "/health_generate").status_code == 200
        stats = sim.stats()
        assert stats["restarts"] == 1 and stats["running"] == 0
        assert stats["requests"]["by_outcome"] == {"disconnected": 1}


def test_restart_from_the_thread_handle_and_periodic_restarts():
    config = SimConfig(restart_every_s=0.3, restart_downtime_s=0.1).with_profile("instant")
    with SimServerThread(config) as sim:
        sim.restart(0.2, wait=False)
        with pytest.raises(requests.ConnectionError):
            requests.get(sim.url + "/health", timeout=2)
        time.sleep(0.9)
        assert sim.stats()["restarts"] >= 2  # the manual one and at least one periodic one
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if requests.get(sim.url + "/health", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                time.sleep(0.02)
        else:
            pytest.fail("the server did not come back")


def test_loads_fault_error_answers_500_and_hang_never_answers_while_generation_works():
    with SimServerThread(SimConfig(loads_fault="error").with_profile("instant")) as erring:
        assert requests.get(erring.url + "/v1/loads", timeout=5).status_code == 500
        assert post(erring).status_code == 200
    with SimServerThread(SimConfig(loads_fault="hang").with_profile("instant")) as hanging:
        with pytest.raises(requests.Timeout):
            requests.get(hanging.url + "/v1/loads", timeout=0.5)
        assert post(hanging).status_code == 200


def test_a_stuck_scheduler_answers_nothing_but_health_after_its_nth_request():
    with SimServerThread(SimConfig(stuck_after=1).with_profile("instant")) as stuck:
        assert post(stuck).status_code == 200  # the first is answered
        assert requests.get(stuck.url + "/health_generate", timeout=5).status_code == 200
        with pytest.raises(requests.Timeout):
            post(stuck, timeout=0.5)  # the second is held: the scheduler has stopped
        assert requests.get(stuck.url + "/health", timeout=5).status_code == 200
        for path in ("/v1/loads", "/health_generate"):  # /health_generate: 503 only after SGLang's 20 s
            with pytest.raises(requests.Timeout):
                requests.get(stuck.url + path, timeout=0.5)


INSTANT_PROMPT = PROMPT + [THINK_END]  # rendered with thinking=False: the think block is closed


def test_an_instant_prompt_is_answered_without_think_tokens(sim):
    """As the real model does in instant mode: the answer alone, then the EOS; a thinking prompt still reasons."""
    body = {"input_ids": INSTANT_PROMPT, "sampling_params": {"max_new_tokens": 1000, "sampling_seed": 4}}
    answer = post(sim, body).json()
    ids = answer["output_ids"]
    assert THINK_START not in ids and THINK_END not in ids and ids[-1] == EOS
    assert answer["meta_info"]["completion_tokens"] == len(ids) > 1
    assert THINK_END in clean_output(sim)
    sim.set_faults({"no_think_end": 1.0})  # nothing to leave out of an instant answer
    assert post(sim, body).json()["output_ids"] == ids


def test_think_in_instant_answers_an_instant_prompt_with_reasoning(sim):
    """The wrong shape a model that ignores the template's switch gives: reasoning and </think> after the
    instant prompt. Thinking prompts are not affected."""
    body = {"input_ids": INSTANT_PROMPT, "sampling_params": {"max_new_tokens": 1000, "sampling_seed": 4}}
    clean = clean_output(sim)
    sim.set_faults({"think_in_instant": 1.0})
    ids = post(sim, body).json()["output_ids"]
    assert ids.count(THINK_END) == 1 and ids[-1] == EOS and ids.index(THINK_END) > 0
    assert post(sim).json()["output_ids"] == clean
    stats = requests.get(sim.url + "/sim/stats").json()
    assert stats["faults"]["think_in_instant"] == 2
