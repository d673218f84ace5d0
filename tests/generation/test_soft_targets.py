"""Soft targets: a run with top_logprobs k asks /generate for the top-k logprobs of every output token (the
stand-in answers as SGLang does), keeps them compact in its checkpoints, validates them and stores them as the
shard's top_logprob_ids / top_logprobs / output_logprobs columns; wrong shapes are quarantined with their reason."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq

from eagle_datagen.generation.stage import SamplingOverrides
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.inference.logprobs import LOGPROBS_KEY, compact, request_fields
from eagle_datagen.inference.samples import SampleRequest
from eagle_datagen.standin.sglang.config import FaultRates, SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from generation_runs import run_options

K = 4


def published(out, run_id: str, kind: str = "data") -> list[dict]:
    return [row for path in sorted(out.glob(f"{kind}/category=*/run={run_id}/*.parquet"))
            for row in pq.read_table(path).to_pylist()]  # fmt: skip


def test_the_request_asks_for_logprobs_only_when_k_is_set():
    common = dict(prompt_id="p", record_id=None, category="c", sample_index=0, prompt_ids=[1, 2], model="m",
                  sampling={"temperature": 1.0})  # fmt: skip
    plain, soft = SampleRequest.create(**common), SampleRequest.create(**common, top_logprobs=K)
    assert plain.sample_id == soft.sample_id  # the same sample: the same tokens, with or without them
    assert "return_logprob" not in plain.body()
    asked = {"return_logprob": True, "top_logprobs_num": K, "return_text_in_logprobs": False}
    assert soft.body() == plain.body() | asked and request_fields(K) == asked


def test_a_run_stores_the_top_k_logprobs_of_every_output_token(tmp_path):
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        options = run_options(tmp_path, [sim.url], run_id="soft", prompts=12, sampling=SamplingOverrides(
            max_new_tokens=1000, top_logprobs=K))  # fmt: skip
        summary = run_generation(options)
    assert summary.published["data"] == 12
    out = tmp_path / "out"
    rows = published(out, "soft")
    for row in rows:
        n = len(row["output_ids"])
        assert len(row["output_logprobs"]) == n and len(row["top_logprob_ids"]) == len(row["top_logprobs"]) == n * K
        ids = np.asarray(row["top_logprob_ids"]).reshape(n, K)
        top = np.asarray(row["top_logprobs"], np.float32).reshape(n, K)
        assert (np.diff(top, axis=1) <= 0).all()  # most likely first
        hit = ids == np.asarray(row["output_ids"])[:, None]
        assert hit.sum(axis=1).max() == 1  # the sampled token at most once in its top k
        positions, ranks = np.nonzero(hit)
        assert np.array_equal(top[positions, ranks], np.asarray(row["output_logprobs"], np.float32)[positions])
        assert len(positions) > n // 2  # most sampled tokens are in their top k
    # checkpoints hold the compact form, not SGLang's nested lists
    chunk = next(out.glob("checkpoints/run=soft/shard=*/chunk-*.jsonl"))
    meta = json.loads(chunk.read_text().splitlines()[0])["meta_info"]
    assert LOGPROBS_KEY in meta and "output_top_logprobs" not in meta
    # the manifest's sampling per category names k through the plan; the columns are null in a plain run
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        run_generation(run_options(tmp_path / "plain", [sim.url], run_id="plain", prompts=3))
    assert {row["top_logprobs"] is None for row in published(tmp_path / "plain" / "out", "plain")} == {True}


def test_logprobs_of_the_wrong_shape_are_quarantined_with_their_reason(tmp_path):
    faulty = SimConfig(faults=FaultRates(logprobs_shape=0.5), fault_seed=3).with_profile("instant")
    with SimServerThread(faulty) as sim:
        options = run_options(tmp_path, [sim.url], run_id="short", prompts=12, sampling=SamplingOverrides(
            max_new_tokens=1000, top_logprobs=K))  # fmt: skip
        summary = run_generation(options)
        injected = sim.stats()["faults"]["logprobs_shape"]
    quarantined = published(tmp_path / "out", "short", "quarantine")
    assert injected and summary.published["reasons"] == {"logprobs_shape": injected}
    assert {r["reject_reason"] for r in quarantined} == {"logprobs_shape"}
    assert all("top-k positions for" in r["reject_detail"] for r in quarantined)
    assert all(r["top_logprob_ids"] is not None for r in quarantined)  # what the server sent, kept
    assert len(published(tmp_path / "out", "short")) == 12 - injected


def test_compact_keeps_what_the_server_sent():
    meta = {
        "id": "x",
        "output_token_logprobs": [[-0.1, 5, None], [None, 6, None]],
        "output_top_logprobs": [[[-0.1, 5, None], [None, 9, None]], None],
        "input_token_logprobs": [],
        "output_token_logprobs_length": 2,
    }
    kept = compact(meta)
    assert set(kept) == {"id", LOGPROBS_KEY}
    assert compact({"id": "x"}) == {"id": "x"}
    assert compact({"output_token_logprobs": "nope", "output_top_logprobs": []})[LOGPROBS_KEY] == {
        "malformed": "output_token_logprobs and output_top_logprobs must both be lists"
    }


def test_each_step_of_a_conversation_carries_its_own_soft_targets(tmp_path):
    """turns: each: every step asks for the logprobs, and every step's row holds them (the steps' own outputs)."""
    import dataclasses

    from conversation_records import multi_turn_record
    from eagle_datagen.tokenization.stage import TokenizeOptions

    from conftest import write_jsonl

    src = write_jsonl(tmp_path / "c.jsonl", [multi_turn_record(3)])
    config = SimConfig(tokenizer_path="standin:kimi-k2.5").with_profile("instant")
    with SimServerThread(config) as sim:
        options = dataclasses.replace(
            run_options(tmp_path, [sim.url], run_id="steps", prompts=1),
            prompts=TokenizeOptions(output=str(tmp_path / "out"), tokenizer="standin:kimi-k2.5",
                                    trust_remote_code=True, prompts=[str(src)]),  # fmt: skip
            sampling=SamplingOverrides(max_new_tokens=1000, turns="each", top_logprobs=K),
        )
        run_generation(options)
    rows = published(tmp_path / "out", "steps")
    assert sorted(r["turn_index"] for r in rows) == [0, 1, 2]
    assert all(len(r["top_logprob_ids"]) == K * len(r["output_ids"]) for r in rows)
