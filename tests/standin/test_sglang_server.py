"""The stand-in SGLang server speaks SGLang's native HTTP contract over a real loopback socket.

Endpoints and body shapes, SGLang's error bodies, single/batch/streamed generation, deterministic outputs
(max_new_tokens, stop_token_ids, ignore_eos), the throughput model, the output statistics and the
`serve-sim` command line. Faults and restarts are in test_sglang_faults.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import aiohttp
import numpy as np
import pytest
import requests

from eagle_datagen.standin.sglang import FaultRates, SimConfig, SimServerThread, start_sim_server
from eagle_datagen.standin.sglang.cli import add_serve_sim_arguments, config_from_args
from eagle_datagen.standin.sglang.outputs import OutputModel

EOS, THINK_START, THINK_END = 163586, 163606, 163607
PROMPT = [220, 17, 10, 17, 30, 163586, 163588, 69702, 163601, 163606]
CONTEXT = 4096  # small, so that a too-long prompt is cheap to send


@pytest.fixture(scope="module")
def sim():
    with SimServerThread(SimConfig(context_length=CONTEXT).with_profile("instant")) as server:
        yield server


@pytest.fixture(scope="module")
def http():
    with requests.Session() as session:
        yield session


def generate(http, sim, body: dict, **kwargs) -> requests.Response:
    return http.post(sim.url + "/generate", json=body, timeout=30, **kwargs)


def ok(http, sim, body: dict):
    response = generate(http, sim, body)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    return response.json()


def events(response: requests.Response) -> list:
    """The SSE events of a stream: JSON objects, and the final "[DONE]" as a string."""
    assert response.text.endswith("\n\n")
    chunks = response.text.split("\n\n")[:-1]
    assert all(chunk.startswith("data: ") for chunk in chunks), chunks
    return [c[6:] if c == "data: [DONE]" else json.loads(c[6:]) for c in chunks]


# --- endpoints ---------------------------------------------------------------------------------------------


def test_health_endpoints(http, sim):
    for path in ("/health", "/health_generate"):
        response = http.get(sim.url + path)
        assert response.status_code == 200 and response.content == b""


def test_model_info_on_both_paths(http, sim):
    for path in ("/get_model_info", "/model_info"):
        assert http.get(sim.url + path).json() == {
            "model_path": "moonshotai/Kimi-K2.5",
            "tokenizer_path": "moonshotai/Kimi-K2.5",
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "kimi_k25",
            "architectures": ["KimiK25ForConditionalGeneration"],
        }


def test_server_info_on_both_paths(http, sim):
    for path in ("/get_server_info", "/server_info"):
        info = http.get(sim.url + path).json()
        assert info["version"] == "0.5.9"
        assert info["model_path"] == "moonshotai/Kimi-K2.5"
        assert info["context_length"] == CONTEXT
        assert (info["max_running_requests"], info["max_queued_requests"], info["tp_size"]) == (64, 4096, 8)
        assert info["reasoning_parser"] is None and info["tool_call_parser"] is None
        assert info["enable_metrics"] is True
        assert info["port"] == sim.port
        assert info["enable_deterministic_inference"] is False  # SGLang's default: sampling_seed is ignored


def test_v1_models_and_no_weight_version_route(http, sim):
    models = http.get(sim.url + "/v1/models").json()
    assert models["object"] == "list"
    (card,) = models["data"]
    assert card["id"] == card["root"] == "moonshotai/Kimi-K2.5"
    assert (card["object"], card["owned_by"], card["max_model_len"]) == ("model", "sglang", CONTEXT)
    assert isinstance(card["created"], int)
    # SGLang 0.5.23 has no /get_weight_version (the weight version is in /model_info): FastAPI's 404
    missing = http.get(sim.url + "/get_weight_version")
    assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}


def test_flush_cache_get_and_post(http, sim):
    for method in ("GET", "POST"):
        response = http.request(method, sim.url + "/flush_cache")
        assert response.status_code == 200
        assert response.text.startswith("Cache flushed.\nPlease check backend logs")


def test_metrics_are_prometheus_text_with_sglang_names(http, sim):
    ok(http, sim, {"input_ids": PROMPT})
    text = http.get(sim.url + "/metrics").text
    parser = pytest.importorskip("prometheus_client.parser")
    samples = {s.name: s for family in parser.text_string_to_metric_families(text) for s in family.samples}
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:num_requests_total",
        "sglang_sim:slot_occupancy",
        "sglang_sim:max_running_requests",
        "sglang_sim:faults_injected_total",
    ):
        assert name in samples, name
        assert samples[name].labels["model_name"] == "moonshotai/Kimi-K2.5"
    assert samples["sglang:generation_tokens_total"].value > 0
    assert samples["sglang_sim:max_running_requests"].value == 64
    assert 'sglang_sim:faults_injected_total{model_name="moonshotai/Kimi-K2.5",kind="echo"} 0.0' in text


def test_sim_stats_counts_requests_and_tokens(http, sim):
    http.post(sim.url + "/sim/reset_stats").raise_for_status()
    ok(http, sim, {"input_ids": [PROMPT, PROMPT[:5]], "sampling_params": {"max_new_tokens": 7}})
    generate(http, sim, {"input_ids": []})
    stats = http.get(sim.url + "/sim/stats").json()
    assert stats["requests"] == {"total": 2, "by_outcome": {"200": 1, "400": 1}}
    assert (stats["generations"], stats["prompt_tokens"], stats["generation_tokens"]) == (2, 15, 14)
    assert (stats["running"], stats["queued"], stats["max_running_requests"]) == (0, 0, 64)
    assert stats["first_request_at"] <= stats["last_request_at"]
    assert stats["faults"] == {} and stats["restarts"] == 0


# --- /generate: shapes -------------------------------------------------------------------------------------


def test_single_generation_shape(http, sim):
    http.post(sim.url + "/flush_cache", timeout=10)  # earlier tests sent PROMPT: its prefix would be cached
    answer = ok(http, sim, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2048}, "rid": "r-1"})
    assert set(answer) == {"output_ids", "meta_info"}  # no tokenizer: no text, as with --skip-tokenizer-init
    ids, meta = answer["output_ids"], answer["meta_info"]
    # SGLang 0.5.23 with --enable-metrics (tests/engine/test_differential.py holds the two to the same keys)
    assert set(meta) == {
        "id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "cached_tokens_details",
        "e2e_latency", "weight_version", "weight_versions", "num_retractions", "reasoning_tokens", "dp_rank",
        "queue_time", "forward_entry_time", "prefill_finished_time", "first_token_latency", "decode_throughput",
        "request_received_ts", "api_server_dispatch_finish_ts", "request_finished_ts", "response_sent_to_client_ts",
        "storage_prefetch_wait", "storage_staging_wait",
    }  # fmt: skip
    assert meta["cached_tokens_details"] is None and meta["num_retractions"] == 0
    assert meta["request_received_ts"] <= meta["forward_entry_time"] <= meta["request_finished_ts"]
    assert meta["id"] == "r-1"
    assert meta["finish_reason"] == {"type": "stop", "matched": EOS}
    assert (meta["prompt_tokens"], meta["completion_tokens"]) == (len(PROMPT), len(ids))
    assert meta["cached_tokens"] == 0 and meta["weight_version"] == "default"
    assert isinstance(meta["e2e_latency"], float)
    # reasoning, </think>, answer, EOS; nothing else special
    assert 50 <= len(ids) <= 150
    assert ids[-1] == EOS and ids.count(THINK_END) == 1 and THINK_START not in ids
    assert all(0 <= t < 163584 for t in ids if t not in (EOS, THINK_END))
    assert 0.4 < ids.index(THINK_END) / len(ids) < 0.95


def test_rid_is_generated_when_absent(http, sim):
    rid = ok(http, sim, {"input_ids": PROMPT})["meta_info"]["id"]
    assert len(rid) == 32 and int(rid, 16) >= 0


def test_batch_answers_in_input_order(http, sim):
    prompts = [PROMPT, [1, 2, 3], PROMPT[:4]]
    singles = [ok(http, sim, {"input_ids": p, "sampling_params": {"sampling_seed": 5}}) for p in prompts]
    batch = ok(http, sim, {"input_ids": prompts, "sampling_params": {"sampling_seed": 5}, "rid": ["a", "b", "c"]})
    assert [a["meta_info"]["id"] for a in batch] == ["a", "b", "c"]
    assert [a["output_ids"] for a in batch] == [s["output_ids"] for s in singles]
    assert [a["meta_info"]["prompt_tokens"] for a in batch] == [10, 3, 4]
    # a string rid names every item; per-prompt sampling params apply to their own prompt
    batch = ok(
        http,
        sim,
        {"input_ids": prompts[:2], "rid": "x", "sampling_params": [{"max_new_tokens": 3}, {"max_new_tokens": 4}]},
    )
    assert [a["meta_info"]["id"] for a in batch] == ["x_0", "x_1"]
    assert [len(a["output_ids"]) for a in batch] == [3, 4]


def test_n_samples_come_back_as_a_list(http, sim):
    single = ok(http, sim, {"input_ids": PROMPT})
    answers = ok(http, sim, {"input_ids": PROMPT, "sampling_params": {"n": 3}})
    assert isinstance(answers, list) and len(answers) == 3
    assert answers[0]["output_ids"] == single["output_ids"]
    assert len({tuple(a["output_ids"]) for a in answers}) == 3
    assert len({a["meta_info"]["id"] for a in answers}) == 3


def test_unknown_top_level_keys_are_ignored_and_put_works(http, sim):
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 3}, "lora_path": None, "whatever": [1]}
    assert len(ok(http, sim, body)["output_ids"]) == 3
    assert http.put(sim.url + "/generate", json=body).status_code == 200


def test_every_sglang_sampling_key_is_accepted(http, sim):
    params = {
        "max_new_tokens": 16,
        "min_new_tokens": 0,
        "temperature": 1.0,
        "top_p": 0.95,
        "top_k": -1,
        "min_p": 0.0,
        "frequency_penalty": 0.0,
        "presence_penalty": 0.0,
        "repetition_penalty": 1.0,
        "stop": None,
        "stop_token_ids": [EOS],
        "ignore_eos": False,
        "skip_special_tokens": False,
        "spaces_between_special_tokens": True,
        "no_stop_trim": False,
        "n": 1,
        "json_schema": None,
        "regex": None,
        "ebnf": None,
        "sampling_seed": 3,
        "custom_params": None,
        "stream_interval": 4,
        "logit_bias": {"12": 1.5},
    }
    assert len(ok(http, sim, {"input_ids": PROMPT, "sampling_params": params})["output_ids"]) == 16


# --- /generate: deterministic outputs ---------------------------------------------------------------------


def test_outputs_are_a_function_of_prompt_and_seed(http, sim):
    def ids(prompt, **params):
        return ok(http, sim, {"input_ids": prompt, "sampling_params": params})["output_ids"]

    assert ids(PROMPT, sampling_seed=1) == ids(PROMPT, sampling_seed=1)
    assert ids(PROMPT) == ids(PROMPT)
    assert ids(PROMPT, sampling_seed=1) != ids(PROMPT, sampling_seed=2)
    assert ids(PROMPT, sampling_seed=1) != ids(PROMPT[:-1], sampling_seed=1)


def test_max_new_tokens_truncates_with_finish_length(http, sim):
    full = ok(http, sim, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 1000}})["output_ids"]
    cut = ok(http, sim, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 10}})
    assert cut["output_ids"] == full[:10]
    assert cut["meta_info"]["finish_reason"] == {"type": "length", "length": 10}
    assert cut["meta_info"]["completion_tokens"] == 10
    empty = ok(http, sim, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 0}})
    assert empty["output_ids"] == [] and empty["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
    # SGLang's default is 128, which the instant profile's 50-150 tokens sometimes exceed
    default = ok(http, sim, {"input_ids": PROMPT})["output_ids"]
    assert default == full[:128]


def test_stop_token_ids_stop_at_the_first_match_and_keep_it(http, sim):
    full = ok(http, sim, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 1000}})["output_ids"]
    stop = full[20]
    answer = ok(http, sim, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 1000, "stop_token_ids": [stop]}})
    first = full.index(stop)
    assert answer["output_ids"] == full[: first + 1]
    assert answer["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    think = ok(
        http, sim, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 1000, "stop_token_ids": [THINK_END]}}
    )
    assert think["output_ids"][-1] == THINK_END and think["output_ids"] == full[: full.index(THINK_END) + 1]


def test_ignore_eos_generates_to_max_new_tokens(http, sim):
    answer = ok(http, sim, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}})
    ids = answer["output_ids"]
    assert len(ids) == 400 and answer["meta_info"]["finish_reason"] == {"type": "length", "length": 400}
    assert EOS in ids[:151]  # the model still emitted EOS; it just did not stop there
    assert all(t < 163584 for t in ids[ids.index(EOS) + 1 :])


def test_min_new_tokens_holds_off_the_stop(http, sim):
    answer = ok(http, sim, {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 400, "min_new_tokens": 300}})
    assert len(answer["output_ids"]) == 301 and answer["output_ids"][-1] == EOS


# --- /generate: errors as SGLang answers them --------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"temperature": -1.0}, "temperature must be a non-negative finite number, got -1.0."),
        ({"top_p": 1.5}, "top_p must be in (0, 1], got 1.5."),
        ({"top_p": 0}, "top_p must be in (0, 1], got 0."),
        ({"top_k": 0}, "top_k must be -1 (disable) or at least 1, got 0."),
        ({"min_p": 2}, "min_p must be in [0, 1], got 2."),
        ({"max_new_tokens": -1}, "max_new_tokens must be at least 0, got -1."),
        ({"frequency_penalty": 3}, "frequency_penalty must be in [-2, 2], got 3."),
        ({"repetition_penalty": 0}, "repetition_penalty must be in (0, 2], got 0."),
        ({"min_new_tokens": 5, "max_new_tokens": 2}, "min_new_tokens must be in [0, max_new_tokens(2)], got 5."),
        ({"regex": "a", "ebnf": "b"}, "Only one of regex, json_schema, or ebnf can be set."),
    ],
)
def test_out_of_range_sampling_values_are_400(http, sim, params, message):
    response = generate(http, sim, {"input_ids": PROMPT, "sampling_params": params})
    assert response.status_code == 400
    assert response.json() == {"error": {"message": message}}


def test_temperature_zero_is_greedy_not_an_error(http, sim):
    ok(http, sim, {"input_ids": PROMPT, "sampling_params": {"temperature": 0, "top_k": 0}})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"input_ids": []}, "input_ids cannot be empty."),
        ({"sampling_params": {}}, "Either text, input_ids or input_embeds should be provided."),
        ({"input_ids": [1] * CONTEXT}, f"The input ({CONTEXT} tokens) is longer than the model's context length"),
        ({"input_ids": [1, 163840]}, "The input_ids [1, 163840] contains values greater than the vocab size"),
        ({"input_ids": [1, -1]}, "contains negative values"),
        ({"input_ids": [PROMPT, PROMPT], "rid": ["only-one"]}, "The specified rids length mismatch"),
        (
            {"input_ids": [1] * 100, "sampling_params": {"max_new_tokens": CONTEXT}},
            "Requested token count exceeds the model's maximum context length",
        ),
    ],
)
def test_bad_inputs_are_400_with_sglang_messages(http, sim, body, message):
    response = generate(http, sim, body)
    assert response.status_code == 400
    assert set(response.json()) == {"error"}
    assert message in response.json()["error"]["message"]


def test_too_long_prompt_message_is_exact(http, sim):
    response = generate(http, sim, {"input_ids": [1] * (CONTEXT + 5)})
    assert response.json()["error"]["message"] == (
        f"The input ({CONTEXT + 5} tokens) is longer than the model's context length ({CONTEXT} tokens)."
    )


@pytest.mark.parametrize("stream", [False, True])
def test_unknown_sampling_key_is_a_400_schema_error(http, sim, stream):
    body = {"input_ids": PROMPT, "sampling_params": {"seed": 1}, "stream": stream}
    response = generate(http, sim, body)
    assert response.status_code == 400  # before any stream starts, as on SGLang 0.5.23
    assert response.json()["error"].startswith("unknown field `seed`, expected one of `max_new_tokens`, `stop`")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"temperature": "hot"}, 'invalid type: string "hot", expected f64'),
        ({"max_new_tokens": 8.5}, "invalid type: floating point `8.5`, expected i64"),
        ({"ignore_eos": "yes"}, 'invalid type: string "yes", expected a boolean'),
        ({"stop_token_ids": "163586"}, 'invalid type: string "163586", expected a sequence'),
    ],
)
def test_wrong_sampling_types_are_400_schema_errors(http, sim, params, message):
    response = generate(http, sim, {"input_ids": PROMPT, "sampling_params": params})
    assert response.status_code == 400 and response.json() == {"error": message}


def test_a_list_of_sampling_params_for_one_prompt_is_an_uncaught_500(http, sim):
    response = generate(http, sim, {"input_ids": PROMPT, "sampling_params": [{"max_new_tokens": 4}]})
    assert response.status_code == 500
    assert response.text == "Internal Server Error"
    assert response.headers["Content-Type"].startswith("text/plain")


@pytest.mark.parametrize("data", [b"{not json", b'"a string"', b'{"input_ids": "abc"}', b'{"input_ids": [1.5]}'])
def test_malformed_bodies_are_400_validation_errors(http, sim, data):
    response = http.post(sim.url + "/generate", data=data, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    body = response.json()
    assert (body["object"], body["code"], body["type"]) == ("error", 400, "Bad Request") and body["message"]


def test_queue_full_is_503():
    config = SimConfig(max_running_requests=1, max_queued_requests=1, decode_s_per_token=0.005)
    with SimServerThread(config) as sim, requests.Session() as http:
        body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 60, "ignore_eos": True}}  # 0.3 s each
        statuses = []
        threads = [threading.Thread(target=lambda: statuses.append(generate(http, sim, body).status_code))]
        threads.append(threading.Thread(target=lambda: statuses.append(generate(http, sim, body).status_code)))
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 5
        while sim.stats()["queued"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (sim.stats()["running"], sim.stats()["queued"]) == (1, 1)
        response = requests.post(sim.url + "/generate", json=body)
        for thread in threads:
            thread.join()
        assert response.status_code == 503
        assert response.json() == {
            "object": "error",
            "message": "The request queue is full.",
            "type": "ServiceUnavailableError",
            "param": None,
            "code": 503,
        }
        assert sorted(statuses) == [200, 200]


# --- streaming ---------------------------------------------------------------------------------------------


def test_stream_events_are_cumulative_and_end_with_done(http, sim):
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 1000, "sampling_seed": 9}, "rid": "s"}
    plain = ok(http, sim, body)
    response = generate(http, sim, {**body, "stream": True})
    assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/event-stream")
    got = events(response)
    assert got[-1] == "[DONE]"
    results = got[:-1]
    assert len(results) >= 3
    assert all(r["meta_info"]["finish_reason"] is None for r in results[:-1])
    final = results[-1]
    assert final["output_ids"] == plain["output_ids"]
    assert final["meta_info"]["finish_reason"] == plain["meta_info"]["finish_reason"]
    lengths = [len(r["output_ids"]) for r in results]
    assert lengths[:3] == [1, 8, 16] and lengths == sorted(lengths)
    for r in results:
        assert r["output_ids"] == plain["output_ids"][: len(r["output_ids"])]
        assert r["meta_info"]["completion_tokens"] == len(r["output_ids"]) and r["meta_info"]["id"] == "s"


def test_stream_interval_from_the_request(http, sim):
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 12, "stream_interval": 5}, "stream": True}
    lengths = [len(e["output_ids"]) for e in events(generate(http, sim, body))[:-1]]
    assert lengths == [1, 5, 10, 12]


def test_batch_stream_events_carry_their_index(http, sim):
    body = {"input_ids": [PROMPT, [5, 6]], "sampling_params": {"max_new_tokens": 20}, "stream": True}
    got = events(generate(http, sim, body))
    assert got[-1] == "[DONE]"
    finals = {e["index"]: e for e in got[:-1] if e["meta_info"]["finish_reason"] is not None}
    assert sorted(finals) == [0, 1]
    plain = ok(http, sim, {"input_ids": [PROMPT, [5, 6]], "sampling_params": {"max_new_tokens": 20}})
    assert [finals[i]["output_ids"] for i in (0, 1)] == [p["output_ids"] for p in plain]


def test_stream_validation_error_arrives_as_an_event_after_200(http, sim):
    response = generate(http, sim, {"input_ids": PROMPT, "sampling_params": {"top_p": 2}, "stream": True})
    assert response.status_code == 200
    error = {"message": "top_p must be in (0, 1], got 2.", "type": "invalid_request_error", "code": 400,
             "retryable": False}  # fmt: skip
    assert events(response) == [{"error": error}, "[DONE]"]


def test_stream_with_a_list_of_sampling_params_for_one_prompt_breaks_after_the_header(sim):
    body = {"input_ids": PROMPT, "sampling_params": [{"max_new_tokens": 4}], "stream": True}
    with requests.post(sim.url + "/generate", json=body, stream=True, timeout=30) as response:
        assert response.status_code == 200  # the stream had started when the uncaught error hit
        with pytest.raises(requests.exceptions.ChunkedEncodingError):
            _ = response.content


def test_stream_queue_full_arrives_as_an_event():
    config = SimConfig(max_running_requests=1, max_queued_requests=0, decode_s_per_token=0.005)
    with SimServerThread(config) as sim, requests.Session() as http:
        body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}
        thread = threading.Thread(target=lambda: generate(http, sim, body))
        thread.start()
        deadline = time.monotonic() + 5
        while sim.stats()["running"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        response = requests.post(sim.url + "/generate", json={**body, "stream": True})
        thread.join()
        assert response.status_code == 200
        assert events(response) == [{"error": {"message": "The request queue is full."}}, "[DONE]"]


# --- throughput model --------------------------------------------------------------------------------------


def test_slots_queue_and_occupancy():
    """4 slots, 10 ms/token, 20 tokens per request: 8 concurrent requests take two rounds of ~0.2 s."""
    config = SimConfig(max_running_requests=4, decode_s_per_token=0.01, prefill_s_per_token=0.0)
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 20, "ignore_eos": True}}

    async def run(url: str) -> tuple[float, list[str]]:
        async with aiohttp.ClientSession() as session:

            async def one() -> int:
                async with session.post(url + "/generate", json=body) as response:
                    await response.read()
                    return response.status

            async def metrics_midway() -> str:
                await asyncio.sleep(0.1)
                async with session.get(url + "/metrics") as response:
                    return await response.text()

            started = time.monotonic()
            results = await asyncio.gather(*(one() for _ in range(8)), metrics_midway())
            assert results[:8] == [200] * 8
            return time.monotonic() - started, results[8]

    with SimServerThread(config) as sim:
        elapsed, metrics = asyncio.run(run(sim.url))
        stats = sim.stats()
    assert 0.38 <= elapsed < 1.5, elapsed
    assert 'sglang:num_running_reqs{model_name="moonshotai/Kimi-K2.5"} 4.0' in metrics
    assert 'sglang:num_queue_reqs{model_name="moonshotai/Kimi-K2.5"} 4.0' in metrics
    assert 0.6 < stats["slot_occupancy"] <= 1.01, stats
    assert 1.4 < stats["busy_slot_seconds"] < 2.5  # 8 requests x 0.2 s
    assert (stats["running"], stats["queued"]) == (0, 0)


def test_async_runner_start_restart_stop():
    async def scenario() -> None:
        server = await start_sim_server(SimConfig().with_profile("instant"))
        try:
            assert server.url == f"http://127.0.0.1:{server.port}" and server.port > 0
            async with aiohttp.ClientSession() as session:
                async with session.post(server.url + "/generate", json={"input_ids": PROMPT}) as response:
                    assert response.status == 200
                    assert (await response.json())["meta_info"]["prompt_tokens"] == len(PROMPT)
            await server.restart(0.05)
            async with aiohttp.ClientSession() as session, session.get(server.url + "/health") as response:
                assert response.status == 200
            assert server.state.stats.restarts == 1
        finally:
            await server.stop()
        with pytest.raises(aiohttp.ClientConnectorError):
            async with aiohttp.ClientSession() as session:
                await session.get(server.url + "/health")

    asyncio.run(scenario())


# --- outputs -----------------------------------------------------------------------------------------------


def test_ordinary_tokens_follow_a_zipf_law():
    model = OutputModel(SimConfig())
    ids = np.concatenate([model.ordinary_tokens(np.random.default_rng(i), 1000) for i in range(50)])
    assert ids.max() < 163584 and ids.min() >= 0
    rank_of = np.empty(163584, dtype=np.int64)
    rank_of[model.rank_to_id] = np.arange(163584)
    counts = np.bincount(rank_of[ids], minlength=163584)
    assert counts[0] > 3 * counts[9] > 0  # (10)^1.1 ~ 12.6x expected
    assert counts[0] > 0.08 * len(ids)
    assert counts[:100].sum() > 0.4 * len(ids)  # a head of frequent tokens...
    assert (counts > 0).sum() > 5000  # ...and a long tail


def test_frequency_ranks_map_to_ids_as_in_a_bpe_vocabulary():
    mapping = OutputModel(SimConfig()).rank_to_id
    ids = np.arange(163584)
    assert np.array_equal(np.sort(mapping), ids)  # every ordinary id, once
    assert np.array_equal(mapping, OutputModel(SimConfig()).rank_to_id)  # fixed for a vocab_seed...
    assert not np.array_equal(mapping, OutputModel(SimConfig(vocab_seed=1)).rank_to_id)  # ...and seeded by it
    # frequent tokens mostly have small ids, but not in frequency order (Tekken on natural text: rank
    # correlation 0.44, 63% of tokens below id 4,096; a random permutation: 0 and 4%)
    assert 0.35 < np.corrcoef(ids, mapping)[0, 1] < 0.55
    weights = np.arange(1, len(ids) + 1, dtype=np.float64) ** -SimConfig().zipf_exponent
    assert weights[mapping < 4096].sum() / weights.sum() > 0.5
    known = np.arange(0, 163584, 7)  # a real tokenizer's ordinary ids: only they are used
    assert np.array_equal(np.sort(OutputModel(SimConfig(), known[::-1].tolist()).rank_to_id), known)


def test_output_generation_is_well_under_a_millisecond():
    model = OutputModel(SimConfig(output_tokens_min=600, output_tokens_max=600))
    prompt = list(range(2000))
    model.generate(prompt)
    started = time.perf_counter()
    for seed in range(200):
        assert len(model.generate(prompt, sampling_seed=seed, max_new_tokens=None).output_ids) == 600
    per_request = (time.perf_counter() - started) / 200
    assert per_request < 0.002, f"{per_request * 1e3:.3f} ms per 600-token output"


def test_text_is_decoded_with_a_configured_tokenizer(standin_dir, tokenizer):
    config = SimConfig(tokenizer_path=str(standin_dir)).with_profile("instant")
    with SimServerThread(config) as sim:
        answer = requests.post(sim.url + "/generate", json={"input_ids": PROMPT}).json()
        assert answer["text"] and answer["text"] == tokenizer.decode(answer["output_ids"], skip_special_tokens=True)
        text = requests.post(sim.url + "/generate", json={"text": "What is 2+2?"}).json()
        assert text["meta_info"]["prompt_tokens"] == len(tokenizer.encode("What is 2+2?", add_special_tokens=False))


# --- configuration and the command line --------------------------------------------------------------------


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="error_503"):
        FaultRates(error_503=1.5)
    with pytest.raises(ValueError, match="unknown fault kind"):
        FaultRates.from_dict({"error_500": 0.1})
    with pytest.raises(ValueError, match="max_running_requests"):
        SimConfig(max_running_requests=0)
    with pytest.raises(ValueError, match="output tokens"):
        SimConfig(output_tokens_min=10, output_tokens_max=5)
    with pytest.raises(ValueError, match="unknown profile"):
        SimConfig().with_profile("warp")


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_serve_sim_arguments(parser)
    return parser.parse_args(argv)


def test_cli_flags_build_the_config():
    config = config_from_args(
        _parse("--profile", "fast", "--decode-ms-per-token", "5", "--fault-503", "0.1", "--fault-no-think-end", "1")
    )
    assert config.decode_s_per_token == 0.005  # the flag wins over the profile
    assert (config.output_tokens_min, config.output_tokens_max) == (50, 150)  # from the profile
    assert config.faults.error_503 == 0.1 and config.faults.no_think_end == 1.0
    default = config_from_args(_parse())
    assert default == SimConfig(faults=FaultRates())
    custom = config_from_args(_parse("--output-tokens", "10-20", "--prefill-ms-per-1k-tokens", "40"))
    assert (custom.output_tokens_min, custom.output_tokens_max, custom.prefill_s_per_token) == (10, 20, 0.00004)
    assert config_from_args(_parse("--enable-deterministic-inference")).enable_deterministic_inference is True


@pytest.mark.parametrize(
    "argv", [["--fault-drop", "1.5"], ["--fault-echo", "x"], ["--output-tokens", "9-3"], ["--port", "70000"]]
)
def test_cli_rejects_bad_flags(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _parse(*argv)
    assert exit_info.value.code == 2
    assert argv[0] in capsys.readouterr().err


SERVE_SIM = (
    "import sys, argparse; from eagle_datagen.standin.sglang.cli import add_serve_sim_arguments, serve_sim; "
    "p=argparse.ArgumentParser(); add_serve_sim_arguments(p); sys.exit(serve_sim(p.parse_args(sys.argv[1:])))"
)


def test_serve_sim_process_prints_its_url_and_stops_on_sigterm():
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE_SIM, "--port", "0", "--profile", "instant", "--weight-version", "w7"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = process.stdout.readline().strip()
        assert line.startswith("serving SGLang stand-in on http://127.0.0.1:"), line
        url = line.rsplit(" ", 1)[1]
        answer = requests.post(url + "/generate", json={"input_ids": PROMPT}, timeout=10).json()
        assert answer["meta_info"]["weight_version"] == "w7"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert process.stdout.read() == ""  # exactly one line
        assert "Traceback" not in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_serve_sim_on_a_busy_port_fails_with_one_line():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-c", SERVE_SIM, "--port", str(port)], capture_output=True, text=True, timeout=30
        )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"eagle-datagen: error: cannot listen on 127.0.0.1:{port}")
    assert len(result.stderr.strip().splitlines()) == 1


def test_thread_runner_reports_a_busy_port():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(OSError):
            SimServerThread(SimConfig(), port=busy.getsockname()[1]).start()


def test_lose_and_watermark_flags_build_the_config():
    config = config_from_args(_parse("--fault-lose", "0.02", "--lose-after", "50", "--enable-watermark"))
    assert config.faults.lose == 0.02 and config.lose_after == 50 and config.enable_watermark is True
    config = config_from_args(_parse("--fault-loads", "hang", "--stuck-after", "7"))
    assert config.loads_fault == "hang" and config.stuck_after == 7 and config.lost_after == 7


def test_a_lost_request_is_never_answered_health_stays_200_and_loads_do_not_count_it():
    import json
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    from eagle_datagen.standin.sglang.runner import SimServerThread

    with SimServerThread(SimConfig(faults={"lose": 1.0}).with_profile("instant")) as sim:
        body = json.dumps({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 8}, "rid": "x"}).encode()
        post = urllib.request.Request(sim.url + "/generate", data=body, headers={"Content-Type": "application/json"})
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(urllib.request.urlopen, post, timeout=1.5)
            time.sleep(0.5)
            with urllib.request.urlopen(sim.url + "/health", timeout=5) as health:
                assert health.status == 200
            with urllib.request.urlopen(sim.url + "/v1/loads", timeout=5) as loads:
                [load] = json.loads(loads.read())["loads"]
            assert load["num_running_reqs"] + load["num_waiting_reqs"] == 0
            with pytest.raises(TimeoutError):
                waiting.result()
        abort = urllib.request.Request(sim.url + "/abort_request", data=b'{"rid": "x"}', method="POST")
        with urllib.request.urlopen(abort, timeout=5) as answer:
            assert answer.status == 200
        assert sim.stats()["faults"]["lose"] == 1
