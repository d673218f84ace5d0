"""SGLang's /generate request contract: parsing, validation (with SGLang's own messages) and response bodies.

Four kinds of failure, as SGLang 0.5.23 produces them (checked against the real server by
tests/engine/test_differential.py):
- `SchemaError`: `sampling_params` (or `stream`) does not fit its schema (an unknown key, a wrong type) ->
  400 `{"error": "unknown field ..."}` / `{"error": "invalid type: ..."}`, before any stream starts;
- `BadRequest`: SGLang raises ValueError -> 400 `{"error": {"message": ...}}` (in a stream: a 200, then a
  `data: {"error": {"message", "type", "code", "retryable"}}` event);
- `InvalidBody`: the body does not fit GenerateReqInput's types -> 400 `{"object": "error", ...}`;
- `UncaughtError`: SGLang does not catch it (a list of sampling_params for one prompt) -> 500
  `Internal Server Error`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.logprobs import LogprobRequest

# SGLang 0.5.23's sampling_params schema, in its order (the order its "unknown field" message lists them).
SAMPLING_KEY_ORDER = (
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k", "min_p",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n", "json_schema", "regex",
    "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
    "stream_interval", "logit_bias", "sampling_seed", "custom_params", "beam_width", "watermark", "choice",
)  # fmt: skip
SAMPLING_KEYS = frozenset(SAMPLING_KEY_ORDER)
# The schema's types for the keys the stand-in checks: what its "invalid type" message says it expected.
FLOAT_KEYS = ("temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty")
INT_KEYS = ("max_new_tokens", "top_k", "min_new_tokens", "n", "stream_interval", "sampling_seed")
BOOL_KEYS = ("ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim")
TOP_K_ALL = 1 << 30
SAMPLING_EPS = 1e-6


class SchemaError(Exception):
    """The sampling schema refused the body: HTTP 400 with `{"error": "<message>"}`, even for a stream."""

    def body(self) -> dict[str, Any]:
        return {"error": str(self)}


class BadRequest(Exception):
    """SGLang's ValueError: HTTP 400 with `{"error": {"message": ...}}`."""

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self)}}

    def stream_event(self) -> dict[str, Any]:
        """The same error as the event of a stream that has already answered 200."""
        return {"error": {"message": str(self), "type": "invalid_request_error", "code": 400, "retryable": False}}


class InvalidBody(Exception):
    """The request body does not fit GenerateReqInput: FastAPI's validation error, answered 400."""

    def body(self) -> dict[str, Any]:
        return {"object": "error", "message": str(self), "type": "Bad Request", "param": None, "code": 400}


class UncaughtError(Exception):
    """An error SGLang does not catch: HTTP 500 with the plain-text body `Internal Server Error`."""


@dataclass(frozen=True)
class Sampling:
    """The sampling parameters the stand-in acts on (the others are validated, then ignored)."""

    max_new_tokens: int | None = 128
    min_new_tokens: int = 0
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    sampling_seed: int | None = None
    n: int = 1
    stream_interval: int | None = None


@dataclass(frozen=True)
class GenerateItem:
    index: int  # position in the response list (and `index` in a batch stream's events)
    prompt_ids: list[int]
    sampling: Sampling
    rid: str
    sample_index: int  # which of the n samples of its prompt
    logprobs: LogprobRequest | None = None  # return_logprob: the answer's meta_info carries them (logprobs.py)


@dataclass(frozen=True)
class GenerateRequest:
    items: list[GenerateItem]
    single: bool  # answer one object rather than a list
    stream: bool


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _ids_list(value: Any) -> bool:
    return isinstance(value, list) and all(is_int(v) for v in value)


