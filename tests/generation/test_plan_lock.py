"""The plan lock: one holder per output root, waiters poll, a dead holder's lock is broken; locally and on S3."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest

from eagle_datagen.generation.plan_lock import LOCK_KEY, PlanLock, PlanLockBusy, PlanLockPolicy
from eagle_datagen.storage.objects import put_once
from eagle_datagen.storage.output_root import open_output_root

FAST = PlanLockPolicy(wait_s=60.0, stale_s=60.0, poll_s=0.02)


@pytest.fixture
def root(output_uri):
    return open_output_root(output_uri)


def wait_until(condition, what: str, deadline_s: float = 60.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {deadline_s} s: {what}"
        time.sleep(0.02)


def test_the_lock_is_an_object_with_its_holder_and_is_deleted_on_release(root):
    with PlanLock(root, "run-a", FAST) as lock:
        holder = json.loads(root.read_bytes(LOCK_KEY))
        assert holder["run_id"] == "run-a" and holder["pid"] > 0
        assert lock.acquired_at == root.list_modified(LOCK_KEY)[LOCK_KEY]  # the store's time, not this machine's
        lock.verify()
    assert root.list("locks/") == []


def test_a_held_lock_makes_the_next_planner_wait_until_it_is_released(root, caplog):
    caplog.set_level(logging.INFO, logger="eagle_datagen.generation.plan_lock")
    order: list[str] = []
    with PlanLock(root, "first", FAST):
        second = threading.Thread(target=lambda: order.append(hold(root, "second")))
        second.start()
        wait_until(lambda: "waiting for the plan lock" in caplog.text, "the second planner waits")
        assert "held by run first" in caplog.text
        order.append("first released")
    second.join(timeout=60)
    assert order == ["first released", "second held"]
    assert root.list("locks/") == []


def hold(root, run_id: str) -> str:
    with PlanLock(root, run_id, FAST):
        return f"{run_id} held"


def test_a_planner_gives_up_after_its_wait_with_who_holds_the_lock(root):
    with PlanLock(root, "slow-planner", FAST):
        with pytest.raises(PlanLockBusy, match=r"waited \d+ s for the plan lock .*held by run slow-planner"):
            with PlanLock(root, "impatient", PlanLockPolicy(wait_s=0.2, stale_s=60.0, poll_s=0.02)):
                pass


def test_the_lock_of_a_planner_that_died_is_broken_once_it_has_been_seen_unchanged_long_enough(root, caplog):
    dead = json.dumps({"run_id": "dead", "host": "gone", "pid": 1, "token": "x", "created": "2026-01-01"}).encode()
    put_once(root, LOCK_KEY, dead)  # what a planner killed while it held the lock leaves behind
    with PlanLock(root, "next", PlanLockPolicy(wait_s=60.0, stale_s=0.3, poll_s=0.02)):
        assert json.loads(root.read_bytes(LOCK_KEY))["run_id"] == "next"
    assert "breaking the plan lock" in caplog.text
    assert root.list("locks/") == []


def test_a_holder_whose_lock_was_broken_knows_it_and_leaves_the_new_lock_alone(root):
    with PlanLock(root, "slow", FAST) as slow:
        root.write_bytes(LOCK_KEY, b'{"run_id": "impostor"}')  # a waiter broke it and took it
        with pytest.raises(PlanLockBusy, match="lost the plan lock"):
            slow.verify()
    assert root.read_bytes(LOCK_KEY) == b'{"run_id": "impostor"}'  # released nothing that was not its own
