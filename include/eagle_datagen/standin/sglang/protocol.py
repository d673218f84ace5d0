"""SGLang's /generate request contract: parsing, validation (with SGLang's own messages) and response bodies.

Three kinds of failure, as SGLang (FastAPI) produces them:
- `BadRequest`: SGLang raises ValueError -> 400 `{"error": {"message": ...}}` (in a stream: a `data:` event);
- `InvalidBody`: the body does not fit GenerateReqInput's types -> 400 `{"object": "error", ...}`;
- `UncaughtError`: SGLang does not catch it (e.g. an unknown sampling key) -> 500 `Internal Server Error`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eagle_datagen.standin.sglang.config import SimConfig

# SGLang's SamplingParams fields; any other key makes SamplingParams(**params) raise a TypeError.
SAMPLING_KEYS = frozenset(
    {
        "max_new_tokens",
        "min_new_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
        "stop",
        "stop_token_ids",
        "stop_regex",
        "ignore_eos",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "no_stop_trim",
        "n",
        "json_schema",
        "regex",
        "ebnf",
        "structural_tag",
        "sampling_seed",
        "custom_params",
        "stream_interval",
        "logit_bias",
    }
)
TOP_K_ALL = 1 << 30
SAMPLING_EPS = 1e-6


class BadRequest(Exception):
    """SGLang's ValueError: HTTP 400 with `{"error": {"message": ...}}`."""

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self)}}


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
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise InvalidBody(f"stream must be a boolean, got {stream!r}")
    prompts, single = _prompts(body, encode)
    params = body.get("sampling_params")
    if params is None:
        params = {}
    if isinstance(params, dict):
        per_prompt = [params] * len(prompts)
    elif isinstance(params, list) and not single and all(isinstance(p, dict) for p in params):
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
    rids = _rids(body.get("rid"), len(prompts), single)
    items = []
    for p, (ids, sampling) in enumerate(zip(prompts, samplings, strict=True)):
        for j in range(n):
            # SGLang gives each of n samples a fresh rid
            rid = rids[p] if n == 1 else uuid.uuid4().hex
            items.append(GenerateItem(len(items), ids, sampling, rid, j))
    return GenerateRequest(items, single, stream)


def _prompts(body: dict, encode: Callable[[str], list[int]] | None) -> tuple[list[list[int]], bool]:
    input_ids, text = body.get("input_ids"), body.get("text")
    if body.get("input_embeds") is not None:
        raise BadRequest("The SGLang stand-in does not accept input_embeds; send input_ids.")
    if (input_ids is None) == (text is None):
        raise BadRequest("Either text, input_ids or input_embeds should be provided.")
    if text is not None:
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
        if any(not ids for ids in input_ids):
            raise BadRequest("input_ids cannot be empty.")
        return input_ids, False
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
    unknown = sorted(set(params) - SAMPLING_KEYS)
    if unknown:
        raise UncaughtError(f"SamplingParams.__init__() got an unexpected keyword argument {unknown[0]!r}")
    temperature = _number(params, "temperature", 1.0)
    top_p = _number(params, "top_p", 1.0)
    min_p = _number(params, "min_p", 0.0)
    top_k = _integer(params, "top_k", -1)
    if 0 <= temperature < SAMPLING_EPS:
        top_k = 1  # greedy, as SGLang rewrites it
    if top_k == -1:
        top_k = TOP_K_ALL
    if temperature < 0.0:
        raise BadRequest(f"temperature must be non-negative, got {temperature}.")
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


def response_object(
    *,
    text: str,
    output_ids: list[int],
    rid: str,
    finish_reason: dict[str, Any] | None,
    prompt_tokens: int,
    completion_tokens: int,
    e2e_latency: float,
    weight_version: str,
    cached_tokens: int = 0,
) -> dict[str, Any]:
    """One /generate result, as SGLang's tokenizer manager builds it."""
    return {
        "text": text,
        "output_ids": output_ids,
        "meta_info": {
            "id": rid,
            "finish_reason": finish_reason,
            "prompt_tokens": prompt_tokens,
            "weight_version": weight_version,
            "completion_tokens": completion_tokens,
            "cached_tokens": cached_tokens,
            "e2e_latency": e2e_latency,
        },
    }
