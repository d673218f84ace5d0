"""run_samples: every request once, and an expected failure of the result handler stays one error, not a
group (the command line prints expected failures as one line)."""

from __future__ import annotations

import asyncio

import pytest

from eagle_datagen.errors import DataGenError
from eagle_datagen.inference.samples import SampleRequest, SampleResult
from eagle_datagen.inference.scheduler import run_samples


class EchoClient:
    """Answers every request at once (the scheduler is under test, not the client)."""

    async def generate(self, request: SampleRequest) -> SampleResult:
        await asyncio.sleep(0)
        return SampleResult(request, output_ids=[1, 163607, 2, 163586])


def requests(n: int) -> list[SampleRequest]:
    return [
        SampleRequest.create(
            prompt_id=f"p{i}",
            record_id=None,
            category="chat",
            sample_index=0,
            prompt_ids=[1, 163606],
            model="m",
            sampling={"temperature": 1.0},
        )
        for i in range(n)
    ]


def test_every_request_is_handled_once():
    seen = []

    async def keep(result: SampleResult) -> None:
        seen.append(result.request.sample_id)

    asyncio.run(run_samples(EchoClient(), requests(50), 8, keep))
    assert sorted(seen) == sorted(r.sample_id for r in requests(50))


def test_a_failing_checkpoint_write_is_raised_as_itself():
    handled = []

    async def store_gone(result: SampleResult) -> None:
        handled.append(result)
        if len(handled) == 5:
            raise DataGenError("cannot write s3://b/checkpoints/c.jsonl: the store stayed unreachable")

    with pytest.raises(DataGenError, match="stayed unreachable") as info:
        asyncio.run(run_samples(EchoClient(), requests(50), 4, store_gone))
    assert type(info.value) is DataGenError and len(handled) < 50  # the other workers were cancelled
