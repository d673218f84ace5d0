"""Everything one stand-in server holds between requests: config, output model, slots, faults, counters."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from eagle_datagen.standin.sglang.aborts import AbortRegistry
from eagle_datagen.standin.sglang.config import FaultRates, SimConfig
from eagle_datagen.standin.sglang.engine import SimStats, SlotPool
from eagle_datagen.standin.sglang.faults import FaultInjector
from eagle_datagen.standin.sglang.outputs import OutputModel
from eagle_datagen.standin.sglang.prefill_lane import PrefillLane
from eagle_datagen.standin.sglang.prefix_cache import PrefixCache
from eagle_datagen.standin.sglang.text import load_codec


class SimState:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.codec = load_codec(config.tokenizer_path)
        known = self.codec.ordinary_ids(config.ordinary_vocab) if self.codec is not None else None
        self.outputs = OutputModel(config, known)
        self.pool = SlotPool(config.max_running_requests, config.max_queued_requests)
        self.prefix_cache = PrefixCache(config.prefix_cache_tokens)  # emptied by /flush_cache and restarts
        self.prefill = PrefillLane(self.prefix_cache, lambda: self.config.prefill_s_per_token)
        self.stats = SimStats()
        self.aborts = AbortRegistry()  # the rids held, for POST /abort_request
        self.faults = FaultInjector(config.faults, config.fault_seed)
        self.ready_at = time.monotonic() + config.startup_seconds
        # set by the runner: where it listens, and how to restart (listener down, connections closed,
        # back after downtime_s)
        self.address: tuple[str, int] = ("127.0.0.1", 0)
        self.restart: Callable[[float], Awaitable[None]] | None = None
        self.background: set[asyncio.Task] = set()  # tasks that must outlive the request that made them

    @property
    def starting(self) -> bool:
        return time.monotonic() < self.ready_at

    @property
    def stuck(self) -> bool:
        """The scheduler has stopped (SimConfig.stuck_after): nothing it would answer is answered."""
        after = self.config.stuck_after
        return after is not None and self.faults.requests > after

    def came_up(self) -> None:
        self.ready_at = time.monotonic() + self.config.startup_seconds

    def set_fault_rates(self, rates: FaultRates) -> None:
        self.faults.rates = rates

    def reset_stats(self) -> None:
        self.stats = SimStats()
        self.pool.reset_busy()

    def text(self, ids: list[int], skip_special_tokens: bool) -> str | None:
        """The decoded text; None without a tokenizer (SGLang with --skip-tokenizer-init sends no `text`)."""
        return self.codec.decode(ids, skip_special_tokens) if self.codec is not None else None


STATE_KEY = web.AppKey("sglang_sim_state", SimState)
