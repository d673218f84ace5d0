"""Helpers shared by the generation tests: run options against stand-in servers, and `eagle-datagen run`
as a subprocess that a test can SIGKILL on cue."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eagle_datagen.generation.checkpoint import CheckpointPolicy
from eagle_datagen.generation.publish import PublishOptions
from eagle_datagen.generation.stage import RunOptions, SamplingOverrides
from eagle_datagen.inference.retry import RetryPolicy
from eagle_datagen.tokenization.stage import TokenizeOptions

from conftest import REPO, user_record, write_jsonl

CLI_RUN = [sys.executable, "-m", "eagle_datagen.cli", "run", "--tokenizer", "standin:kimi-k2.5"]


def run_options(
    tmp_path: Path, urls: list[str], run_id: str = "r", prompts: int = 30, output: str | None = None, **changes
) -> RunOptions:
    """A small run (`prompts` prompts of growing length, shards of 10) with quick retries and checkpoints."""
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"question {i}: " + "word " * i) for i in range(prompts)])
    base = dict(
        prompts=TokenizeOptions(
            output=output or str(tmp_path / "out"), tokenizer="standin:kimi-k2.5", prompts=[str(src)]
        ),
        sglang_urls=urls,
        run_id=run_id,
        sampling=SamplingOverrides(max_new_tokens=1000),
        shard_size=10,
        retry=RetryPolicy(max_attempts=10, base_delay_s=0.01, max_delay_s=0.05),
        checkpoint=CheckpointPolicy(max_samples=8, max_age_s=0.2),
        publish=PublishOptions(draft_vocab_size=100),
        canary=False,
        preflight_wait_s=2,
    )
    return RunOptions(**(base | changes))


def checkpointed_samples(root: Path, run_id: str) -> int:
    """Samples checkpointed so far under a local output root (lines of its chunk files)."""
    return sum(len(p.read_bytes().splitlines()) for p in root.glob(f"checkpoints/run={run_id}/shard=*/chunk-*.jsonl"))


@dataclass
class Invocation:
    returncode: int
    stdout: str
    stderr: str
    killed: bool  # ended by the test's SIGKILL


def run_cli(
    args: list[str],
    kill_when: Callable[[], bool] | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 300,
    poll_s: float = 0.05,
) -> Invocation:
    """`eagle-datagen run ARGS` until it exits, or SIGKILL it as soon as `kill_when()` is true.

    Output goes to files, not pipes: a run that logs a lot must not block on a full pipe while we poll."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(CLI_RUN + args, cwd=REPO, env=env or dict(os.environ), stdout=out, stderr=err)
        deadline = time.monotonic() + timeout_s
        try:
            while process.poll() is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"eagle-datagen run did not finish within {timeout_s}s")
                if kill_when is not None and kill_when():
                    process.send_signal(signal.SIGKILL)
                    break
                time.sleep(poll_s)
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
        out.seek(0)
        err.seek(0)
        killed = process.returncode == -signal.SIGKILL  # not when it had exited by itself just before
        return Invocation(process.returncode, out.read().decode(), err.read().decode(), killed)
