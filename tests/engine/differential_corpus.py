"""The requests of the differential contract test (test_differential.py): one corpus, sent as it is to
serve-sim and to a real SGLang server, and how an answer is reduced to what must agree between them.

Every id sent is below the tiny model's vocab size (163,840): an id at or above it kills the real server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import requests

VOCAB = 163840
CONTEXT = 4096  # both servers run with this context length
PROMPT = [220, 17, 10, 17, 30, 163586, 163588, 69702, 163601, 163606]  # "What is 2+2?" rendered by the stand-in
SHORT = {"max_new_tokens": 6}
LOGPROBS = {"return_logprob": True, "top_logprobs_num": 3, "return_text_in_logprobs": False}


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    body: Any = None  # None: GET (except for POST-only paths); bytes: sent raw
    method: str = "POST"
    stream: bool = False

    def send(self, session: requests.Session, base: str) -> requests.Response:
        url = base + self.path
        if self.method == "GET":
            return session.get(url, timeout=120)
        if isinstance(self.body, bytes):
            return session.post(url, data=self.body, headers={"Content-Type": "application/json"}, timeout=120)
        return session.post(url, json=self.body, timeout=120, stream=self.stream)


def gen(name: str, body: Any, stream: bool = False) -> Case:
    return Case(name, "/generate", body, stream=stream)


def single(**sampling: Any) -> dict[str, Any]:
    return {"input_ids": PROMPT, "sampling_params": {**SHORT, **sampling}}


ENDPOINTS = [
    Case(f"GET {path}", path, method="GET")
    for path in (
        "/health",
        "/health_generate",
        "/server_info",
        "/get_server_info",
        "/model_info",
        "/get_model_info",
        "/get_weight_version",
        "/v1/models",
        "/metrics",
        "/loads",  # smg's load monitor polls these two every 10 s
        "/v1/loads",
    )
] + [Case("POST /flush_cache", "/flush_cache", body={})]

GENERATE = [
    gen("single", single()),
    gen("single, default sampling", {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 4}}),
    gen("single, no sampling_params", {"input_ids": PROMPT[:3] + [163606]}),
    gen("batch", {"input_ids": [PROMPT, PROMPT[:5]], "sampling_params": SHORT}),
    gen("batch, sampling_params list", {"input_ids": [PROMPT, PROMPT], "sampling_params": [SHORT, SHORT]}),
    gen("n=2", single(n=2)),
    gen("batch, n=2", {"input_ids": [PROMPT, PROMPT[:5]], "sampling_params": {**SHORT, "n": 2}}),
    gen("stream", {**single(), "stream": True}, stream=True),
    gen("stream, batch", {"input_ids": [PROMPT, PROMPT], "sampling_params": SHORT, "stream": True}, stream=True),
    gen("rid string", {**single(), "rid": "diff-rid-1"}),
    gen("rid list, batch", {"input_ids": [PROMPT, PROMPT], "sampling_params": SHORT, "rid": ["d-a", "d-b"]}),
    gen("unknown top-level key", {**single(), "bogus_top_level": 1}),
    gen("sampling_seed", single(sampling_seed=42, temperature=1.0)),
    gen("greedy", single(temperature=0.0)),
    gen("ignore_eos", single(ignore_eos=True)),
    gen("stop_token_ids in vocab", single(stop_token_ids=[163586])),
    gen("stop_token_ids outside the vocab", single(stop_token_ids=[VOCAB + 10])),
    gen("max_new_tokens 0", single(max_new_tokens=0)),
    gen("top_k -1", single(top_k=-1)),
    # soft targets: the top-k logprobs of every output token, as the pipeline asks for them (inference/logprobs.py)
    gen("return_logprob, top_logprobs_num 3", {**single(), **LOGPROBS}),
    gen("return_logprob, batch", {"input_ids": [PROMPT, PROMPT[:5]], "sampling_params": SHORT, **LOGPROBS}),
    gen("skip_special_tokens false", single(skip_special_tokens=False)),
    # invalid values
    gen("unknown sampling key", single(bogus_key=1)),
    gen("sampling key seed", single(seed=1)),
    gen("temperature -1", single(temperature=-1.0)),
    gen("top_p 0", single(top_p=0.0)),
    gen("top_p 1.5", single(top_p=1.5)),
    gen("top_k 0", single(top_k=0)),
    gen("top_k -2", single(top_k=-2)),
    gen("min_p 1.5", single(min_p=1.5)),
    gen("max_new_tokens -1", single(max_new_tokens=-1)),
    gen("n 0", single(n=0)),
    gen("stream, temperature -1", {**single(temperature=-1.0), "stream": True}, stream=True),
    gen("stream, unknown sampling key", {**single(bogus_key=1), "stream": True}, stream=True),
    # wrong types
    gen("temperature string", single(temperature="hot")),
    gen("max_new_tokens string", single(max_new_tokens="8")),
    gen("max_new_tokens float", single(max_new_tokens=8.5)),
    gen("top_k float", single(top_k=2.5)),
    gen("ignore_eos string", single(ignore_eos="yes")),
    gen("stop_token_ids string", single(stop_token_ids="163586")),
    gen("input_ids string", {"input_ids": "abc", "sampling_params": SHORT}),
    gen("input_ids floats", {"input_ids": [1.5, 2.5], "sampling_params": SHORT}),
    gen("input_ids mixed batch", {"input_ids": [PROMPT, 5], "sampling_params": SHORT}),
    gen("sampling_params string", {"input_ids": PROMPT, "sampling_params": "greedy"}),
    gen("sampling_params list, single", {"input_ids": PROMPT, "sampling_params": [SHORT]}),
    gen("sampling_params list, wrong length", {"input_ids": [PROMPT, PROMPT], "sampling_params": [SHORT]}),
    gen("stream string", {**single(), "stream": "yes"}),
    gen("rid integer", {**single(), "rid": 7}),
    gen("rid list, wrong length", {"input_ids": [PROMPT, PROMPT], "sampling_params": SHORT, "rid": ["only-one"]}),
    gen("body a list", [PROMPT]),
    gen("body not JSON", b"{not json"),
    # missing, empty and too-long inputs
    gen("no input", {"sampling_params": SHORT}),
    gen("empty input_ids", {"input_ids": [], "sampling_params": SHORT}),
    gen("batch with an empty prompt", {"input_ids": [PROMPT, []], "sampling_params": SHORT}),
    gen("input as long as the context", {"input_ids": [220] * CONTEXT, "sampling_params": SHORT}),
    gen("input past the context", {"input_ids": [220] * (CONTEXT + 10), "sampling_params": SHORT}),
    gen("input + max_new_tokens past the context", {"input_ids": [220] * (CONTEXT - 4), "sampling_params": SHORT}),
    gen("text and input_ids", {"text": "hi", "input_ids": PROMPT, "sampling_params": SHORT}),
]

CORPUS = ENDPOINTS + GENERATE


# --- what must agree --------------------------------------------------------------------------------------


# meta_info values whose shape depends on the output or the cache, not on the contract: compared by presence
# (the prefix-cache work compares cached_tokens' values).
BY_PRESENCE = {"cached_tokens_details": "<null or object>", "finish_reason": "<null or object with type>"}
# meta_info keys that SGLang sends or leaves out by timing: decode_throughput is missing from an answer whose
# decode SGLang did not time (seen on the second answer of an `n: 2` request)
BY_TIMING = frozenset({"decode_throughput"})


def shape(value: Any) -> Any:
    """The JSON type tree: objects keep their keys, a list is the sorted set of its items' shapes, a scalar is
    its type's name (an int is a number too, where a float would be: 1 and 1.0 differ only in JSON text)."""
    if isinstance(value, dict):
        if "meta_info" in value and isinstance(value["meta_info"], dict):
            meta = {k: BY_PRESENCE.get(k, v) for k, v in value["meta_info"].items() if k not in BY_TIMING}
            value = {**value, "meta_info": meta}
        return {key: shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        items = {json.dumps(shape(item), sort_keys=True) for item in value}
        return ["list", *sorted(items)]
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if value is None:
        return "null"
    return type(value).__name__


@dataclass
class Answer:
    """One answer reduced to what the contract test compares."""

    status: int
    content_type: str
    body: Any = field(repr=False)  # parsed JSON, the list of SSE events, or the text

    @classmethod
    def fetch(cls, case: Case, session: requests.Session, base: str) -> Answer:
        """The case's answer from the server at `base`; a connection that breaks is an answer too."""
        try:
            return cls.of(case.send(session, base))
        except requests.RequestException as exc:
            return cls(0, "<connection broken>", type(exc).__name__)

    @classmethod
    def of(cls, response: requests.Response) -> Answer:
        kind = response.headers.get("Content-Type", "").split(";")[0].strip()
        text = response.text
        if kind == "text/event-stream":
            events = [c.removeprefix("data: ") for c in text.split("\n\n") if c.strip()]
            body: Any = [e if e == "[DONE]" else json.loads(e) for e in events]
        elif kind == "application/json":
            body = json.loads(text) if text else None
        else:
            body = text
        return cls(response.status_code, kind, body)

    def summary(self) -> dict[str, Any]:
        body = self.body
        if self.content_type == "text/event-stream":
            body = [e if e == "[DONE]" else shape(e) for e in body]
            # how many partial events come before the final one depends on the output's length and on timing (a
            # short answer on a busy machine arrives in one event): compare the final event and [DONE]
            body = body[-2:]
        elif self.content_type == "application/json":
            body = shape(body)
        elif self.status:
            body = "<text>" if body else "<empty>"
        return {"status": self.status, "content_type": self.content_type or "<none>", "shape": body}
