"""Samples: one generation of one prompt under one sampling config, with a deterministic identity.

`sample_id` is a hash of (prompt id, sample index, model, sampling config, mode), so the same request is
the same sample in every rerun: that is what makes resume and the incremental catalog possible.
`sampling_seed` derives from it (distinct per sample index), and so does the request id (`rid`). An instant
sample's mode is part of the hashed text (`"mode": "instant"` beside the sampling parameters), so the two modes
of one prompt are two samples even under the same sampling; a thinking sample's text is what it was before
modes existed, so the catalogs of earlier runs still know their samples.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from eagle_datagen.inference.logprobs import request_fields
from eagle_datagen.modes import THINKING

FinishType = Literal["stop", "length", "abort", "error"]
SEED_MODULUS = 2**31 - 1  # SGLang passes sampling_seed to torch generators: keep it a positive int32


def sampling_fingerprint(sampling: dict[str, Any], mode: str | None = THINKING) -> str:
    """Stable text of what changes what the model generates: the sampling parameters and, for an instant sample,
    its mode (`mode` is no SGLang sampling key, so it cannot collide with one)."""
    values = {k: v for k, v in sampling.items() if v is not None}
    if mode not in (None, THINKING):
        values["mode"] = mode
    return json.dumps(dict(sorted(values.items())), separators=(",", ":"))


def sample_id_tail(model: str, sampling: dict[str, Any], mode: str | None = THINKING) -> str:
    """What follows the prompt id and the sample index in the text a sample id hashes (the same for the samples
    of one category and mode)."""
    return f":{model}:{sampling_fingerprint(sampling, mode)}"


def make_sample_id(
    prompt_id: str, sample_index: int, model: str, sampling: dict[str, Any], mode: str | None = THINKING
) -> str:
    text = f"{prompt_id}:{sample_index}{sample_id_tail(model, sampling, mode)}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def sample_id_digests(prompt_ids: Iterable[str], samples: int, tail: str) -> bytes:
    """The ids of samples 0..`samples`-1 of each prompt (prompt by prompt; `tail`: `sample_id_tail`), each as the
    16 bytes its text encodes (`bytes.fromhex(make_sample_id(...))`), one after the other: no Python object per
    id is kept."""
    out = bytearray()
    for prompt_id in prompt_ids:
        for k in range(samples):
            out += hashlib.sha256(f"{prompt_id}:{k}{tail}".encode()).digest()[:16]
    return bytes(out)


def sampling_seed_for(sample_id: str) -> int:
    return int(sample_id[:15], 16) % SEED_MODULUS


def request_id(sample_id: str, attempt: int) -> str:
    """A string rid (the router rejects lists). Retries get their own rid: a timed-out attempt may still
    be running on the server, and two live requests must not share an id."""
    return sample_id if attempt == 1 else f"{sample_id}-r{attempt}"


@dataclass(frozen=True, slots=True)
class SampleRequest:
    sample_id: str
    prompt_id: str
    record_id: str | None
    category: str
    sample_index: int
    prompt_ids: list[int]
    sampling: dict[str, Any]  # SGLang sampling_params, sampling_seed included
    shard: int = 0
    # k > 0: ask for the top-k logprobs of every output token (soft targets, inference/logprobs.py). Not part of
    # the sample's identity: the same sampling gives the same tokens, with or without them.
    top_logprobs: int = 0
    mode: str = THINKING  # the mode its prompt was rendered in (modes.py): what validation expects of the answer

    @classmethod
    def create(
        cls,
        *,
        prompt_id: str,
        record_id: str | None,
        category: str,
        sample_index: int,
        prompt_ids: list[int],
        model: str,
        sampling: dict[str, Any],
        shard: int = 0,
        top_logprobs: int = 0,
        mode: str = THINKING,
    ) -> SampleRequest:
        sample_id = make_sample_id(prompt_id, sample_index, model, sampling, mode)
        params = {k: v for k, v in sampling.items() if v is not None}
        params["sampling_seed"] = sampling_seed_for(sample_id)
        return cls(
            sample_id, prompt_id, record_id, category, sample_index, prompt_ids, params, shard, top_logprobs, mode
        )

    def body(self, attempt: int = 1) -> dict[str, Any]:
        body = {
            "input_ids": self.prompt_ids,
            "sampling_params": self.sampling,
            "rid": request_id(self.sample_id, attempt),
        }
        return body | request_fields(self.top_logprobs) if self.top_logprobs else body


@dataclass(slots=True)
class SampleResult:
    """What came back for a sample: the server's answer, or the permanent failure that ended it."""

    request: SampleRequest
    output_ids: list[int] = field(default_factory=list)
    finish_reason: dict[str, Any] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)
    endpoint: str = ""
    attempts: int = 0
    error: str | None = None  # set when the request failed: a 400, or retries exhausted
    retryable: bool = False  # an exhausted transient failure: a rerun should try this sample again
    reject_reason: str | None = None  # the screen's verdict on the answer (not checkpointed: publishing judges again)

    @property
    def finish_type(self) -> FinishType:
        if self.error is not None:
            return "error"
        return self.finish_reason.get("type", "abort")

    @property
    def completion_tokens(self) -> int:
        return int(self.meta_info.get("completion_tokens", len(self.output_ids)))

    def to_checkpoint(self) -> dict[str, Any]:
        return {
            "sample_id": self.request.sample_id,
            "prompt_id": self.request.prompt_id,
            "sample_index": self.request.sample_index,
            "shard": self.request.shard,
            "output_ids": self.output_ids,
            "finish_reason": self.finish_reason,
            "meta_info": self.meta_info,
            "endpoint": self.endpoint,
            "attempts": self.attempts,
            "error": self.error,
        }

    @classmethod
    def from_checkpoint(cls, request: SampleRequest, row: dict[str, Any]) -> SampleResult:
        return cls(
            request,
            output_ids=row["output_ids"],
            finish_reason=row["finish_reason"],
            meta_info=row["meta_info"],
            endpoint=row["endpoint"],
            attempts=row["attempts"],
            error=row["error"],
        )
