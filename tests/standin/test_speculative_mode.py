"""The stand-in's speculative mode: /server_info reports a drafter as SGLang 0.5.23 does, every finished answer's
meta_info carries SGLang's per-request metrics, consistent with each other and known from the request alone."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
import requests

from eagle_datagen.standin.sglang import SimConfig, SimServerThread
from eagle_datagen.standin.sglang.cli import add_serve_sim_arguments, config_from_args
from eagle_datagen.standin.sglang.speculative import SpeculativeConfig, spec_metrics

PROMPT = [220, 17, 10, 17, 30, 163586, 163588, 69702, 163601, 163606]


@pytest.mark.parametrize("length", [2, 3, 7, 50, 400])
@pytest.mark.parametrize("rate", [0.0, 0.4, 0.9, 1.0])
def test_metrics_hold_together_as_sglang_computes_them(length, rate):
    spec = SpeculativeConfig(accept_rate=rate)
    m = spec_metrics(spec, 1234, length)
    histogram = m["spec_correct_drafts_histogram"]
    assert sum(histogram) == m["spec_verify_ct"]
    assert sum(k * n for k, n in enumerate(histogram)) == m["spec_num_correct_drafts"]
    assert m["spec_num_proposed_drafts"] == m["spec_verify_ct"] * (spec.num_draft_tokens - 1)
    assert m["spec_accept_rate"] == m["spec_num_correct_drafts"] / m["spec_num_proposed_drafts"]
    assert m["spec_accept_length"] == length / m["spec_verify_ct"]  # the bonus token included
    # the prefill gives the first token, each step its accepted drafts plus the bonus
    assert m["spec_num_correct_drafts"] + m["spec_verify_ct"] == length - 1
    assert len(histogram) <= spec.num_steps + 1 and histogram[-1]
    if rate == 0.0:
        assert m["spec_accept_length"] == pytest.approx(length / (length - 1))


def test_a_single_token_answer_has_no_verify_step_and_no_metrics():
    assert spec_metrics(SpeculativeConfig(), 5, 1) == {} == spec_metrics(SpeculativeConfig(), 5, 0)


def test_metrics_depend_on_the_seed_and_a_higher_rate_accepts_more_of_the_same_draws():
    low, high = SpeculativeConfig(accept_rate=0.5), SpeculativeConfig(accept_rate=0.8)
    assert spec_metrics(low, 7, 300) == spec_metrics(low, 7, 300)
    assert spec_metrics(low, 7, 300) != spec_metrics(low, 8, 300)
    for seed in range(40):
        assert spec_metrics(high, seed, 300)["spec_accept_length"] > spec_metrics(low, seed, 300)["spec_accept_length"]


def test_a_speculative_server_reports_its_drafter_and_answers_with_the_known_metrics():
    spec = SpeculativeConfig(draft_model_path="/models/drafter", num_steps=5, num_draft_tokens=6, accept_rate=0.6)
    config = dataclasses.replace(SimConfig().with_profile("instant"), speculative=spec)
    with SimServerThread(config) as sim, requests.Session() as http:
        info = http.get(sim.url + "/server_info", timeout=10).json()
        assert info["speculative_algorithm"] == "EAGLE3" and info["speculative_draft_model_path"] == "/models/drafter"
        assert (
            info["speculative_num_steps"],
            info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"],
        ) == (
            5,
            1,
            6,
        )
        body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 200, "sampling_seed": 99}, "rid": "x"}
        answer = http.post(sim.url + "/generate", json=body, timeout=30).json()
        meta = answer["meta_info"]
        assert {k: v for k, v in meta.items() if k.startswith("spec_")} == spec_metrics(
            spec, 99, meta["completion_tokens"]
        )
    with SimServerThread(SimConfig().with_profile("instant")) as plain, requests.Session() as http:
        assert http.get(plain.url + "/server_info", timeout=10).json()["speculative_algorithm"] is None
        body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 50}}
        meta = http.post(plain.url + "/generate", json=body, timeout=30).json()["meta_info"]
        assert not any(key.startswith("spec_") for key in meta)


def test_serve_sim_flags_set_the_speculative_mode():
    parser = argparse.ArgumentParser()
    add_serve_sim_arguments(parser)
    config = config_from_args(
        parser.parse_args(
            ["--speculative-algorithm", "EAGLE3", "--speculative-accept-rate", "0.3", "--speculative-num-steps", "2"]
        )
    )
    assert config.speculative == SpeculativeConfig(num_steps=2, accept_rate=0.3)
    assert config_from_args(parser.parse_args([])).speculative is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--speculative-accept-rate", "1.5"])
