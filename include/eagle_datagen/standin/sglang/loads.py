"""GET /v1/loads: SGLang 0.5.23's load report, which the smg router's load monitor polls every 10 s.

The keys are the real server's (tests/engine/test_differential.py compares them); the numbers the stand-in
can know come from its slot pool and counters, the rest are a single-GPU server's zeros.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from eagle_datagen.standin.sglang.state import SimState


def loads_body(state: SimState) -> dict[str, Any]:
    pool, stats, cfg = state.pool, state.stats, state.config
    load = {
        "timestamp": time.time(),
        "dp_rank": 0,
        "num_running_reqs": pool.running,
        "num_waiting_reqs": pool.queued,
        "num_waiting_uncached_tokens": 0,
        "num_used_tokens": 0,
        "num_total_tokens": 0,
        "num_active_tokens": 0,
        "num_prealloc_ready_tokens": 0,
        "max_total_num_tokens": cfg.context_length,
        "max_running_requests": pool.slots,
        "token_usage": 0.0,
        "gen_throughput": 0.0,
        "cache_hit_rate": 0.0,
        "utilization": pool.running / pool.slots,
        "total_prefill_uncached_tokens": stats.prompt_tokens,
        "total_prefill_busy_us": 0,
        "decode_moments": [0.0] * 6,
        "memory": {"weight_gb": 0.0, "kv_cache_gb": 0.0, "graph_gb": 0.0, "token_capacity": cfg.context_length},
        "disaggregation": {
            "mode": "null",
            "prefill_bootstrap_queue_reqs": 0,
            "prefill_inflight_queue_reqs": 0,
            "decode_prealloc_queue_reqs": 0,
            "decode_transfer_queue_reqs": 0,
            "decode_retracted_queue_reqs": 0,
            "kv_transfer_speed_gb_s": 0.0,
            "kv_transfer_latency_ms": 0.0,
        },
        "queues": {"waiting": pool.queued, "grammar": 0, "paused": 0, "retracted": 0, "prealloc_ready": 0},
    }
    return {
        "timestamp": datetime.now(UTC).isoformat(),
        "version": cfg.version,
        "accelerator": None,
        "num_accelerators": 1,
        "loads": [load],
    }
