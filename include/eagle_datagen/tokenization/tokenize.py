"""Tokenize prompt records with the model's chat template, in batches and across processes.

Each prompt is rendered with `apply_chat_template(messages, tools=..., add_generation_prompt=True,
tokenize=False)` (tools differ per prompt) and a batch of rendered prompts is encoded in one call with
`add_special_tokens=False`, which is exactly what `apply_chat_template(..., tokenize=True)` does, but
lets the Rust tokenizer encode the whole batch at once. Large inputs are split over worker processes.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from eagle_datagen.profile import ModelProfile
from eagle_datagen.progress import Progress
from eagle_datagen.records import PromptRecord, Reject, excerpt_of
from eagle_datagen.tokenization.loader import LoadedTokenizer

log = logging.getLogger(__name__)
BATCH_SIZE = 256
# Below this many prompts per process, starting workers costs more than it saves.
MIN_PROMPTS_PER_PROCESS = 2000


@dataclass(frozen=True, slots=True)
class TokenizedPrompt:
    record: PromptRecord
    prompt_ids: list[int]


@dataclass
class TokenizeResult:
    prompts: list[TokenizedPrompt] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)


def _reject(record: PromptRecord, reason: str, detail: str) -> Reject:
    return Reject(
        reason,
        detail,
        record.origin,
        stage="tokenize",
        record_id=record.record_id,
        category=record.category,
        excerpt=excerpt_of(record.messages[-1].get("content", "")),
    )


def tokenize_batch(
    tokenizer: Any, profile: ModelProfile, records: Sequence[PromptRecord], limits: Mapping[str, int]
) -> tuple[list[TokenizedPrompt], list[Reject]]:
    """Render and encode one batch; a record that fails is rejected with its reason, the rest go on."""
    rendered: list[tuple[PromptRecord, str]] = []
    rejects: list[Reject] = []
    for record in records:
        try:
            text = tokenizer.apply_chat_template(
                record.messages, tools=record.tools, add_generation_prompt=True, tokenize=False
            )
        except Exception as exc:  # templates may raise anything (raise_exception, type errors)
            rejects.append(_reject(record, "template_error", f"the chat template failed: {exc}"))
            continue
        rendered.append((record, text))
    encoded = tokenizer([text for _, text in rendered], add_special_tokens=False)["input_ids"] if rendered else []
    suffix = profile.prompt_suffix_ids
    tokenized: list[TokenizedPrompt] = []
    for (record, _), ids in zip(rendered, encoded, strict=True):
        limit = min(limits.get(record.category, limits.get("*", profile.context_length)), profile.context_length - 1)
        if tuple(ids[-len(suffix) :]) != suffix:
            rejects.append(
                _reject(
                    record, "prompt_suffix_mismatch", f"the rendered prompt does not end in {profile.describe_suffix()}"
                )
            )
        elif len(ids) > limit:
            rejects.append(
                _reject(
                    record,
                    "prompt_too_long",
                    f"the prompt is {len(ids):,} tokens (limit {limit:,}, set max_prompt_tokens)",
                )
            )
        else:
            tokenized.append(TokenizedPrompt(record, ids))
    return tokenized, rejects


# Worker state: set in the parent before forking (inherited), or by _init_worker under spawn.
_worker: tuple[Any, ModelProfile, Mapping[str, int]] | None = None


def _init_worker(spec: str, profile: ModelProfile, limits: Mapping[str, int], trust_remote_code: bool) -> None:
    global _worker
    # A forked child must not use the Rust thread pool it inherited (its threads do not survive the fork):
    # with TOKENIZERS_PARALLELISM=true it would wait on them forever. Processes are the parallelism here.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    if _worker is None:
        from eagle_datagen.tokenization.loader import load_tokenizer

        _worker = (load_tokenizer(spec, profile, trust_remote_code).tokenizer, profile, limits)


def _work(records: Sequence[PromptRecord]) -> tuple[list[TokenizedPrompt], list[Reject]]:
    assert _worker is not None
    tokenizer, profile, limits = _worker
    return tokenize_batch(tokenizer, profile, records, limits)


def auto_processes(n_prompts: int) -> int:
    return max(1, min(os.cpu_count() or 1, n_prompts // MIN_PROMPTS_PER_PROCESS))


def _chunks(records: Sequence[PromptRecord], size: int) -> Iterator[Sequence[PromptRecord]]:
    for start in range(0, len(records), size):
        yield records[start : start + size]


def tokenize_prompts(
    loaded: LoadedTokenizer,
    records: Sequence[PromptRecord],
    max_prompt_tokens: int | Mapping[str, int],
    processes: int | None = None,
    batch_size: int = BATCH_SIZE,
    trust_remote_code: bool = False,
) -> TokenizeResult:
    """Tokenize records in order; `max_prompt_tokens` is one limit or a limit per category ("*" = default)."""
    global _worker
    limits = {"*": max_prompt_tokens} if isinstance(max_prompt_tokens, int) else dict(max_prompt_tokens)
    processes = processes or auto_processes(len(records))
    result = TokenizeResult()
    progress = Progress("tokenize", total=len(records), unit="prompts")
    if processes <= 1:
        for chunk in _chunks(records, batch_size):
            tokenized, rejects = tokenize_batch(loaded.tokenizer, loaded.profile, chunk, limits)
            result.prompts.extend(tokenized)
            result.rejects.extend(rejects)
            progress.advance(len(chunk))
    else:
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        _worker = (loaded.tokenizer, loaded.profile, limits) if method == "fork" else None
        try:
            with ProcessPoolExecutor(
                processes,
                mp_context=multiprocessing.get_context(method),
                initializer=_init_worker,
                initargs=(loaded.spec, loaded.profile, limits, trust_remote_code),
            ) as pool:
                chunks = list(_chunks(records, batch_size))
                for chunk, (tokenized, rejects) in zip(chunks, pool.map(_work, chunks), strict=True):
                    result.prompts.extend(tokenized)
                    result.rejects.extend(rejects)
                    progress.advance(len(chunk))
        finally:
            _worker = None
    elapsed = progress.finish()
    log.info(
        "tokenized %d prompts (%d rejected) with %d process(es) in %.2fs",
        len(result.prompts),
        len(result.rejects),
        processes,
        elapsed,
    )
    return result