def parse_generate(body: Any, config: SimConfig, encode: Callable[[str], list[int]] | None = None) -> GenerateRequest:
    """Check a /generate body in SGLang's order and expand it into one item per prompt and sample."""
    if not isinstance(body, dict):
        raise InvalidBody("the request body must be a JSON object (GenerateReqInput)")
    stream = body.get("stream")
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise SchemaError(f"invalid type: {_serde_kind(stream)}, expected a boolean")
    rid = body.get("rid")
    if rid is not None and not isinstance(rid, str | list):
        raise InvalidBody(f"rid: Input should be a valid string or a valid list, got {rid!r}")
    params = body.get("sampling_params")
    if params is None:
        params = {}
    for raw in params if isinstance(params, list) else [params]:
        if isinstance(raw, dict):
            check_sampling_schema(raw)
    logprobs = _logprob_request(body)
    prompts, single = _prompts(body, encode)
    if isinstance(params, dict):
        per_prompt = [params] * len(prompts)
    elif isinstance(params, list) and single:
        raise UncaughtError("a list of sampling_params for a single prompt")
    elif isinstance(params, list) and all(isinstance(p, dict) for p in params):
        if len(params) != len(prompts):
            raise BadRequest("The length of sampling_params should be equal to the batch size.")
        per_prompt = params
    else:
        raise InvalidBody("sampling_params must be an object (or, for a batch, a list of objects)")
    for ids in prompts:
        _check_prompt(ids, config)
    samplings = []
    for ids, raw in zip(prompts, per_prompt, strict=True):
        sampling = parse_sampling(raw, config)
        _check_budget(ids, sampling, config)
        samplings.append(sampling)
    n = samplings[0].n
    if any(s.n != n for s in samplings):
        raise BadRequest("The parallel_sample_num should be the same for all samples in sample params.")
    single = single and n == 1
    rids = _rids(rid, len(prompts), single)
    items = []
    for p, (ids, sampling) in enumerate(zip(prompts, samplings, strict=True)):
        for j in range(n):
            # SGLang gives each of n samples a fresh rid
            rid = rids[p] if n == 1 else uuid.uuid4().hex
            items.append(GenerateItem(len(items), ids, sampling, rid, j, logprobs))
    return GenerateRequest(items, single, stream)


def _logprob_request(body: dict[str, Any]) -> LogprobRequest | None:
    """`return_logprob` with `top_logprobs_num`, `return_text_in_logprobs` and `logprob_start_len` (one value for
    the whole body: the stand-in does not take SGLang's per-prompt lists of them)."""
    asked = body.get("return_logprob")
    if asked is None or asked is False:
        return None
    if not isinstance(asked, bool):
        raise InvalidBody(f"return_logprob: Input should be a valid boolean, got {asked!r}")
    k = body.get("top_logprobs_num") or 0
    if not is_int(k) or k < 0:
        raise InvalidBody(f"top_logprobs_num: Input should be a valid integer, got {k!r}")
    start = body.get("logprob_start_len")
    start = -1 if start is None else start
    if not is_int(start):
        raise InvalidBody(f"logprob_start_len: Input should be a valid integer, got {start!r}")
    return LogprobRequest(k, body.get("return_text_in_logprobs") is True, start)


def _prompts(body: dict, encode: Callable[[str], list[int]] | None) -> tuple[list[list[int]], bool]:
    input_ids, text = body.get("input_ids"), body.get("text")
    if body.get("input_embeds") is not None:
        raise BadRequest("The SGLang stand-in does not accept input_embeds; send input_ids.")
    if input_ids is None and text is None:
        raise BadRequest("Either text, input_ids or input_embeds should be provided.")
    if input_ids is None:  # with both, SGLang generates from input_ids
        if not (isinstance(text, str) or (isinstance(text, list) and all(isinstance(t, str) for t in text))):
            raise InvalidBody("text must be a string or a list of strings")
        if encode is None:
            raise BadRequest("The SGLang stand-in tokenizes text only when started with a tokenizer; send input_ids.")
        if isinstance(text, str):
            return [encode(text)], True
        if not text:
            raise BadRequest("text cannot be empty.")
        return [encode(t) for t in text], False
    if not isinstance(input_ids, list):
        raise InvalidBody("input_ids must be a list of token ids or a list of lists of token ids")
    if not input_ids:
        raise BadRequest("input_ids cannot be empty.")
    if _ids_list(input_ids):
        return [input_ids], True
    if all(_ids_list(ids) for ids in input_ids):
        return input_ids, False  # an empty prompt inside a batch is served, as SGLang does
    raise InvalidBody("input_ids must be a list of integers or a list of lists of integers")


def _check_prompt(ids: list[int], config: SimConfig) -> None:
    if any(t >= config.vocab_size for t in ids):
        raise BadRequest(f"The input_ids {ids} contains values greater than the vocab size ({config.vocab_size}).")
    if any(t < 0 for t in ids):
        raise BadRequest(f"The input_ids {ids} contains negative values.")  # SGLang itself would crash
    if len(ids) >= config.context_length:
        raise BadRequest(
            f"The input ({len(ids)} tokens) is longer than the model's context length ({config.context_length} tokens)."
        )


