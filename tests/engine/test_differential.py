"""serve-sim against the real SGLang server: one corpus of requests (differential_corpus.py) sent to both.

Status codes, content types, body shapes (the JSON type tree with its key sets; the first and last events of a
stream) and `meta_info`'s keys must agree, or the difference is deliberate: listed in DELIBERATE below and in
the table "serve-sim versus the real server" of docs/internals/real-engine.md (a test checks both lists name the same
cases, and that a listed difference still shows, so the table cannot go stale). Values are not compared: the
two run different models. One real server (tiny model, --skip-tokenizer-init) is started for the module.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest
import requests
from cached_tokens_sequence import replay
from differential_corpus import CONTEXT, CORPUS, VOCAB, Answer, Case, shape

from eagle_datagen.standin.sglang import SimConfig, SimServerThread
from eagle_datagen_stack.processes import http_ok
from eagle_datagen_stack.sglang_engine import ServerOptions, SGLangServer, tiny_model_dir
from engine_support import engine_or_skip

from conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.engine]

# Differences kept on purpose: case -> why (the docs table says the same, at more length).
DELIBERATE: dict[str, str] = {
    "POST /flush_cache": "aiohttp always names a content type (text/plain); SGLang's answer names none",
    "sampling_params list, wrong length": "serve-sim answers SGLang's own 400 for the check; the real server "
    "answers 500 and closes the connection, or breaks it first (by timing), which a client would retry as transient",
}
# Endpoints where serve-sim answers a subset of the real keys (the real /server_info holds every server
# argument): each serve-sim key must be there with the same type, and the keys named here (what preflight and
# the smg router's worker registration read) must be present.
SERVER_INFO_READ = {"version", "model_path", "served_model_name", "tokenizer_path", "max_running_requests",
                    "context_length", "max_req_input_len", "weight_version", "reasoning_parser", "tp_size",
                    "dp_size", "is_embedding", "internal_states"}  # fmt: skip
MODEL_INFO_READ = {"model_path", "tokenizer_path", "is_generation", "weight_version", "model_type", "architectures",
                   "has_image_understanding", "has_audio_understanding"}  # fmt: skip
SUBSET: dict[str, set[str]] = {
    "GET /server_info": SERVER_INFO_READ,
    "GET /get_server_info": SERVER_INFO_READ,
    "GET /model_info": MODEL_INFO_READ,
    "GET /get_model_info": MODEL_INFO_READ,
}
SIM_ONLY_KEYS = {"sglang_sim"}  # serve-sim's own settings, under a name real SGLang does not use
DOCS = REPO / "docs" / "internals" / "real-engine.md"


def ids_in(body) -> list[int]:
    """Every id a body would hand the model: its input_ids (or, for a list body, the list itself)."""
    return ids_in_list(body.get("input_ids") if isinstance(body, dict) else body)


def ids_in_list(value) -> list[int]:
    if isinstance(value, list):
        return [i for item in value for i in ids_in_list(item)]
    return [value] if isinstance(value, int) else []


def test_corpus_never_sends_an_id_the_real_server_dies_on():
    for case in CORPUS:
        assert all(0 <= i < VOCAB for i in ids_in(case.body)), case.name


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> SGLangServer:
    """The module's one real server (its log folder: `real.log_dir`)."""
    engine_or_skip()
    options = ServerOptions(context_length=CONTEXT, extra_args=("--enable-metrics",))
    with SGLangServer(tiny_model_dir(), tmp_path_factory.mktemp("differential"), options,
                      name="sglang-differential") as server:  # fmt: skip
        yield server


def answer_alone(case: Case, base: str) -> Answer:
    """The case's answer on a connection of its own: the real server answers some bad bodies with a 500 and then
    closes the connection, so a pooled connection reused by the next case would break that case instead (seen
    in CI under load: `stream string` broken after `sampling_params list, wrong length`)."""
    with requests.Session() as session:
        return Answer.fetch(case, session, base)


