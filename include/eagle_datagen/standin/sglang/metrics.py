"""GET /metrics: Prometheus text with SGLang's metric names, plus `sglang_sim:` series of the stand-in's own."""

from __future__ import annotations

from eagle_datagen.standin.sglang.config import FAULT_KINDS
from eagle_datagen.standin.sglang.state import SimState


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_metrics(state: SimState) -> str:
    stats, pool = state.stats, state.pool
    model = f'model_name="{_label(state.config.model_path)}"'
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str, samples: list[tuple[str, str, float]]) -> None:
        # SGLang's multiprocess exposition names a counter's family with its _total suffix
        title = f"{name}_total" if kind == "counter" else name
        lines.append(f"# HELP {title} {help_text}")
        lines.append(f"# TYPE {title} {kind}")
        for suffix, labels, value in samples:
            lines.append(f"{name}{suffix}{{{labels}}} {float(value)}")

    family("sglang:num_running_reqs", "gauge", "The number of running requests.", [("", model, pool.running)])
    family("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", [("", model, pool.queued)])
    family(
        "sglang:prompt_tokens",
        "counter",
        "Number of prefill tokens processed.",
        [("_total", model, stats.prompt_tokens)],
    )
    # no cached-tokens counter: SGLang 0.5.23 exports none (tests/engine/test_differential.py); /sim/stats has it
    family(
        "sglang:cache_hit_rate",
        "gauge",
        "The prefix cache hit rate.",
        [("", model, stats.cached_tokens / stats.prompt_tokens if stats.prompt_tokens else 0.0)],
    )
    family(
        "sglang:generation_tokens",
        "counter",
        "Number of generation tokens processed.",
        [("_total", model, stats.generation_tokens)],
    )
    family("sglang:num_requests", "counter", "The number of processed requests.", [("_total", model, stats.items)])
    family(
        "sglang_sim:slot_occupancy",
        "gauge",
        "Busy slot-seconds / (slots x seconds since the first request).",
        [("", model, stats.occupancy(pool))],
    )
    family(
        "sglang_sim:busy_slot_seconds",
        "counter",
        "Slot-seconds spent running requests.",
        [("_total", model, pool.busy_slot_seconds())],
    )
    family("sglang_sim:max_running_requests", "gauge", "Slots (max running requests).", [("", model, pool.slots)])
    family(
        "sglang_sim:faults_injected",
        "counter",
        "Injected faults by kind.",
        [("_total", f'{model},kind="{kind}"', stats.faults[kind]) for kind in FAULT_KINDS],
    )
    family(
        "sglang_sim:http_requests",
        "counter",
        "/generate requests by outcome (HTTP status, dropped, disconnected).",
        [("_total", f'{model},outcome="{_label(k)}"', v) for k, v in sorted(stats.outcomes.items())],
    )
    family("sglang_sim:restarts", "counter", "Restarts of the stand-in server.", [("_total", model, stats.restarts)])
    return "\n".join(lines) + "\n"