def _check_budget(ids: list[int], sampling: Sampling, config: SimConfig) -> None:
    if sampling.max_new_tokens is not None and sampling.max_new_tokens + len(ids) >= config.context_length:
        total = sampling.max_new_tokens + len(ids)
        raise BadRequest(
            f"Requested token count exceeds the model's maximum context length of {config.context_length} tokens. "
            f"You requested a total of {total} tokens: {len(ids)} tokens from the input messages and "
            f"{sampling.max_new_tokens} tokens for the completion. Please reduce the number of tokens in the input "
            "messages or the completion to fit within the limit."
        )


def _rids(rid: Any, prompts: int, single: bool) -> list[str]:
    if rid is None:
        return [uuid.uuid4().hex for _ in range(prompts)]
    if isinstance(rid, str):
        return [rid] if single else [f"{rid}_{i}" for i in range(prompts)]
    if isinstance(rid, list) and all(isinstance(r, str) for r in rid):
        if len(rid) != prompts:
            raise BadRequest("The specified rids length mismatch with the batch_size for batch processing.")
        return rid
    raise BadRequest("The rid should be a string or a list of strings.")


def _serde_kind(value: Any) -> str:
    """How the sampling schema's messages name a JSON value of the wrong type."""
    if isinstance(value, bool):
        return f"boolean `{str(value).lower()}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value}`"
    if isinstance(value, str):
        return f"string {json.dumps(value)}"
    return "sequence" if isinstance(value, list) else "map"


def check_sampling_schema(params: dict[str, Any]) -> None:
    """The checks SGLang's sampling schema makes before any value check: known keys, JSON types."""
    unknown = [key for key in params if key not in SAMPLING_KEYS]
    if unknown:
        expected = ", ".join(f"`{k}`" for k in SAMPLING_KEY_ORDER)
        raise SchemaError(f"unknown field `{unknown[0]}`, expected one of {expected}")
    for key, value in params.items():
        if value is None:
            continue
        if key in FLOAT_KEYS and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise SchemaError(f"invalid type: {_serde_kind(value)}, expected f64")
        if key in INT_KEYS and not is_int(value):
            raise SchemaError(f"invalid type: {_serde_kind(value)}, expected i64")
        if key in BOOL_KEYS and not isinstance(value, bool):
            raise SchemaError(f"invalid type: {_serde_kind(value)}, expected a boolean")
        if key == "stop_token_ids" and not isinstance(value, list):
            raise SchemaError(f"invalid type: {_serde_kind(value)}, expected a sequence")


def _number(params: dict, name: str, default: float) -> float:
    value = params.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"{name} must be a number, got {value!r}.")
    return value


def _integer(params: dict, name: str, default: int | None) -> int | None:
    value = params.get(name)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not is_int(value):
        raise BadRequest(f"{name} must be an integer, got {value!r}.")
    return value


