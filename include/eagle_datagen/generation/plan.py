"""Run plans: the fixed split of a run's tokenized prompts into shards, stored under the output root.

A shard is a fixed list of prompts of one category (so every data file belongs to one category). The
plan is written once, before generation: `plans/run=<id>/plan.json` (the run's settings and shard list)
and `plans/run=<id>/shard-<NNNNN>.parquet` (its prompts). A rerun with the same run id, on any worker,
loads the same plan instead of sourcing again, so shard membership never changes under a resume.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from eagle_datagen.conversation.job import ConversationJob
from eagle_datagen.errors import ConfigError
from eagle_datagen.generation.plan_order import extensions_together
from eagle_datagen.inference.samples import SampleRequest
from eagle_datagen.modes import INSTANT, THINKING, prompt_mode
from eagle_datagen.settings import new_run_hint
from eagle_datagen.storage.output_root import OutputRoot
from eagle_datagen.storage.parquet import read_parquet_bytes
from eagle_datagen.tokenization.tokenize import TokenizedPrompt

PLAN_SCHEMA = pa.schema(
    [
        ("record_id", pa.string()),
        ("prompt_id", pa.string()),
        ("category", pa.string()),
        ("prompt_ids", pa.list_(pa.int32())),
        ("sample_indices", pa.list_(pa.int32())),  # which samples of the prompt this run generates
        # turns: each: the source conversation as JSON {"messages", "tools"}; null for turns: last
        ("conversation", pa.string()),
        # the mode the prompt was rendered in and is generated in (modes.py); a plan written before modes has
        # none: thinking
        ("mode", pa.string()),
        # held out of every export (heldout.py); plans written before the column read it as absent
        ("heldout", pa.bool_()),
    ]
)


@dataclass(frozen=True)
class ShardInfo:
    index: int
    category: str
    prompts: int
    samples: int


@dataclass(frozen=True)
class CategorySettings:
    # SGLang sampling_params without the per-sample seed: of the category's mode (of thinking in a mix)
    sampling: dict[str, Any]
    samples_per_prompt: int
    turns: str = "last"  # "each": one generation step per assistant turn (conversation/driver.py)
    max_tool_steps: int = 8
    top_logprobs: int = 0  # k > 0: each answer's top-k logprobs per output token are stored (inference/logprobs.py)
    # thinking | instant | mix (modes.py). A mix also keeps the share of instant prompts, the seed that chooses
    # them and the instant samples' sampling; a plan written before modes loads as thinking.
    mode: str = THINKING
    instant_fraction: float | None = None
    mode_seed: int | None = None
    instant_sampling: dict[str, Any] | None = None

    def sampling_of(self, mode: str | None) -> dict[str, Any]:
        """The sampling of a sample generated in `mode` (None: the category's own)."""
        return self.instant_sampling if mode == INSTANT and self.instant_sampling is not None else self.sampling

    def mode_of(self, prompt_id: str) -> str:
        """The mode a prompt of this category is generated in."""
        return prompt_mode(self.mode, self.instant_fraction, self.mode_seed or 0, prompt_id)


@dataclass(frozen=True)
class RunPlan:
    run_id: str
    model: str
    profile: str
    categories: dict[str, CategorySettings]
    shards: list[ShardInfo]
    provenance: dict[str, Any]  # tokenizer and template hashes
    heldout: dict[str, Any] | None = None  # the output root's held-out policy when the plan was made (heldout.py)

    @property
    def total_samples(self) -> int:
        return sum(s.samples for s in self.shards)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "model": self.model,
            "profile": self.profile,
            "categories": {c: asdict(s) for c, s in self.categories.items()},
            "shards": [asdict(s) for s in self.shards],
            "provenance": self.provenance,
            "heldout": self.heldout,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RunPlan:
        return cls(
            run_id=raw["run_id"],
            model=raw["model"],
            profile=raw["profile"],
            categories={c: CategorySettings(**s) for c, s in raw["categories"].items()},
            shards=[ShardInfo(**s) for s in raw["shards"]],
            provenance=raw["provenance"],
            heldout=raw.get("heldout"),
        )

    def settings_key(self) -> dict[str, Any]:
        """What must match for a rerun to continue this plan."""
        return {"model": self.model, "categories": self.to_json()["categories"]}


def plan_key(run_id: str) -> str:
    return f"plans/run={run_id}/plan.json"


def shard_key(run_id: str, index: int) -> str:
    return f"plans/run={run_id}/shard-{index:05d}.parquet"


PlannedPrompt = tuple[TokenizedPrompt, list[int]]  # a prompt and the sample indices to generate for it


@dataclass
class PlannedCategory:
    """A category of a plan being built, as arrays over the rows of its tokenized spool (row r: the spool's r-th
    prompt): each prompt's sample ids as 16-byte digests (`sample_ids`, rows x samples per prompt, S16: what
    choosing samples compares) and which of them the plan generates (`wanted`, the same shape). No prompt's ids
    or text, and no Python object per prompt: 17 bytes a sample."""

    category: str
    sample_ids: np.ndarray
    wanted: np.ndarray

    @property
    def samples(self) -> int:
        return int(np.count_nonzero(self.wanted))

    def rows(self) -> np.ndarray:
        """The spool rows of the prompts with a sample to generate, ascending."""
        return np.flatnonzero(self.wanted.any(axis=1))

    def wanted_ids(self) -> np.ndarray:
        """The digests of the samples to generate: prompt by prompt, each in sample index order."""
        return self.sample_ids[self.wanted]

    def keep(self, wanted: np.ndarray) -> PlannedCategory:
        return PlannedCategory(self.category, self.sample_ids, self.wanted & wanted)


def parquet_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


def split_into_shards(prompts: list[PlannedPrompt], shard_size: int) -> list[tuple[ShardInfo, list[PlannedPrompt]]]:
    """Each category's prompts in shards of `shard_size`, in their order except that prompts extending one
    another (a conversation's steps) are kept together (`extensions_together`)."""
    by_category: dict[str, list[PlannedPrompt]] = {}
    for prompt, indices in prompts:
        by_category.setdefault(prompt.record.category, []).append((prompt, indices))
    shards = []
    for category in sorted(by_category):
        rows = extensions_together(by_category[category], lambda planned: planned[0].prompt_ids)
        for start in range(0, len(rows), shard_size):
            chunk = rows[start : start + shard_size]
            samples = sum(len(indices) for _, indices in chunk)
            shards.append((ShardInfo(len(shards), category, len(chunk), samples), chunk))
    return shards


def write_plan(root: OutputRoot, plan: RunPlan, shard_prompts: list[list[PlannedPrompt]]) -> None:
    """Shard files first, plan.json last: a plan.json on storage means the whole plan is there."""
    for info, prompts in zip(plan.shards, shard_prompts, strict=True):
        table = pa.table(
            {
                "record_id": [p.record.record_id for p, _ in prompts],
                "prompt_id": [p.record.prompt_id for p, _ in prompts],
                "category": [p.record.category for p, _ in prompts],
                "prompt_ids": [p.prompt_ids for p, _ in prompts],
                "sample_indices": [indices for _, indices in prompts],
                "conversation": [
                    _conversation_json(p) if plan.categories[p.record.category].turns == "each" else None
                    for p, _ in prompts
                ],
                "mode": [p.record.mode for p, _ in prompts],
                "heldout": [None] * len(prompts),
            },
            schema=PLAN_SCHEMA,
        )
        buffer = io.BytesIO()
        pq.write_table(table, buffer, compression="zstd")
        root.write_bytes(shard_key(plan.run_id, info.index), buffer.getvalue())
    root.write_bytes(plan_key(plan.run_id), json.dumps(plan.to_json(), indent=1).encode())


def _conversation_json(prompt: TokenizedPrompt) -> str:
    return json.dumps({"messages": prompt.record.messages, "tools": prompt.record.tools}, ensure_ascii=False)


def read_shard_rows(root: OutputRoot, plan: RunPlan, index: int) -> list[dict[str, Any]]:
    """The shard's planned prompts as rows (prompt order)."""
    return read_parquet_bytes(root.read_bytes(shard_key(plan.run_id, index))).to_pylist()


def load_plan(root: OutputRoot, run_id: str) -> RunPlan | None:
    if plan_key(run_id) not in root.list(f"plans/run={run_id}/"):
        return None
    return RunPlan.from_json(json.loads(root.read_bytes(plan_key(run_id))))


def check_plan_matches(existing: RunPlan, wanted: RunPlan, front_end: str = "cli") -> None:
    if existing.settings_key() != wanted.settings_key():
        same = "params" if front_end == "airflow" else "flags"
        raise ConfigError(
            f"run {existing.run_id} already exists at this output with other settings (model, sampling or "
            f"samples per prompt): continue it with the same {same}, or {new_run_hint(front_end)}"
        )


def is_conversation_shard(plan: RunPlan, index: int) -> bool:
    return plan.categories[plan.shards[index].category].turns == "each"


def shard_conversations(root: OutputRoot, plan: RunPlan, index: int) -> list[ConversationJob]:
    """Every conversation of a `turns: each` shard, in a fixed order (prompt order, then sample index)."""
    if not is_conversation_shard(plan, index):
        return []
    settings = plan.categories[plan.shards[index].category]
    jobs = []
    for row in read_shard_rows(root, plan, index):
        source = json.loads(row["conversation"])
        mode = row.get("mode") or THINKING
        for k in row["sample_indices"]:
            jobs.append(
                ConversationJob(
                    prompt_id=row["prompt_id"],
                    record_id=row["record_id"],
                    category=row["category"],
                    sample_index=k,
                    messages=source["messages"],
                    tools=source["tools"],
                    model=plan.model,
                    sampling=settings.sampling_of(mode),
                    max_tool_steps=settings.max_tool_steps,
                    shard=index,
                    top_logprobs=settings.top_logprobs,
                    mode=mode,
                )
            )
    return jobs


def shard_requests(root: OutputRoot, plan: RunPlan, index: int) -> list[SampleRequest]:
    """Every sample of a single-turn shard, in a fixed order (prompt order, then sample index); none for a
    `turns: each` shard (its steps come from shard_conversations)."""
    if is_conversation_shard(plan, index):
        return []
    info = plan.shards[index]
    settings = plan.categories[info.category]
    requests = []
    for row in read_shard_rows(root, plan, index):
        mode = row.get("mode") or THINKING
        for k in row["sample_indices"]:
            requests.append(
                SampleRequest.create(
                    prompt_id=row["prompt_id"],
                    record_id=row["record_id"],
                    category=row["category"],
                    sample_index=k,
                    prompt_ids=row["prompt_ids"],
                    model=plan.model,
                    sampling=settings.sampling_of(mode),
                    shard=index,
                    top_logprobs=settings.top_logprobs,
                    mode=mode,
                )
            )
    return requests
