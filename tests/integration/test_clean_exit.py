"""The CLI's finished-run path exits 0 every time, with the CPUs busy.

A rerun of a finished run used to print success and then abort at interpreter exit (SIGABRT, "terminate
called without an active exception") about 1 time in 12 on a busy machine: an Arrow thread freed a Parquet
reader holding Python-owned memory while Python finalized (storage/parquet.py `arrow_owned` says how). The
abort needs a race at exit, so one run proves nothing: the path runs `EAGLE_DATAGEN_EXIT_RUNS` times (8 by
default, 50 in `make test`), two at a time, with a busy-looping process competing for the CPUs.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread

from conftest import REPO, user_record, write_jsonl

pytestmark = pytest.mark.slow
RUNS = int(os.environ.get("EAGLE_DATAGEN_EXIT_RUNS", "8"))
assert RUNS >= 1, "EAGLE_DATAGEN_EXIT_RUNS must be at least 1: zero runs would prove nothing"
AT_ONCE = 2
SPINNERS = 1  # with two runs at once, three processes compete for two cores on the smallest CI machine


def _spin() -> None:
    """Busy until killed: the load lasts the whole test, however long its runs take (50 took ~632 s)."""
    while True:
        pass


@pytest.mark.timeout(120 + 30 * RUNS)  # a rerun takes 3-25 s, depending on how busy the machine already is
def test_finished_run_exits_zero_every_time_under_cpu_pressure(tmp_path):
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"q{i}") for i in range(4)])
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        args = [
            sys.executable, "-m", "eagle_datagen.cli", "run", "--tokenizer", "standin:kimi-k2.5",
            "--trust-remote-code", "--draft-vocab-size", "16", "--prompts", str(src), "--sglang-url", sim.url,
            "--output", str(tmp_path / "o"), "--run-id", "r",
        ]  # fmt: skip

        def run(_: int) -> subprocess.CompletedProcess:
            return subprocess.run(args, capture_output=True, text=True, cwd=REPO, env=dict(os.environ), timeout=300)

        first = run(0)
        assert first.returncode == 0, first.stderr[-2000:]
        context = multiprocessing.get_context("spawn")
        spinners = [context.Process(target=_spin, daemon=True) for _ in range(SPINNERS)]
        for spinner in spinners:
            spinner.start()
        try:
            with ThreadPoolExecutor(AT_ONCE) as pool:
                results = list(pool.map(run, range(RUNS)))
            assert all(spinner.is_alive() for spinner in spinners)  # the CPUs were busy until the last run
        finally:
            for spinner in spinners:
                spinner.kill()
                spinner.join()
    assert len(results) == RUNS
    failed = [(i, r.returncode, r.stderr[-300:]) for i, r in enumerate(results) if r.returncode != 0]
    assert not failed, f"{len(failed)} of {RUNS} reruns did not exit 0: {failed[:3]}"
    assert all("0 generated now" in r.stdout for r in results)
