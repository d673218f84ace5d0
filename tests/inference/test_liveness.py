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


def test_young_requests_do_not_hide_a_lost_one():
    """A busy replica always has requests younger than the grace; the server counts them, so they must count
    on the run's side too, or each would hide a lost one."""

    async def scenario() -> None:
        monitor, entries = monitor_with([100.0, 1.0], now=1000.0)  # r0 lost, r1 young and running
        assert monitor.compare("http://a", 1, 1000.0) == []  # the server counts r1 only: short by one
        young = monitor.watch("http://a", "r2")  # another new request, counted by the server at once
        young.started = 1059.0
        assert monitor.compare("http://a", 2, 1059.5) == []
        assert [e.rid for e in monitor.compare("http://a", 2, 1060.0)] == ["r0"]  # the oldest, never a young one
        assert not entries[1].lost.is_set() and not young.lost.is_set()

    asyncio.run(scenario())


def test_a_shortfall_of_young_requests_alone_flags_nothing_until_one_is_past_its_grace():
    async def scenario() -> None:
        monitor = LivenessMonitor(LivenessPolicy(lost_after_s=1.0, poll_s=0.5, grace_s=5.0), ["http://a"])
        entries = [monitor.watch("http://a", f"r{i}") for i in range(2)]
        entries[0].started, entries[1].started = 998.0, 999.0
        assert monitor.compare("http://a", 0, 1000.0) == []
        assert monitor.compare("http://a", 0, 1002.0) == []  # short for longer than the bound, none past grace
        assert [e.rid for e in monitor.compare("http://a", 0, 1003.5)] == ["r0"]  # only the one past its grace
        assert not entries[1].lost.is_set()

    asyncio.run(scenario())


def test_requests_ending_as_the_server_counts_do_not_restart_the_clock():
    """On a busy replica a request ends every poll, and a count taken as it ends may still hold it: such a poll
    hides a lost one, so it keeps the shortfall's clock running; a poll that no recent end explains clears it."""

    async def scenario() -> None:
        monitor, entries = monitor_with([100.0, 90.0, 80.0, 70.0], now=1000.0)  # r0 lost, r1-r3 running
        assert monitor.compare("http://a", 3, 1000.0) == []  # short by one: the clock starts
        monitor.forget(entries[3], at=1029.0)  # r3 answers; the server's count, asked at 1029.5, still holds it
        assert monitor.compare("http://a", 3, 1030.0, asked=1029.5) == []  # hidden, not cleared
        assert monitor.compare("http://a", 2, 1059.0) == []  # r1 and r2 counted: short again (one poll)
        assert [e.rid for e in monitor.compare("http://a", 2, 1060.0)] == ["r0"]  # lost_after_s since 1000

    asyncio.run(scenario())


def test_a_full_count_with_no_recent_end_clears_the_shortfall_and_one_short_poll_flags_nothing():
    async def scenario() -> None:
        monitor, entries = monitor_with([100.0, 90.0], now=1000.0)
        assert monitor.compare("http://a", 1, 1000.0) == []  # short by one
        monitor.forget(entries[1], at=1001.0)
        assert monitor.compare("http://a", 1, 1030.0, asked=1029.5) == []  # r1's end is 28 s old: cleared
        assert monitor.compare("http://a", 0, 1061.0) == []  # a new shortfall: the clock starts again
        monitor2, _ = monitor_with([100.0, 90.0], now=1000.0)
        assert monitor2.compare("http://a", 1, 1000.0) == []
        monitor2.forget(_[1], at=1059.0)
        assert monitor2.compare("http://a", 1, 1059.5, asked=1059.2) == []  # hidden by r1's end
        assert monitor2.compare("http://a", 0, 1061.0) == []  # one short poll after a hidden one: not yet
        assert [e.rid for e in monitor2.compare("http://a", 0, 1061.5)] == ["r0"]  # confirmed

    asyncio.run(scenario())
