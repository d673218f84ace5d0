"""`eagle-datagen run` against one real SGLang server (CPU, tiny reasoning model): the published rows are
exactly what the server received and returned, preflight reads the real endpoints, a SIGKILLed server is
restarted and the rerun stores every sample once, and an out-of-vocab prompt never reaches the server."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time

import pytest
import requests

from eagle_datagen.inference.preflight import preflight
from eagle_datagen_stack.sglang_engine import ServerOptions
from engine_support import (
    IM_END,
    THINK_END,
    THINK_START,
    assert_rows_match_server,
    published_rows,
    real_servers,
    sample_id_of,
)
from generation_runs import checkpointed_samples, run_cli

from conftest import user_record, write_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.engine]

PROMPTS, SAMPLES = 12, 2
MAX_NEW_TOKENS = 96  # the tiny model writes ~60 tokens on average: some samples run past this
# What the tiny model's chain may produce besides a valid sample (docs/internals/real-engine.md).
MODEL_REJECTS = {"finish_length", "missing_think_end"}
META_KEYS = {"id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "weight_version",
             "e2e_latency"}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    with real_servers(tmp_path_factory.mktemp("sglang-logs"), ServerOptions()) as [(server, proxy)]:
        yield server, proxy


def run_args(tmp_path, proxy_url: str, run_id: str, *extra: str) -> tuple[list[str], object]:
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"question {i}: " + "why " * i) for i in range(PROMPTS)])
    out = tmp_path / "out"
    args = ["--prompts", str(src), "--output", str(out), "--run-id", run_id, "--shard-size", "6",
            "--samples-per-prompt", str(SAMPLES), "--max-new-tokens", str(MAX_NEW_TOKENS),
            "--draft-vocab-size", "256", "--sglang-url", proxy_url, *extra]
    return args, out


def test_run_publishes_what_the_server_returned(engine, tmp_path):
    server, proxy = engine
    proxy.clear()
    args, out = run_args(tmp_path, proxy.url, "e2e")
    result = run_cli(args, timeout_s=400)
    assert result.returncode == 0, result.stderr[-3000:]

    rows = published_rows(out, "e2e")
    every = rows["data"] + rows["quarantine"]
    assert len(every) == len({r["sample_id"] for r in every}) == PROMPTS * SAMPLES
    assert_rows_match_server(every, proxy.exchanges)
    for row in rows["data"]:
        assert row["prompt_ids"][-1] == THINK_START
        assert row["output_ids"][-1] == IM_END and row["output_ids"].count(THINK_END) == 1
        assert row["finish_reason"] == "stop"
    assert {r["reject_reason"] for r in rows["quarantine"]} <= MODEL_REJECTS
    assert len(rows["data"]) >= PROMPTS * SAMPLES // 2
    assert (out / "manifests" / "run=e2e.json").exists()

    answered = [e for e in proxy.exchanges if e.status == 200]
    assert all(META_KEYS <= set(e.meta_info) for e in answered)
    assert all(e.meta_info["id"] == e.rid for e in answered)  # the rid is the server's request id
    assert all(e.meta_info["weight_version"] == "default" for e in answered)
    # sampling_seed differs per sample; outputs differ too (the seed itself is not honoured: no deterministic mode)
    assert len({tuple(r["output_ids"]) for r in every}) > len(every) // 2


def test_preflight_reads_the_real_server(engine, loaded_tokenizer, kimi_profile):
    server, _ = engine
    tok = loaded_tokenizer.tokenizer
    text = tok.apply_chat_template([{"role": "user", "content": "hello"}], tokenize=False, add_generation_prompt=True)
    ids = tok.encode(text, add_special_tokens=False)
    canary = {"input_ids": ids, "sampling_params": {"max_new_tokens": 2048, "temperature": 1.0, "top_p": 0.95},
              "rid": "test-canary"}
    [info] = asyncio.run(preflight([server.url], kimi_profile, "moonshotai/Kimi-K2.5", canary, wait_s=10))
    assert info.model_path.endswith("/Kimi-K2.5")
    assert info.version == "0.5.23"
    assert info.weight_version == "default"
    assert info.max_running_requests == ServerOptions().max_running_requests
    assert info.warnings == []
    server_info = requests.get(f"{server.url}/server_info", timeout=10).json()
    assert server_info["reasoning_parser"] is None and server_info["enable_deterministic_inference"] is False


def test_both_modes_reach_the_real_server_as_rendered(engine, tmp_path):
    """A mix against the real server: every row carries its mode, an instant prompt reached the server ending in
    <think></think> (thinking=False, rendered by the client) and a thinking one in <think>, and the rows are what
    the server returned. The tiny model was not trained on instant prompts: its instant answers may hold a think
    token and be quarantined (think_token_in_instant), which the rates below let the run publish."""
    server, proxy = engine
    proxy.clear()
    args, out = run_args(tmp_path, proxy.url, "modes", "--mode", "mix", "--instant-fraction", "0.5", "--seed", "1",
                         "--max-rate", "think_token_in_instant=1", "--max-rate", "missing_think_end=1",
                         "--max-rate", "finish_length=1", "--max-rate", "empty_answer=1")
    result = run_cli(args, timeout_s=400)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = published_rows(out, "modes")
    every = rows["data"] + rows["quarantine"]
    assert len(every) == len({r["sample_id"] for r in every}) == PROMPTS * SAMPLES
    assert {r["mode"] for r in every} == {"thinking", "instant"}
    assert_rows_match_server(every, proxy.exchanges)
    for row in every:
        tail = [THINK_START, THINK_END] if row["mode"] == "instant" else [THINK_START]
        assert row["prompt_ids"][-len(tail) - 1 :] == [163601, *tail]
    sent = {tuple(e.input_ids[-2:]) for e in proxy.exchanges if e.input_ids}
    assert (THINK_START, THINK_END) in sent and (163601, THINK_START) in sent
    reasons = {r["reject_reason"] for r in rows["quarantine"]}
    assert reasons <= MODEL_REJECTS | {"think_token_in_instant", "empty_answer", "repetition_loop"}
    manifest = json.loads((out / "manifests" / "run=modes.json").read_text())
    assert sum(c["samples"] for c in manifest["counts"]["modes"].values()) == PROMPTS * SAMPLES


def test_server_sigkilled_mid_run_then_restarted(engine, tmp_path):
    """The server dies mid-run (SIGKILL of its process group): the run gives up on it, the server comes back
    on the same port, the rerun with the same run id finishes, and every sample is stored exactly once."""
    server, proxy = engine
    proxy.clear()
    args, out = run_args(tmp_path, proxy.url, "k", "--concurrency", "4", "--checkpoint-every", "1",
                         "--give-up-after", "10", "--max-attempts", "50")
    total = PROMPTS * SAMPLES
    killed = threading.Event()

    def kill_when_a_third_is_done() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not killed.is_set():
            if checkpointed_samples(out, "k") >= total // 3:
                server.kill()
                killed.set()
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=kill_when_a_third_is_done, daemon=True)
    watcher.start()
    first = run_cli(args, timeout_s=400)
    killed.set()
    watcher.join(timeout=10)
    assert first.returncode == 3, f"the run should leave the rest for a rerun: {first.stderr[-3000:]}"
    done_before = checkpointed_samples(out, "k")
    assert total // 3 <= done_before < total
    assert proxy.refused > 0  # the client did find the server gone

    server.start()  # same port: the proxy and the run's URL are unchanged
    second = run_cli(args, timeout_s=400)
    assert second.returncode == 0, second.stderr[-3000:]
    rows = published_rows(out, "k")
    every = rows["data"] + rows["quarantine"]
    assert len(every) == total and len({r["sample_id"] for r in every}) == total
    assert_rows_match_server(every, proxy.exchanges)


def test_top_logprobs_are_stored_as_the_real_server_returned_them(engine, tmp_path):
    """--top-logprobs K against SGLang 0.5.23: every answer carries k top entries and the sampled one per output
    token (meta_info, as the proxy saw it), and the published rows hold exactly those, compacted into columns."""
    server, proxy = engine
    proxy.clear()
    k = 4
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"soft question {i}: " + "why " * i) for i in range(6)])
    out = tmp_path / "out"
    args = ["--prompts", str(src), "--output", str(out), "--run-id", "soft", "--top-logprobs", str(k),
            "--max-new-tokens", str(MAX_NEW_TOKENS), "--draft-vocab-size", "16", "--sglang-url", proxy.url]
    result = run_cli(args, timeout_s=400)
    assert result.returncode == 0, result.stderr[-3000:]
    answered = {sample_id_of(e.rid): e for e in proxy.exchanges if e.status == 200}
    rows = published_rows(out, "soft")
    every = rows["data"] + rows["quarantine"]
    assert len(every) == 6 and {r["reject_reason"] for r in rows["quarantine"]} <= MODEL_REJECTS
    for row in every:
        meta = answered[row["sample_id"]].meta_info
        tops, own = meta["output_top_logprobs"], meta["output_token_logprobs"]
        n = len(row["output_ids"])
        assert len(tops) == len(own) == n and {len(position) for position in tops} == {k}
        assert [t for _, t, _ in own] == row["output_ids"]
        assert row["top_logprob_ids"] == [t for position in tops for _, t, _ in position]
        assert row["top_logprobs"] == pytest.approx([lp for position in tops for lp, _, _ in position], rel=1e-6)
        assert row["output_logprobs"] == pytest.approx([lp for lp, _, _ in own], rel=1e-6)


def _tokenizer_with_reserved_ids(standin_dir, target):
    """The stand-in has the real Kimi-K2.5 tokenizer's shape: ids up to 163,841 (two reserved ids above the
    model's vocab_size 163,840). Returns a copy of it (remote code, loaded with --trust-remote-code) and the text
    of id 163841."""
    shutil.copytree(standin_dir, target)
    config = json.loads((target / "tokenizer_config.json").read_text(encoding="utf-8"))
    return target, config["added_tokens_decoder"]["163841"]["content"]


def test_out_of_vocab_prompt_never_reaches_the_server(engine, tmp_path, standin_dir):
    """An id >= the model's vocab_size kills a real SGLang server: such a prompt must be rejected at tokenize
    time with its own reason, and the others generated. Last in this module: if the id did get through, the
    server is dead afterwards."""
    server, proxy = engine
    proxy.clear()
    tok_dir, reserved = _tokenizer_with_reserved_ids(standin_dir, tmp_path / "tok")
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"fine question {i}") for i in range(3)]
                      + [user_record(f"a reserved token {reserved} inside", id="oov")])
    out = tmp_path / "out"
    args = ["--prompts", str(src), "--output", str(out), "--run-id", "oov", "--tokenizer", str(tok_dir),
            "--allow-special-token-text", "--max-reject-rate", "0.5", "--max-new-tokens", str(MAX_NEW_TOKENS),
            "--draft-vocab-size", "16", "--sglang-url", proxy.url]
    result = run_cli(args, timeout_s=300)
    assert all(max(e.input_ids) < 163_840 for e in proxy.exchanges)
    assert requests.get(f"{server.url}/health", timeout=10).status_code == 200
    assert result.returncode == 0, result.stderr[-3000:]
    rejects = [json.loads(line) for line in (out / "rejects" / "run=oov" / "rejects.jsonl").read_text().splitlines()]
    assert [r.get("record_id") or r.get("id") for r in rejects] == ["oov"], rejects
    assert "vocab" in json.dumps(rejects[0]).lower()
    rows = published_rows(out, "oov")
    assert len(rows["data"] + rows["quarantine"]) == 3
