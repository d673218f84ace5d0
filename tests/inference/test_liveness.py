"""The liveness monitor's rule: a shortfall of the server's count against the run's requests there, lasting
lost_after_s, flags that many of the oldest requests; a shortfall that goes away flags nothing."""

from __future__ import annotations

import asyncio

from eagle_datagen.inference.liveness import LivenessMonitor, LivenessPolicy, _counted

POLICY = LivenessPolicy(lost_after_s=60.0, poll_s=5.0, grace_s=5.0)


def monitor_with(ages: list[float], now: float) -> tuple[LivenessMonitor, list]:
    monitor = LivenessMonitor(POLICY, ["http://a"])
    entries = []
    for i, age in enumerate(ages):
        entry = monitor.watch("http://a", f"r{i}")
        entry.started = now - age
        entries.append(entry)
    return monitor, entries


def test_a_shortfall_lasting_the_bound_flags_the_oldest():
    async def scenario() -> None:
        monitor, entries = monitor_with([100.0, 50.0, 20.0, 1.0], now=1000.0)  # the 1 s one is in grace
        assert monitor.compare("http://a", 1, 1000.0) == []  # 3 old, server counts 1: short by 2, since now
        assert monitor.compare("http://a", 1, 1059.0) == []  # not yet lost_after_s
        flagged = monitor.compare("http://a", 2, 1060.0)  # the young one is old by now, and counted
        assert [e.rid for e in flagged] == ["r0", "r1"] and all(e.lost.is_set() for e in flagged)
        assert monitor.detected["http://a"] == 2
        assert monitor.compare("http://a", 2, 2000.0) == []  # the flagged ones are not counted again

    asyncio.run(scenario())


def test_a_shortfall_that_goes_away_flags_nothing():
    async def scenario() -> None:
        monitor, _ = monitor_with([100.0, 50.0], now=1000.0)
        assert monitor.compare("http://a", 0, 1000.0) == []  # answers on their way back, say
        assert monitor.compare("http://a", 2, 1030.0) == []  # the server counts them again: reset
        assert monitor.compare("http://a", 0, 1061.0) == []  # a new shortfall starts the clock again
        assert monitor.detected["http://a"] == 0

    asyncio.run(scenario())


def test_the_server_count_includes_its_other_queues():
    load = {"num_running_reqs": 3, "num_waiting_reqs": 2, "queues": {"waiting": 2, "grammar": 1, "paused": 1}}
    assert _counted(load) == 7