def parse_sampling(params: dict[str, Any], config: SimConfig) -> Sampling:
    """SamplingParams(**params).verify(vocab_size), with SGLang's checks, order and messages."""
    check_sampling_schema(params)
    temperature = _number(params, "temperature", 1.0)
    top_p = _number(params, "top_p", 1.0)
    min_p = _number(params, "min_p", 0.0)
    top_k = _integer(params, "top_k", -1)
    if 0 <= temperature < SAMPLING_EPS:
        top_k = 1  # greedy, as SGLang rewrites it
    if top_k == -1:
        top_k = TOP_K_ALL
    if temperature < 0.0:
        raise BadRequest(f"temperature must be a non-negative finite number, got {float(temperature)}.")
    if not 0.0 < top_p <= 1.0:
        raise BadRequest(f"top_p must be in (0, 1], got {top_p}.")
    if not 0.0 <= min_p <= 1.0:
        raise BadRequest(f"min_p must be in [0, 1], got {min_p}.")
    if top_k < 1:
        raise BadRequest(f"top_k must be -1 (disable) or at least 1, got {top_k}.")
    for name in ("frequency_penalty", "presence_penalty"):
        value = _number(params, name, 0.0)
        if not -2.0 <= value <= 2.0:
            raise BadRequest(f"{name} must be in [-2, 2], got {value}.")
    repetition_penalty = _number(params, "repetition_penalty", 1.0)
    if not 0.0 < repetition_penalty <= 2.0:
        raise BadRequest(f"repetition_penalty must be in (0, 2], got {repetition_penalty}.")
    min_new_tokens = _integer(params, "min_new_tokens", 0)
    if min_new_tokens < 0:
        raise BadRequest(f"min_new_tokens must be in [0, max_new_tokens], got {min_new_tokens}.")
    max_new_tokens = _integer(params, "max_new_tokens", 128)
    if max_new_tokens is not None:
        if max_new_tokens < 0:
            raise BadRequest(f"max_new_tokens must be at least 0, got {max_new_tokens}.")
        if min_new_tokens > max_new_tokens:
            raise BadRequest(f"min_new_tokens must be in [0, max_new_tokens({max_new_tokens})], got {min_new_tokens}.")
    logit_bias = params.get("logit_bias")
    if logit_bias is not None:
        if not isinstance(logit_bias, dict):
            raise BadRequest(f"logit_bias must be an object, got {logit_bias!r}.")
        for token_id in logit_bias:
            if not str(token_id).lstrip("-").isdigit() or not 0 <= int(token_id) < config.vocab_size:
                raise BadRequest(f"logit_bias must has keys in [0, {config.vocab_size - 1}], got {token_id}.")
    if sum(params.get(k) is not None for k in ("json_schema", "regex", "ebnf")) > 1:
        raise BadRequest("Only one of regex, json_schema, or ebnf can be set.")
    stop_token_ids = params.get("stop_token_ids") or []
    if not _ids_list(stop_token_ids):
        raise BadRequest(f"stop_token_ids must be a list of token ids, got {stop_token_ids!r}.")
    n = _integer(params, "n", 1)
    if n == 0:
        n = 1  # SGLang serves n 0 as one sample
    if n < 1:
        raise BadRequest(f"n must be at least 1, got {n}.")
    stream_interval = _integer(params, "stream_interval", None)
    if stream_interval is not None and stream_interval < 1:
        raise BadRequest(f"stream_interval must be at least 1, got {stream_interval}.")
    sampling_seed = _integer(params, "sampling_seed", None)
    return Sampling(
        max_new_tokens=max_new_tokens,
        min_new_tokens=min_new_tokens,
        stop_token_ids=tuple(stop_token_ids),
        ignore_eos=bool(params.get("ignore_eos") or False),
        skip_special_tokens=params.get("skip_special_tokens") is not False,
        sampling_seed=sampling_seed,
        n=n,
        stream_interval=stream_interval,
    )


@dataclass(frozen=True)
class Timing:
    """When one request's phases happened (wall-clock seconds), for meta_info's timing keys."""

    received: float  # the request arrived
    started: float  # it left the queue for a slot
    prefilled: float  # its prompt was processed (the first token is out)
    now: float  # this answer (or stream event) is sent

    @classmethod
    def untimed(cls, now: float) -> Timing:
        return cls(now, now, now, now)


def response_object(
    *,
    text: str | None,
    output_ids: list[int],
    rid: str,
    finish_reason: dict[str, Any] | None,
    prompt_tokens: int,
    completion_tokens: int,
    timing: Timing,
    weight_version: str,
    cached_tokens: int = 0,
) -> dict[str, Any]:
    """One /generate result (or, with finish_reason None, a stream's partial result), as SGLang 0.5.23 with
    --enable-metrics builds it: `text` only with a tokenizer (SGLang started with --skip-tokenizer-init has
    none), meta_info with the same keys (tests/engine/test_differential.py compares them)."""
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": finish_reason,
        "prompt_tokens": prompt_tokens,
        "weight_version": weight_version,
        "num_retractions": 0,
        "storage_prefetch_wait": 0.0,
        "storage_staging_wait": 0.0,
        "forward_entry_time": timing.started,
        "prefill_finished_time": timing.prefilled,
        "queue_time": timing.started - timing.received,
        "reasoning_tokens": 0,  # counted only by a reasoning parser, which the pipeline never runs
        "completion_tokens": completion_tokens,
        "cached_tokens": cached_tokens,
        "cached_tokens_details": {"device": cached_tokens, "host": 0} if cached_tokens else None,
        "dp_rank": None,
        "response_sent_to_client_ts": timing.now,
    }
    if finish_reason is not None:  # the final result adds the request's totals
        e2e = timing.now - timing.received
        meta.update(
            weight_versions=[{"version": weight_version, "start": 0, "end": completion_tokens}],
            e2e_latency=e2e,
            request_received_ts=timing.received,
            first_token_latency=timing.prefilled - timing.received,
            api_server_dispatch_finish_ts=timing.received,
            request_finished_ts=timing.now,
        )
        if completion_tokens:
            meta["decode_throughput"] = completion_tokens / max(timing.now - timing.prefilled, 1e-6)
    answer: dict[str, Any] = {"output_ids": output_ids, "meta_info": meta}
    return answer if text is None else {"text": text, **answer}
