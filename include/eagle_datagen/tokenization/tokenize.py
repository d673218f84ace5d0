"""Tokenize prompt records with the model's chat template, in batches and across processes.

Each prompt is rendered with `apply_chat_template(messages, tools=..., add_generation_prompt=True,
tokenize=False)` (tools differ per prompt) and a batch of rendered prompts is encoded in one call with
`add_special_tokens=False`, which is exactly what `apply_chat_template(..., tokenize=True)` does (and SGLang),
but lets a Rust tokenizer encode the whole batch at once. The tokenizer's own code makes every id; a slow
tokenizer over tiktoken (Kimi-K2.5's remote code) is sped up by worker processes, sized to the CPUs the task may
use (cpus.py), or, only where the user opts in, by its tiktoken.Encoding directly (tiktoken_path.py).
A record whose strings would put special ids into the prompt that the template did not place (literal
`<|im_end|>` typed by a user) is rejected as `special_token_text` unless the run allows it
(special_tokens.py). A prompt holding an id at or above the model's `vocab_size` (a tokenizer larger than
the model, as Kimi-K2.5's is: loader.py) is rejected as `id_beyond_model_vocab`: it must never reach a
server, whose scheduler dies on it.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from eagle_datagen.cpus import usable_cpus
from eagle_datagen.profile import ModelProfile
from eagle_datagen.progress import Progress
from eagle_datagen.records import PromptRecord, Reject, excerpt_of
from eagle_datagen.tokenization.loader import LoadedTokenizer
from eagle_datagen.tokenization.special_tokens import SpecialTokenGuard
from eagle_datagen.tokenization.tiktoken_path import own_call

log = logging.getLogger(__name__)
BATCH_SIZE = 256
# Below this many prompts per process, starting workers costs more than it saves.
MIN_PROMPTS_PER_PROCESS = 1000


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


def render_prompt(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    template_kwargs: Mapping[str, Any] | None = None,
) -> str:
    """The chat template's text of a prompt, with the generation prompt; `template_kwargs` are the template
    variables of its mode (an instant prompt's `thinking=False`: profile.ModeFacts). Every prompt of a run, the
    steps of a conversation and the canary included, is rendered here."""
    return tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=False, **(template_kwargs or {})
    )


def _beyond_vocab_detail(tokenizer: Any, profile: ModelProfile, ids: list[int]) -> str:
    position, bad = next((i, t) for i, t in enumerate(ids) if t >= profile.vocab_size)
    text = tokenizer.convert_ids_to_tokens(bad)
    return (
        f"the rendered prompt holds id {bad} ({text!r}) at position {position}, beyond {profile.model}'s vocabulary "
        f"of {profile.vocab_size:,} ids: the model cannot read it (and SGLang would fail on it)"
    )


def tokenize_batch(
    tokenizer: Any,
    profile: ModelProfile,
    records: Sequence[PromptRecord],
    limits: Mapping[str, int],
    guard: SpecialTokenGuard | None = None,
    encode: Callable[[Sequence[str]], list[list[int]]] | None = None,
) -> tuple[list[TokenizedPrompt], list[Reject]]:
    """Render and encode one batch; a record that fails is rejected with its reason, the rest go on.
    With a `guard`, records holding special-token text are rendered a second time as a skeleton (see
    special_tokens.py), encoded in the same batch. `encode`: LoadedTokenizer.encoder() (default: the
    tokenizer's own call)."""
    rendered: list[tuple[PromptRecord, str]] = []
    # index in rendered -> (what was found where, index of the skeleton's text or None)
    skeletons: dict[int, tuple[str, int | None]] = {}
    extra_texts: list[str] = []
    rejects: list[Reject] = []
    for record in records:
        kwargs = profile.mode(record.mode).template_kwargs
        try:
            text = render_prompt(tokenizer, record.messages, record.tools, kwargs)
        except Exception as exc:  # templates may raise anything (raise_exception, type errors)
            rejects.append(_reject(record, "template_error", f"the chat template failed: {exc}"))
            continue
        hit = guard.find(record.messages, record.tools) if guard is not None else None
        if hit is not None:
            assert guard is not None
            found = f"{hit.where} holds {hit.text!r} (token {guard.texts[hit.text]})"
            try:
                skeleton = render_prompt(
                    tokenizer, guard.neutralise(record.messages), guard.neutralise(record.tools), kwargs
                )
                skeletons[len(rendered)] = (found, len(extra_texts))
                extra_texts.append(skeleton)
            except Exception:  # the template fails without the token text: it depends on it, so it cannot pass
                skeletons[len(rendered)] = (found, None)
        rendered.append((record, text))
    texts = [text for _, text in rendered] + extra_texts
    encoded = encode(texts) if encode is not None else own_call(tokenizer, texts)
    encoded, skeleton_ids = encoded[: len(rendered)], encoded[len(rendered) :]
    tokenized: list[TokenizedPrompt] = []
    for index, ((record, _), ids) in enumerate(zip(rendered, encoded, strict=True)):
        mode = profile.mode(record.mode)
        suffix = mode.prompt_suffix_ids
        limit = min(limits.get(record.category, limits.get("*", profile.context_length)), profile.context_length - 1)
        if index in skeletons:
            assert guard is not None
            found, at = skeletons[index]
            if at is None or guard.forged(ids, skeleton_ids[at]):
                rejects.append(
                    _reject(
                        record,
                        "special_token_text",
                        f"{found}, which would enter the prompt where the chat template did not place it (text "
                        "must not forge turn boundaries); set allow_special_token_text in the recipe or "
                        "--allow-special-token-text to keep such records",
                    )
                )
                continue
        if ids and max(ids) >= profile.vocab_size:
            rejects.append(_reject(record, "id_beyond_model_vocab", _beyond_vocab_detail(tokenizer, profile, ids)))
        elif tuple(ids[-len(suffix) :]) != suffix:
            rejects.append(
                _reject(
                    record,
                    "prompt_suffix_mismatch",
                    f"the rendered prompt does not end in {mode.describe_suffix()}"
                    + (
                        f" (its mode is {mode.name}: the chat template must honour {mode.template_kwargs})"
                        if mode.template_kwargs
                        else ""
                    ),
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
_Encode = Callable[[Sequence[str]], list[list[int]]]
_worker: tuple[Any, ModelProfile, Mapping[str, int], SpecialTokenGuard | None, _Encode] | None = None


def _init_worker(
    spec: str,
    profile: ModelProfile,
    limits: Mapping[str, int],
    trust_remote_code: bool,
    guarded: bool,
    tiktoken_fast_path: bool,
) -> None:
    global _worker
    # A forked child must not use the Rust thread pool it inherited (its threads do not survive the fork):
    # with TOKENIZERS_PARALLELISM=true it would wait on them forever. Processes are the parallelism here.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    if _worker is None:
        from eagle_datagen.tokenization.loader import load_tokenizer

        loaded = load_tokenizer(spec, profile, trust_remote_code, announce=False, tiktoken_fast_path=tiktoken_fast_path)
        guard = SpecialTokenGuard.of(loaded.tokenizer, profile) if guarded else None
        _worker = (loaded.tokenizer, profile, limits, guard, loaded.encoder())


def _work(records: Sequence[PromptRecord]) -> tuple[list[TokenizedPrompt], list[Reject]]:
    assert _worker is not None
    tokenizer, profile, limits, guard, encode = _worker
    return tokenize_batch(tokenizer, profile, records, limits, guard, encode)


def auto_processes(n_prompts: int, cpus: int | None = None) -> int:
    """One process per MIN_PROMPTS_PER_PROCESS prompts, at most one per CPU this task may use (`cpus`, else read:
    cpus.py)."""
    return max(1, min(cpus or usable_cpus(), n_prompts // MIN_PROMPTS_PER_PROCESS))


def _chunks(records: Iterable[PromptRecord], size: int) -> Iterator[list[PromptRecord]]:
    chunk: list[PromptRecord] = []
    for record in records:
        chunk.append(record)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def tokenize_prompts(
    loaded: LoadedTokenizer,
    records: Sequence[PromptRecord],
    max_prompt_tokens: int | Mapping[str, int],
    processes: int | None = None,
    batch_size: int = BATCH_SIZE,
    trust_remote_code: bool = False,
    allow_special_token_text: bool = False,
) -> TokenizeResult:
    """Tokenize records in order; `max_prompt_tokens` is one limit or a limit per category ("*" = default).
    Records whose text would forge special tokens are rejected unless `allow_special_token_text`. Everything
    in memory: `tokenize_stream` hands each batch on instead."""
    result = TokenizeResult()
    for tokenized, rejects in tokenize_stream(
        loaded,
        records,
        max_prompt_tokens,
        processes=processes,
        batch_size=batch_size,
        trust_remote_code=trust_remote_code,
        allow_special_token_text=allow_special_token_text,
        total=len(records),
    ):
        result.prompts.extend(tokenized)
        result.rejects.extend(rejects)
    return result


def tokenize_stream(
    loaded: LoadedTokenizer,
    records: Iterable[PromptRecord],
    max_prompt_tokens: int | Mapping[str, int],
    processes: int | None = None,
    batch_size: int = BATCH_SIZE,
    trust_remote_code: bool = False,
    allow_special_token_text: bool = False,
    total: int | None = None,
) -> Iterator[tuple[list[TokenizedPrompt], list[Reject]]]:
    """`tokenize_prompts` one batch at a time, in order: records are read from `records` as workers need them
    (at most two batches per process in flight), so memory holds a few batches, whatever the number of
    prompts. `total` (the number of records, when known) sizes the progress line and the process count."""
    global _worker
    limits = {"*": max_prompt_tokens} if isinstance(max_prompt_tokens, int) else dict(max_prompt_tokens)
    guard = None if allow_special_token_text else SpecialTokenGuard.of(loaded.tokenizer, loaded.profile)
    why = "as set"
    if not processes:
        cpus = usable_cpus()
        processes = auto_processes(total if total is not None else MIN_PROMPTS_PER_PROCESS, cpus)
        why = f"one per {MIN_PROMPTS_PER_PROCESS:,} prompts, {cpus} CPU(s) usable here"
    log.info(
        "tokenizing%s with %d process(es) (%s) by %s",
        f" {total:,} prompts" if total is not None else "",
        processes,
        why,
        loaded.encode_path,
    )
    progress = Progress("tokenize", total=total, unit="prompts")
    prompts = rejected = 0
    if processes <= 1:
        encode = loaded.encoder()
        for chunk in _chunks(records, batch_size):
            tokenized, rejects = tokenize_batch(loaded.tokenizer, loaded.profile, chunk, limits, guard, encode)
            prompts, rejected = prompts + len(tokenized), rejected + len(rejects)
            progress.advance(len(chunk))
            yield tokenized, rejects
    else:
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        _worker = (loaded.tokenizer, loaded.profile, limits, guard, loaded.encoder()) if method == "fork" else None
        try:
            with ProcessPoolExecutor(
                processes,
                mp_context=multiprocessing.get_context(method),
                initializer=_init_worker,
                initargs=(
                    loaded.spec,
                    loaded.profile,
                    limits,
                    trust_remote_code,
                    guard is not None,
                    loaded.tiktoken_encoding is not None,
                ),
            ) as pool:
                in_flight: deque[tuple[int, Future[tuple[list[TokenizedPrompt], list[Reject]]]]] = deque()
                chunks = _chunks(records, batch_size)
                while True:
                    while len(in_flight) < 2 * processes:
                        chunk = next(chunks, None)
                        if chunk is None:
                            break
                        in_flight.append((len(chunk), pool.submit(_work, chunk)))
                    if not in_flight:
                        break
                    size, future = in_flight.popleft()
                    tokenized, rejects = future.result()
                    prompts, rejected = prompts + len(tokenized), rejected + len(rejects)
                    progress.advance(size)
                    yield tokenized, rejects
        finally:
            _worker = None
    elapsed = progress.finish()
    log.info("tokenized %d prompts (%d rejected) with %d process(es) in %.2fs", prompts, rejected, processes, elapsed)
