"""Accept length of one speculative SGLang deployment, measured by the product: `eagle-datagen evaluate`.

The CPU loop (cpu_loop.py) measures each drafter through `evaluate_drafter`: `eagle-datagen evaluate --output ROOT
--run-id RUN` against the server that serves the target with that drafter, on the held-out prompts of the loop's
on-policy run (the product's frozen split, heldout.py: no export holds them, so no drafter trained on them). The
command sends each held-out row's stored prompt ids exactly as a run sends its samples and reports, per category
and overall, `requests`, `failed`, `output_tokens`, the headline `accept_length_total` (output tokens / verify
steps) and `accept_length_no_prefill` as {"value", "ci95", "n"}, and the means over prompts `accept_length` /
`accept_rate` as {"mean", "ci95"} (95% intervals from a bootstrap over prompts; schema eagle-datagen/evaluation/v1,
docs/internals/evaluation.md), with the per-request records beside it. The loop keeps no reader or statistics of its
own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "eagle_datagen.cli"]


@dataclass(frozen=True)
class EvalRequest:
    """What is measured: the held-out prompts of one published run, how they were tokenized, and the sampling."""

    output: Path  # the output root of the runs (its held-out prompts)
    run_id: str  # the run whose held-out prompts are sent
    tokenizer: str
    trust_remote_code: bool = False
    max_new_tokens: int = 32
    temperature: float = 1.0  # the profile's; SGLang verifies greedily on the CPU whatever it is
    top_p: float = 0.95
    concurrency: int = 8


def evaluate_command(url: str, request: EvalRequest, label: str, report: Path,
                     compare: tuple[str, str] | None = None) -> list[str]:
    command = [*CLI, "evaluate", "--output", str(request.output), "--run-id", request.run_id, "--sglang-url", url,
               "--tokenizer", request.tokenizer, "--max-new-tokens", str(request.max_new_tokens),
               "--temperature", str(request.temperature), "--top-p", str(request.top_p),
               "--concurrency", str(request.concurrency), "--label", label, "--to", str(report)]  # fmt: skip
    if compare:  # the paired A/B: the same requests to deployment B
        command += ["--compare-url", compare[0], "--compare-label", compare[1]]
    return [*command, "--trust-remote-code"] if request.trust_remote_code else command


def evaluate_drafter(url: str, request: EvalRequest, label: str, report: Path,
                     compare: tuple[str, str] | None = None) -> dict[str, Any]:
    """The evaluation report of the deployment at `url` (written to `report` by `eagle-datagen evaluate`); with
    `compare` (url, label), the paired A/B against that deployment (the report's "comparison")."""
    done = subprocess.run(evaluate_command(url, request, label, report, compare), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"eagle-datagen evaluate failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(report.read_text())
