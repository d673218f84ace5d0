"""The prompts an evaluation sends, per category.

By default the held-out prompts of the output root's published runs (heldout.py): the prompt ids stored in their
data files, exactly, read from the files the manifests list (checksums checked), so a drafter trained on an export
of the same root is never scored on a prompt it was trained on (exports drop these very rows). `--prompts` sources
are read and tokenized instead by the pipeline's own sourcing and tokenization (the chat template on the client,
the profile's checks), as a run's prompts are.

A prompt is its token ids: `prompt_key` hashes them, so the same prompt in two runs (or two evaluations) is one
prompt, and an earlier evaluation pairs with this one prompt for prompt. `--max-prompts-per-category N` keeps the N
prompts of each category that come first in an order the seed fixes (a hash of seed and key, not the file order).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from eagle_datagen.errors import ConfigError, DataGenError
from eagle_datagen.heldout import POLICY_KEY, heldout_rows, read_policy
from eagle_datagen.modes import THINKING
from eagle_datagen.records import PromptRecord
from eagle_datagen.storage.local_copy import local_copy
from eagle_datagen.storage.manifest import list_manifests
from eagle_datagen.storage.output_root import OutputRoot
from eagle_datagen.tokenization.stage import TokenizeSetup, stream_and_tokenize

PROMPT_SCHEMA = pa.schema(
    [
        ("category", pa.string()),
        ("prompt_key", pa.string()),
        ("prompt_id", pa.string()),
        ("record_id", pa.string()),
        ("run_id", pa.string()),  # the published run whose held-out row it is (null for --prompts sources)
        ("prompt_ids", pa.list_(pa.int32())),
        ("mode", pa.string()),  # the mode it was rendered in (modes.py): its answer is sampled in that mode
    ]
)


@dataclass(frozen=True)
class EvalPrompt:
    category: str
    prompt_key: str
    prompt_id: str
    record_id: str | None
    run_id: str | None
    prompt_ids: list[int]
    mode: str = THINKING


def prompt_key(ids: list[int] | np.ndarray) -> str:
    """The prompt's identity across runs and evaluations: a hash of its token ids."""
    return hashlib.sha256(np.asarray(ids, dtype="<i4").tobytes()).hexdigest()[:32]


def _rows(table: pa.Table, run_id: str | None) -> Iterator[EvalPrompt]:
    """The table's prompts; a row without a mode (a file written before modes) is thinking."""
    names = [n for n in ("category", "prompt_id", "record_id", "mode") if n in table.column_names]
    for row, ids in zip(table.select(names).to_pylist(), table.column("prompt_ids"), strict=True):
        values = ids.values.to_numpy(zero_copy_only=False)
        yield EvalPrompt(
            row["category"],
            prompt_key(values),
            row["prompt_id"],
            row["record_id"],
            run_id,
            values.tolist(),
            row.get("mode") or THINKING,
        )


def heldout_prompts(root: OutputRoot, runs: list[str], categories: list[str] | None) -> list[EvalPrompt]:
    """Every held-out prompt of the root's published runs (those of `runs` when given), once each, in the order of
    the runs' manifests (oldest first) and their files."""
    policy = read_policy(root)
    if policy is None:
        raise ConfigError(
            f"{root.uri} has no held-out prompts ({POLICY_KEY} is missing: no run there has planned since the held-out "
            "split exists): publish a run there first, or give --prompts"
        )
    manifests = sorted(list_manifests(root), key=lambda m: (m["created_at"], m["run_id"]))
    missing = sorted(set(runs) - {m["run_id"] for m in manifests})
    if missing:
        raise ConfigError(
            f"no published run {missing} under {root.uri}: check --run-id (published runs have a manifest)"
        )
    chosen: dict[str, EvalPrompt] = {}
    for manifest in manifests:
        if runs and manifest["run_id"] not in runs:
            continue
        for entry in manifest["files"]:
            if entry["kind"] != "data" or (categories and entry.get("category") not in categories):
                continue
            with local_copy(root, entry["key"]) as (path, sha256):
                if sha256 != entry["sha256"]:
                    raise DataGenError(
                        f"{root.location(entry['key'])} does not match the checksum its manifest lists: the store was "
                        "altered; restore the file or publish the data again"
                    )
                parquet = pq.ParquetFile(str(path), memory_map=False)
                columns = ["category", "prompt_id", "record_id", "prompt_ids"]
                columns += ["mode"] if "mode" in parquet.schema_arrow.names else []
                marked = "heldout" in parquet.schema_arrow.names  # files written before the column: by prompt id
                for group in range(parquet.metadata.num_row_groups):
                    table = parquet.read_row_group(group, columns=columns + (["heldout"] if marked else []))
                    marks = table.column("heldout").to_pylist() if marked else [None] * table.num_rows
                    held = heldout_rows(marks, table.column("prompt_id").to_pylist(), policy)
                    for prompt in _rows(table.filter(pa.array(held, pa.bool_())), manifest["run_id"]):
                        chosen.setdefault(prompt.prompt_key, prompt)
    if not chosen:
        raise ConfigError(
            f"the published runs under {root.uri} hold no held-out prompt"
            + (f" of categories {categories}" if categories else "")
            + f" (held-out fraction {policy.fraction:g}): give --prompts, or check --categories and --run-id"
        )
    return list(chosen.values())


def source_prompts(
    setup: TokenizeSetup, root: OutputRoot, rejects_key: str, modes: Callable[[PromptRecord], str] | None = None
) -> list[EvalPrompt]:
    """`--prompts` sources, read and tokenized as a run reads them (rejects written to `rejects_key`), each record
    rendered in the mode `modes` gives it (default: thinking)."""
    setup = replace(setup, options=replace(setup.options, limit=None))
    prompts: dict[str, EvalPrompt] = {}
    with stream_and_tokenize(setup, root, rejects_key, modes=modes) as tokenized:
        spool = tokenized.spool
        for category in spool.categories:
            for batch in spool.batches(category):
                table = pa.Table.from_batches([batch]).append_column(
                    "category", pa.array([category] * batch.num_rows, pa.string())
                )
                for prompt in _rows(table, None):
                    prompts.setdefault(prompt.prompt_key, prompt)
    if not prompts:
        raise ConfigError("no prompt of --prompts is left to evaluate on: check the sources and --categories")
    return list(prompts.values())


def choose(prompts: list[EvalPrompt], max_per_category: int | None, seed: int) -> list[EvalPrompt]:
    """Every prompt, or the first `max_per_category` of each category in the seed's order; category by category."""

    def order(prompt: EvalPrompt) -> str:
        return hashlib.sha256(f"{seed}:{prompt.prompt_key}".encode()).hexdigest()

    chosen = []
    for category in sorted({p.category for p in prompts}):
        members = sorted((p for p in prompts if p.category == category), key=order)
        chosen += members[:max_per_category] if max_per_category else members
    return chosen


def prompts_table(prompts: list[EvalPrompt]) -> pa.Table:
    return pa.table(
        {
            "category": [p.category for p in prompts],
            "prompt_key": [p.prompt_key for p in prompts],
            "prompt_id": [p.prompt_id for p in prompts],
            "record_id": [p.record_id for p in prompts],
            "run_id": [p.run_id for p in prompts],
            "prompt_ids": [p.prompt_ids for p in prompts],
            "mode": [p.mode for p in prompts],
        },
        schema=PROMPT_SCHEMA,
    )


def prompts_of(table: pa.Table, categories: list[str] | None = None) -> list[EvalPrompt]:
    rows = table.to_pylist()
    return [EvalPrompt(**row) for row in rows if not categories or row["category"] in categories]