@pytest.fixture(scope="module")
def answers(real) -> dict[str, tuple[Answer, Answer]]:
    """Every case sent to serve-sim and to the real server: name -> (serve-sim's answer, the real one)."""
    with SimServerThread(SimConfig(context_length=CONTEXT).with_profile("instant")) as sim:
        results = {}
        for case in CORPUS:
            results[case.name] = (answer_alone(case, sim.url), answer_alone(case, real.url))
        assert http_ok(real.url + "/health"), f"the real server died during the corpus; log: {real.log_dir}"
        dump = os.environ.get("EAGLE_DATAGEN_DIFF_DUMP")  # the real answers, to study a difference offline
        if dump:
            Path(dump).write_text(json.dumps({n: vars(r) for n, (_, r) in results.items()}, indent=1))
        yield results


def fits(sim, real, where: str) -> list[str]:
    """Where serve-sim's value is not a part of the real one: each key of an object there with a fitting value,
    a list's first item fitting the real first item, a scalar of the same JSON type (null fits anything: an
    unset server argument)."""
    if sim is None or real is None:
        return []
    if isinstance(sim, dict) and isinstance(real, dict):
        return [p for key, value in sim.items() if key not in SIM_ONLY_KEYS
                for p in (fits(value, real[key], f"{where}.{key}") if key in real else [f"{where}.{key}: not real"])]
    if isinstance(sim, list) and isinstance(real, list):
        return fits(sim[0], real[0], f"{where}[0]") if sim and real else []
    if shape(sim) != shape(real):
        return [f"{where}: serve-sim {sim!r}, real {real!r}"]
    return []


def subset_differences(name: str, sim: dict, real: dict) -> list[str]:
    return [f"missing {key!r}" for key in sorted(SUBSET[name] - set(sim))] + fits(sim, real, "")


def metric_names(text: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^# TYPE (sglang:\S+)", text, re.MULTILINE)}


def differences(case: Case, sim: Answer, real: Answer) -> list[str]:
    if case.name in SUBSET and sim.status == real.status == 200:
        return subset_differences(case.name, sim.body, real.body)
    if case.name == "GET /metrics" and sim.status == real.status == 200:
        missing = metric_names(sim.body) - metric_names(real.body)
        return [f"serve-sim's metrics {sorted(missing)} are not the real server's"] if missing else []
    s, r = sim.summary(), real.summary()
    return [] if s == r else [f"serve-sim: {json.dumps(s)}", f"real:      {json.dumps(r)}"]


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_serve_sim_answers_as_the_real_server(case, answers):
    sim, real = answers[case.name]
    found = differences(case, sim, real)
    if case.name in DELIBERATE:
        assert found, f"{case.name}: listed as a deliberate difference, but the two now agree: drop it from the table"
    else:
        assert not found, f"{case.name}:\n" + "\n".join(found)


def test_the_docs_table_lists_the_deliberate_differences():
    text = DOCS.read_text()
    section = text.split("## serve-sim versus the real server", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([^`]+)` \|", section, re.MULTILINE))
    assert listed == set(DELIBERATE), f"docs table {sorted(listed)} != DELIBERATE {sorted(DELIBERATE)}"


def test_cached_tokens_follow_the_real_server(real):
    """The same request sequence (cached_tokens_sequence.py) to the real server and to a fresh serve-sim that
    answers as briefly as the tiny model (3 ids, then EOS): `cached_tokens` equal request by request, and equal
    to what SGLang's rules give."""
    tiny_answers = dataclasses.replace(
        SimConfig(context_length=CONTEXT).with_profile("instant"), output_tokens_min=3, output_tokens_max=3
    )
    with SimServerThread(tiny_answers) as sim, requests.Session() as session:
        on_real = replay(session, real.url)
        on_sim = replay(session, sim.url)
    table = "\n".join(f"{r.name:58} prompt {r.prompt_len:4}  real {r.cached}  serve-sim {s.cached}  rule {r.expected}"
                      for r, s in zip(on_real, on_sim, strict=True))  # fmt: skip
    assert [r.cached for r in on_real] == [s.cached for s in on_sim], "cached_tokens differ:\n" + table
    assert [r.cached for r in on_real] == [r.expected for r in on_real], "the real server left the rules:\n" + table
    assert [s.cached for s in on_sim] == [s.expected for s in on_sim], table
    assert [r.details for r in on_real] == [s.details for s in on_sim], "cached_tokens_details differ"
    assert any(r.cached[0] > 0 for r in on_real) and any(r.cached[0] == 0 for r in on_real)  # both kinds seen
