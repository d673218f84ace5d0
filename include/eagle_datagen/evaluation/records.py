"""The per-request records of an evaluation: one row per request sent (or given up on), with what the server
answered, kept beside the results (`eval=<id>.records.parquet`) so that every figure can be recomputed from them.

`status` says what a request counts as: `ok` (answered with SGLang's per-request speculative metrics: averaged in),
`unmeasured` (answered without them: no verify step, such as a one-token answer; counted, not averaged) or `failed`
(a permanent error, or retries exhausted: counted, never averaged in; `error` says why).
"""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from eagle_datagen.evaluation.prompts import EvalPrompt
from eagle_datagen.inference.samples import SampleResult

# SGLang 0.5.23's per-request metrics (tokenizer_manager.py, _calculate_spec_decoding_metrics)
SPEC_KEYS = (
    "spec_verify_ct",
    "spec_accept_length",
    "spec_accept_rate",
    "spec_num_correct_drafts",
    "spec_num_proposed_drafts",
)
HISTOGRAM_KEY = "spec_correct_drafts_histogram"
STATUSES = ("ok", "unmeasured", "failed")

RECORD_SCHEMA = pa.schema(
    [
        ("eval_id", pa.string()),
        ("side", pa.string()),  # A: the deployment evaluated; B: the one compared with (--compare-url)
        ("label", pa.string()),
        ("endpoint", pa.string()),
        ("category", pa.string()),
        ("mode", pa.string()),  # the prompt's mode (modes.py)
        ("prompt_key", pa.string()),
        ("prompt_id", pa.string()),
        ("record_id", pa.string()),
        ("run_id", pa.string()),
        ("request_index", pa.int32()),  # k-th request of the prompt (--requests-per-prompt)
        ("rid", pa.string()),
        ("sampling_seed", pa.int64()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("attempts", pa.int32()),
        ("finish_reason", pa.string()),
        ("prompt_tokens", pa.int32()),
        ("completion_tokens", pa.int32()),
        ("latency_s", pa.float64()),  # the client's wall time for the request, retries included
        ("e2e_latency_s", pa.float64()),  # the server's meta_info.e2e_latency of the answer
        ("spec_verify_ct", pa.int64()),
        ("spec_accept_length", pa.float64()),
        ("spec_accept_rate", pa.float64()),
        ("spec_num_correct_drafts", pa.int64()),
        ("spec_num_proposed_drafts", pa.int64()),
        ("spec_correct_drafts_histogram", pa.list_(pa.int64())),
    ]
)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def request_record(
    eval_id: str, side: str, label: str, prompt: EvalPrompt, result: SampleResult, latency_s: float
) -> dict[str, Any]:
    meta = result.meta_info if result.error is None else {}
    measured = result.error is None and _count(meta.get("spec_verify_ct")) and _number(meta.get("spec_accept_length"))
    histogram = meta.get(HISTOGRAM_KEY)
    return {
        "eval_id": eval_id,
        "side": side,
        "label": label,
        "endpoint": result.endpoint or None,
        "category": prompt.category,
        "mode": prompt.mode,
        "prompt_key": prompt.prompt_key,
        "prompt_id": prompt.prompt_id,
        "record_id": prompt.record_id,
        "run_id": prompt.run_id,
        "request_index": result.request.sample_index,
        "rid": result.request.sample_id,
        "sampling_seed": result.request.sampling.get("sampling_seed"),
        "status": "failed" if result.error is not None else "ok" if measured else "unmeasured",
        "error": result.error,
        "attempts": result.attempts,
        "finish_reason": None if result.error is not None else result.finish_type,
        "prompt_tokens": _count(meta.get("prompt_tokens")),
        "completion_tokens": len(result.output_ids) if result.error is None else None,
        "latency_s": latency_s,
        "e2e_latency_s": _number(meta.get("e2e_latency")),
        **{
            key: (_number if key in ("spec_accept_length", "spec_accept_rate") else _count)(meta.get(key))
            for key in SPEC_KEYS
        },
        HISTOGRAM_KEY: [int(n) for n in histogram] if isinstance(histogram, list) else None,
    }


def records_table(records: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(records, schema=RECORD_SCHEMA)


def records_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table.cast(RECORD_SCHEMA), buffer, compression="zstd")
    return buffer.getvalue()


def read_records(data: bytes) -> pa.Table:
    return pq.read_table(pa.BufferReader(data)).cast(RECORD_SCHEMA)
