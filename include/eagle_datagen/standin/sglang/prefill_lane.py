"""The stand-in's prefill lane: prompts are prefilled one batch at a time, each batch matched against the cache
as it is formed, as SGLang's scheduler does.

SGLang's scheduler loop forms one prefill batch at a time from its waiting queue (`get_new_batch_prefill`):
each request is matched against the radix tree as it is added (`req.init_next_round_input(tree_cache)`),
the batch takes requests until its token budget (`chunked_prefill_size`, 8,192 here) is spent, and the
prompts' KV enters the tree once the batch has run. So of many requests sharing a system prompt that arrive
together, the first batch computes it once per request in that batch and every later batch finds it cached.
Prefilling every request on its own timer, in parallel, as a stand-in without a lane would, makes them all
compute it. Modelled: FCFS order, the budget on computed (extend) tokens, the first request of a batch always
taken (SGLang would chunk a longer prompt over several batches: the same total time). Not modelled: decode
steps interleaved between prefill batches, and LPM's in-batch prefix deprioritising (the default policy,
FCFS, has none).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from eagle_datagen.standin.sglang.prefix_cache import PrefixCache

BATCH_TOKENS = 8192  # SGLang's chunked_prefill_size (the sim reports it in /server_info)


@dataclass
class _Waiting:
    prompt_ids: list[int]
    cached: asyncio.Future[int] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class PrefillLane:
    def __init__(
        self,
        cache: PrefixCache,
        seconds_per_token: Callable[[], float],
        batch_tokens: int = BATCH_TOKENS,
    ) -> None:
        self.cache = cache
        self.seconds_per_token = seconds_per_token  # read per batch: the profile can change at run time
        self.batch_tokens = batch_tokens
        self._waiting: deque[_Waiting] = deque()
        self._lock = asyncio.Lock()
        self.batches = 0

    async def prefill(self, prompt_ids: list[int]) -> int:
        """Prefill one prompt (after those queued before it); its cached tokens, matched as its batch formed."""
        me = _Waiting(prompt_ids)
        self._waiting.append(me)
        try:
            while not me.cached.done():
                async with self._lock:
                    if not me.cached.done():
                        await self._run_batch()
            return me.cached.result()
        finally:
            if me in self._waiting:  # cancelled while queued: leave the queue
                self._waiting.remove(me)

    async def _run_batch(self) -> None:
        batch: list[tuple[_Waiting, int]] = []
        budget = self.batch_tokens
        while self._waiting:
            waiting = self._waiting[0]
            cached = self.cache.match(waiting.prompt_ids)
            computed = len(waiting.prompt_ids) - cached
            if batch and computed > budget:
                break
            self._waiting.popleft()
            batch.append((waiting, cached))
            budget -= computed
        try:
            seconds = self.seconds_per_token() * sum(len(w.prompt_ids) - c for w, c in batch)
            if seconds > 0:  # zero-latency profiles skip the timer
                await asyncio.sleep(seconds)
        finally:  # even when the request that runs the batch is cancelled: the others' prefill has run
            self.batches += 1
            for waiting, cached in batch:
                self.cache.insert(waiting.prompt_ids)
                if not waiting.cached.done():
                    waiting.cached.set_result(cached)
