"""Accept length of one speculative SGLang deployment on a prompt set: `eagle-datagen evaluate`, or a direct reader.

The CPU loop (cpu_loop.py) measures each drafter through `evaluate_drafter`, the one place that chooses how:
- `eagle-datagen evaluate` (issue 30, its contract in the evaluation docs) when the installed CLI has it
  (`eagle-datagen evaluate --help` exits 0): it renders, sends and aggregates exactly as the product does;
- otherwise `read_acceptance`, a small reader kept for the loop until that command exists: it sends each prompt's
  token ids (tokenized by `eagle-datagen tokenize`, so with the pipeline's own template) to the native /generate
  and reads the per-request metrics SGLang answers in `meta_info` on a server started with a drafter
  (`spec_accept_length`: output tokens per verify step, bonus token included; `spec_accept_rate`). It writes the
  same keys the command's report has (schema eagle-datagen/evaluation/v1): per category and overall, `requests`,
  `failed`, `output_tokens`, and `accept_length` / `accept_rate` as {"mean", "ci95"}, a prompt's value being the
  mean of its requests and the interval a 95% Student-t interval over prompts. A failed request is counted in
  `failed`, never averaged in; an answer without a verify step (its first token, from the prefill, ended it:
  SGLang then gives no spec_* keys) is counted in `unverified` and has no accept length either. The per-request
  records it aggregates are kept in the report (`records`: category, prompt, the spec_* metrics, the output ids),
  so that any figure can be recomputed from them.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import requests

SCHEMA = "eagle-datagen/evaluation/v1"
CLI = [sys.executable, "-m", "eagle_datagen.cli"]


@dataclass(frozen=True)
class EvalRequest:
    """What is measured: the prompt set, how it is tokenized, and the sampling of every request."""

    prompts: Path  # prompt records (JSONL); each carries its category
    tokenizer: str
    trust_remote_code: bool = False
    max_new_tokens: int = 32
    temperature: float = 1.0  # the profile's; SGLang verifies greedily on the CPU whatever it is
    top_p: float = 0.95
    concurrency: int = 8


def evaluate_command_exists() -> bool:
    return subprocess.run([*CLI, "evaluate", "--help"], capture_output=True).returncode == 0


def evaluate_drafter(url: str, request: EvalRequest, label: str, report: Path) -> dict[str, Any]:
    """The evaluation report of the deployment at `url` (also written to `report`): the command, else the reader."""
    if evaluate_command_exists():
        command = [*CLI, "evaluate", "--sglang-url", url, "--tokenizer", request.tokenizer,
                   "--prompts", str(request.prompts), "--max-new-tokens", str(request.max_new_tokens),
                   "--temperature", str(request.temperature), "--top-p", str(request.top_p),
                   "--concurrency", str(request.concurrency), "--label", label, "--to", str(report)]
        if request.trust_remote_code:
            command.append("--trust-remote-code")
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"eagle-datagen evaluate failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        return json.loads(report.read_text())
    result = read_acceptance(url, tokenized_prompts(request, report.parent / f"{report.stem}-tokenized"), request,
                             label)
    report.write_text(json.dumps(result, indent=2) + "\n")
    return result


def tokenized_prompts(request: EvalRequest, work: Path) -> list[tuple[str, list[int]]]:
    """(category, prompt ids) of every prompt, through `eagle-datagen tokenize` (the pipeline's own template)."""
    command = [*CLI, "tokenize", "--prompts", str(request.prompts), "--tokenizer", request.tokenizer,
               "--output", str(work)]
    if request.trust_remote_code:
        command.append("--trust-remote-code")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"eagle-datagen tokenize failed: {done.stderr.strip()[-2000:]}")
    prompts = []
    for part in sorted(work.glob("tokenized/category=*/part-*.parquet")):
        table = pq.read_table(part, columns=["category", "prompt_ids"])
        prompts += zip(table.column("category").to_pylist(), table.column("prompt_ids").to_pylist(), strict=True)
    return prompts


def read_acceptance(url: str, prompts: Sequence[tuple[str, list[int]]], request: EvalRequest,
                    label: str) -> dict[str, Any]:
    """Send every prompt once to `url`'s /generate and aggregate its spec_* metrics per category."""
    sampling = {"max_new_tokens": request.max_new_tokens, "temperature": request.temperature, "top_p": request.top_p}
    with requests.Session() as session:
        def send(prompt: tuple[str, list[int]]) -> tuple[str, dict[str, Any] | None, list[int] | None]:
            """(category, meta_info, output ids); None, None for a failed request."""
            category, ids = prompt
            try:
                answer = session.post(f"{url}/generate", json={"input_ids": ids, "sampling_params": sampling},
                                      timeout=600)
                body = answer.json() if answer.status_code == 200 else {}
            except (requests.RequestException, ValueError):
                body = {}
            meta = body.get("meta_info") if isinstance(body, dict) else None
            return (category, meta, body.get("output_ids")) if isinstance(meta, dict) else (category, None, None)

        with ThreadPoolExecutor(max_workers=request.concurrency) as pool:
            answers = list(pool.map(send, prompts))
    categories = sorted({category for category, _, _ in answers})
    per_category = {c: aggregate([meta for category, meta, _ in answers if category == c]) for c in categories}
    records = [{"category": category, "prompt": index, "failed": meta is None, "output_ids": output,
                **{key: value for key, value in (meta or {}).items() if key.startswith("spec_")}}
               for index, (category, meta, output) in enumerate(answers)]
    return {"schema": SCHEMA, "label": label, "categories": per_category,
            "overall": aggregate([meta for _, meta, _ in answers]), "records": records}


def aggregate(metas: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    """One prompt per request here, so a prompt's value is its request's; failures (None) and answers without a
    verify step are only counted."""
    answered = [meta for meta in metas if meta is not None]
    verified = [meta for meta in answered if "spec_accept_length" in meta]
    return {
        "requests": len(metas),
        "failed": len(metas) - len(answered),
        "unverified": len(answered) - len(verified),
        "output_tokens": sum(int(meta.get("completion_tokens", 0)) for meta in answered),
        "accept_length": mean_ci95([float(meta["spec_accept_length"]) for meta in verified]),
        "accept_rate": mean_ci95([float(meta["spec_accept_rate"]) for meta in verified]),
    }


# The 97.5% quantile of Student's t for 1..30 degrees of freedom (tables), beyond by its Cornish-Fisher expansion.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
_Z975 = 1.959964


def t975(degrees: int) -> float:
    if degrees <= len(_T975):
        return _T975[degrees - 1]
    z, v = _Z975, float(degrees)
    return z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)


def mean_ci95(values: Sequence[float]) -> dict[str, Any]:
    """The mean and its 95% Student-t interval (None for no values; the mean alone for one)."""
    if not values:
        return {"mean": None, "ci95": None}
    mean = statistics.fmean(values)
    if len(values) < 2:
        return {"mean": mean, "ci95": [mean, mean]}
    half = t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return {"mean": mean, "ci95": [mean - half, mean + half]}
