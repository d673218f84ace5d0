"""A finished shard synthesized on an output root, without a server: its plan and its checkpoint chunks.

`synthesize_shard` writes a one-shard plan (`prompts` Kimi-K2.5 prompts, `samples` samples each) and a
checkpoint for every sample, in chunks of `chunk` samples (with their indexes), as generation leaves them:
out of plan order (samples finish in a window around their dispatch), optionally with a sample stored twice
and a chunk cut short by a crash. Outputs are Zipf-like ids ending `</think>`, an answer token and the EOS;
every `bad_every`-th sample lacks `</think>` (quarantined). Used by bench_shard_memory.py and the publishing
tests.
"""

from __future__ import annotations

import json
import random

import numpy as np

from eagle_datagen.generation.checkpoint import INDEX_SUFFIX, checkpoint_prefix, finish_type
from eagle_datagen.generation.plan import CategorySettings, RunPlan, shard_requests, split_into_shards, write_plan
from eagle_datagen.records import PromptRecord
from eagle_datagen.storage.output_root import OutputRoot
from eagle_datagen.tokenization.tokenize import TokenizedPrompt

MODEL = "moonshotai/Kimi-K2.5"
THINK_START, THINK_END, EOS = 163606, 163607, 163586
SAMPLING = {"temperature": 1.0, "max_new_tokens": 32768}


def _prompt(rng: np.random.Generator, length: int) -> list[int]:
    return [163584, *rng.integers(0, 50_000, max(0, length - 2)).tolist(), THINK_START]


def _output(rng: np.random.Generator, length: int, valid: bool) -> np.ndarray:
    # ids above 256 (CPython caches the small ints: lists of them would look smaller than real ones)
    body = np.minimum(257 + (rng.pareto(0.7, max(1, length - 3)) * 7).astype(np.int64), 150_000)
    tail = [THINK_END, int(rng.integers(0, 50)), EOS] if valid else [int(rng.integers(0, 50)), 7, EOS]
    return np.concatenate([body, np.asarray(tail, dtype=np.int64)])[:length]


def synthesize_shard(
    root: OutputRoot,
    run_id: str,
    prompts: int,
    samples: int,
    output_tokens: tuple[int, int],
    prompt_tokens: tuple[int, int] = (800, 1800),
    chunk: int = 64,
    window: int = 256,
    bad_every: int = 11,
    seed: int = 0,
    duplicate: bool = False,
    cut_chunk: bool = False,
) -> tuple[RunPlan, int]:
    """The plan and the number of output tokens written."""
    rng = np.random.default_rng(seed)
    records = [
        TokenizedPrompt(
            PromptRecord(f"{seed}-p{i:07d}", f"rec-{i}", "chat", [{"role": "user", "content": "x"}], None, None, "-"),
            _prompt(rng, int(rng.integers(*prompt_tokens))),
        )
        for i in range(prompts)
    ]
    [(info, planned)] = split_into_shards([(p, list(range(samples))) for p in records], prompts)
    plan = RunPlan(run_id, MODEL, "kimi-k2.5", {"chat": CategorySettings(SAMPLING, samples)}, [info], {})
    write_plan(root, plan, [planned])
    del records, planned
    requests = shard_requests(root, plan, 0)
    # finish order: dispatched in plan order, finished anywhere within `window` requests of it
    finish = np.argsort(np.arange(len(requests)) + rng.uniform(0, window, len(requests)), kind="stable")
    order = [int(i) for i in finish]
    if duplicate and len(order) > 3:
        order.insert(len(order) // 2, order[1])  # stored twice: an attempt that finished after a retry's
    tokens = 0
    shuffle = random.Random(seed)
    redo: tuple[list[str], list[str], list[str]] = ([], [], [])  # the cut line, stored again by a resumed run
    chunks = list(range(0, len(order), chunk))
    for number, start in enumerate(chunks):
        lines, ids, outcomes = [], [], []
        for i in order[start : start + chunk]:
            request = requests[i]
            length = int(rng.integers(*output_tokens))
            output = _output(rng, length, valid=bad_every <= 0 or i % bad_every != bad_every - 1)
            tokens += len(output)
            row = {
                "sample_id": request.sample_id,
                "prompt_id": request.prompt_id,
                "sample_index": request.sample_index,
                "shard": 0,
                "output_ids": "@IDS@",
                "finish_reason": {"type": "stop", "matched": EOS},
                "meta_info": {
                    "completion_tokens": len(output),
                    "prompt_tokens": len(request.prompt_ids),
                    "weight_version": "w1",
                    "cached_tokens": shuffle.randrange(len(request.prompt_ids)),
                },
                "endpoint": "http://127.0.0.1:1",
                "attempts": 1,
                "error": None,
            }
            text = json.dumps(row, separators=(",", ":"))
            lines.append(text.replace('"@IDS@"', "[" + ",".join(map(str, output.tolist())) + "]"))
            ids.append(request.sample_id)
            outcomes.append(finish_type(row))
        key = f"{checkpoint_prefix(run_id, 0)}chunk-{number:020d}-{seed:08x}"
        if cut_chunk and number == 1:
            payload = ("\n".join(lines) + "\n").encode()
            payload = payload[: len(payload) - len(lines[-1]) // 2 - 1]  # a crash mid-write: no index either
            root.write_bytes(f"{key}.jsonl", payload)
            redo = ([lines[-1]], [ids[-1]], [outcomes[-1]])
            continue
        _write_chunk(root, key, lines, ids, outcomes)
    if redo[0]:
        _write_chunk(root, f"{checkpoint_prefix(run_id, 0)}chunk-{len(chunks):020d}-{seed:08x}", *redo)
    return plan, tokens


def _write_chunk(root: OutputRoot, key: str, lines: list[str], ids: list[str], outcomes: list[str]) -> None:
    root.write_bytes(f"{key}.jsonl", ("\n".join(lines) + "\n").encode())
    index = {"sample_ids": ids, "outcomes": outcomes}
    root.write_bytes(f"{key}{INDEX_SUFFIX}", json.dumps(index, separators=(",", ":")).encode())
