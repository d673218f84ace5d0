"""Token-level validation of one generated sample: pure functions, run on every sample of a run.

`validate_sample` returns None for a sample that may become training data, or `(reason, detail)` for the
first check it fails (the order of `REASONS`). The checks follow the sample's mode (its `mode` column; none:
thinking, as before modes existed): a thinking sample's prompt ends in the profile's prompt suffix and its output
carries the reasoning's end; an instant sample's prompt ends in the instant suffix (Kimi-K2.5: `<think></think>`)
and its output holds no think token at all, only the answer and the EOS. A failed sample is quarantined with
its reason, never dropped. Ids are handled as numpy arrays: a row's lists are converted once (a numpy array,
for example a zero-copy slice of an Arrow column, is used as it is), and every check is a slice or a vectorised
compare.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from eagle_datagen.errors import ConfigError
from eagle_datagen.modes import INSTANT, THINKING
from eagle_datagen.profile import ModeFacts, ModelProfile
from eagle_datagen.validation.logprobs import REASONS as LOGPROB_REASONS
from eagle_datagen.validation.logprobs import check_logprobs

# Reason codes, in the order `validate_sample` checks them: code -> one-line description.
REASONS: dict[str, str] = {
    "request_error": "the request failed permanently (the server rejected it); there is no output",
    "finish_abort": "the server aborted the request (finish_reason abort)",
    "finish_length": "the output hit max_new_tokens before the model finished (finish_reason length)",
    "prompt_suffix": "prompt_ids do not end with the prompt suffix of the sample's mode (tokenizer, template and "
    "profile disagree, or the prompt was rendered in the other mode)",
    "prompt_tokens_mismatch": "the server's prompt_tokens differs from the number of prompt ids sent",
    "completion_tokens_mismatch": "the number of output ids differs from the server's completion_tokens",
    "prompt_echo": "output_ids start with the prompt's last ids (the SGLang 0.5.0-0.5.4 echo bug)",
    "id_out_of_range": "an id is negative, not an integer, or not below the profile's vocab_size",
    "no_eos": "the output does not end in the profile's EOS, or finish_reason is not stop",
    "think_start_in_output": "the output contains think_start although the prompt already ends in it",
    "think_token_in_instant": "an instant-mode output holds think_start or think_end (instant answers do not reason)",
    "missing_think_start": "the output has no think_start (the model writes it itself)",
    "multiple_think_start": "the output contains think_start more than once",
    "missing_think_end": "the output has no think_end",
    "multiple_think_end": "the output contains think_end more than once",
    "think_end_before_start": "think_end comes before think_start in the output",
    "empty_answer": "no token between think_end (an instant prompt's end) and the final EOS",
    "runaway_thinking": "the reasoning (tokens before think_end) is longer than max_reasoning_tokens",
    "repetition_loop": "the output ends in one n-gram repeated back to back (a degenerate loop)",
    **LOGPROB_REASONS,  # soft targets asked for (top_logprobs_num > 0): validation/logprobs.py
}

# Added/special tokens are written as tags: <think>, <|im_end|>, <｜Assistant｜>, [BOS].
_TAG = re.compile(r"<[^<>\s]+>|\[[A-Z_]+\]")


@dataclass(frozen=True)
class ValidationLimits:
    # Reasoning longer than this many tokens is flagged as runaway thinking; None: no limit.
    max_reasoning_tokens: int | None = None
    # A degenerate loop: the tokens just before the EOS are one n-gram (n <= loop_ngram_max) repeated at
    # least loop_min_repeats times back to back. Only the last loop_window tokens are looked at.
    loop_ngram_max: int = 32
    loop_min_repeats: int = 8
    loop_window: int = 1024
    # The echo bug copies up to this many prompt ids in front of the output; 0 turns the check off.
    echo_tail: int = 5

    def __post_init__(self) -> None:
        if self.max_reasoning_tokens is not None and self.max_reasoning_tokens < 0:
            raise ConfigError("max_reasoning_tokens must be >= 0 (or unset for no limit)")
        if self.loop_ngram_max < 1 or self.loop_min_repeats < 2:
            raise ConfigError("loop_ngram_max must be >= 1 and loop_min_repeats >= 2")
        if self.loop_window < self.loop_ngram_max * self.loop_min_repeats:
            raise ConfigError(
                f"loop_window ({self.loop_window}) must hold loop_min_repeats ({self.loop_min_repeats}) repeats "
                f"of the longest n-gram ({self.loop_ngram_max}): raise it to at least "
                f"{self.loop_ngram_max * self.loop_min_repeats}"
            )
        if self.echo_tail < 0:
            raise ConfigError("echo_tail must be >= 0")


DEFAULT_LIMITS = ValidationLimits()


def _as_ids(ids: Any) -> np.ndarray:
    """A 1-D integer array of the ids; ValueError when they are not integers."""
    if isinstance(ids, np.ndarray):
        array = ids
    else:
        try:  # no dtype: a float, bool or string id must not be cast into an integer silently
            array = np.asarray(ids if ids is not None else ())
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"ids that are not a flat list of integers ({exc})") from None
        if not array.size:
            return np.zeros(0, dtype=np.int64)
    if array.ndim != 1 or (array.dtype.kind not in "iu" and array.size):
        if array.dtype.kind == "O":
            raise ValueError("ids must be integers in the int64 range (some are larger, or not numbers)")
        raise ValueError(f"ids must be a flat list of integers, not a {array.ndim}-d {array.dtype} array")
    return array


def reasoning_length(output_ids: Sequence[int] | np.ndarray, profile: ModelProfile) -> int | None:
    """The number of output tokens before the first think_end (its index), or None without think_end."""
    hits = np.flatnonzero(_as_ids(output_ids) == profile.think_end.id)
    return int(hits[0]) if hits.size else None


def answer_length(output_ids: Sequence[int] | np.ndarray, profile: ModelProfile) -> int | None:
    """The number of tokens after the first think_end, not counting a final EOS; None without think_end."""
    ids = _as_ids(output_ids)
    start = reasoning_length(ids, profile)
    if start is None:
        return None
    end = len(ids) - 1 if ids[-1] == profile.eos.id else len(ids)
    return max(end - start - 1, 0)


def find_repetition_loop(
    tail: Sequence[int] | np.ndarray, ngram_max: int = 32, min_repeats: int = 8
) -> tuple[int, int] | None:
    """(n, repeats) when `tail` ends in an n-gram (n <= ngram_max) repeated >= min_repeats times back to back.

    The end of `tail` is such a loop when its last n * min_repeats tokens have period n. A period-n loop
    makes the last token recur n tokens earlier, so one vectorised compare of the last token against the
    ngram_max before it gives the few candidate lengths; each candidate is then checked with one compare
    of n * (min_repeats - 1) ids. The smallest n wins; repeats counts the whole periodic run in `tail`
    (a last repeat cut short by the EOS counts as a repeat only when complete).
    """
    ids = _as_ids(tail)
    length = len(ids)
    n_max = min(ngram_max, length // min_repeats)
    if n_max < 1:
        return None
    before = ids[length - 1 - n_max : length - 1]  # before[i] is the token n_max - i positions back
    for n in np.flatnonzero(before == ids[-1])[::-1]:
        n = int(n_max - n)
        span = ids[length - n * min_repeats :]
        if (span[n:] == span[:-n]).all():
            breaks = np.flatnonzero(ids[n:] != ids[:-n])
            periodic = length - int(breaks[-1]) - 1 if breaks.size else length
            return n, periodic // n
    return None


def _finish_type(value: Any) -> Any:
    # The Parquet column holds the type ("stop"); a raw SGLang finish_reason is {"type": "stop", ...}.
    return value.get("type") if isinstance(value, Mapping) else value


def _echo_length(prompt: np.ndarray, output: np.ndarray, profile: ModelProfile, max_k: int, mode: ModeFacts) -> int:
    """The largest k <= max_k with output[:k] == prompt[-k:] that counts as an echo, or 0.

    One id in common is counted only when the prompt's last id is an added token (a tag such as <think>)
    that a valid output never starts with; an ordinary id (Qwen's trailing newline) can start a valid
    output by chance. Two or more ids (the prompt's template tail, in order) are always an echo, except in
    instant mode: there the prompt ends in a closed think block, and a model that ignores the switch may
    write those very tokens itself (its answer is quarantined as think_token_in_instant, never sent again as
    a server fault), so only a longer match, reaching past the think block, counts. The echo bug's own
    signature, completion_tokens that disagree with the ids, is checked before and still catches it.
    """
    max_k = min(max_k, len(prompt), len(output))
    if max_k < 1:
        return 0
    head = output[:max_k].tolist()
    tail = prompt[-max_k:].tolist()
    if mode.name == INSTANT:
        ids = mode.prompt_suffix_ids
        think = ids.index(profile.think_start.id) if profile.think_start.id in ids else len(ids) - 1
        shortest = len(ids) - think + 1  # the think block and one id before it
        return next((k for k in range(max_k, shortest - 1, -1) if head[:k] == tail[-k:]), 0)
    for k in range(max_k, 1, -1):
        if head[:k] == tail[-k:]:
            return k
    if head[0] == tail[-1]:
        last = mode.prompt_suffix[-1]
        is_tag = last.id == tail[-1] and _TAG.fullmatch(last.text) is not None
        starts_output = profile.thinking == "generated" and last.id == profile.think_start.id
        if is_tag and not starts_output:
            return 1
    return 0


def validate_sample(
    row: Mapping[str, Any], profile: ModelProfile, limits: ValidationLimits = DEFAULT_LIMITS
) -> tuple[str, str] | None:
    """None for a valid sample; else (reason code, one-line detail) of the first failing check (see REASONS).

    `row` has the generated-row columns: prompt_ids, output_ids, finish_reason (the type, or SGLang's
    finish_reason mapping), completion_tokens, prompt_tokens, error, mode. A missing or None prompt_tokens /
    completion_tokens is not checked; a missing or None mode is thinking. With `top_logprobs_num` k > 0, its
    `logprobs` (inference/logprobs.py's compact form) are checked last (validation/logprobs.py).
    """
    error = row.get("error")
    if error:
        return "request_error", str(error)
    finish = _finish_type(row.get("finish_reason"))
    if finish == "abort":
        return "finish_abort", "the server aborted the request"
    if finish == "length":
        return "finish_length", f"the output stopped at max_new_tokens after {_count(row.get('output_ids'))} tokens"
    try:
        prompt = _as_ids(row.get("prompt_ids"))
        output = _as_ids(row.get("output_ids"))
    except ValueError as exc:
        return "id_out_of_range", str(exc)

    mode = row.get("mode") or THINKING
    if mode not in profile.modes:
        return "prompt_suffix", profile.no_mode(str(mode))
    facts = profile.mode(mode)
    suffix = facts.prompt_suffix_ids
    if len(prompt) < len(suffix) or tuple(prompt[len(prompt) - len(suffix) :].tolist()) != suffix:
        return "prompt_suffix", _suffix_detail(prompt, facts, profile)
    prompt_tokens = row.get("prompt_tokens")
    if prompt_tokens is not None and prompt_tokens != len(prompt):
        return "prompt_tokens_mismatch", f"prompt_tokens is {prompt_tokens} but {len(prompt)} prompt ids were sent"
    completion_tokens = row.get("completion_tokens")
    if completion_tokens is not None and completion_tokens != len(output):
        return (
            "completion_tokens_mismatch",
            f"{len(output)} output ids for completion_tokens {completion_tokens}",
        )
    echo = _echo_length(prompt, output, profile, limits.echo_tail, facts)
    if echo:
        return "prompt_echo", f"output_ids start with the prompt's last {echo} id(s) {output[:echo].tolist()}"
    for name, ids in (("prompt_ids", prompt), ("output_ids", output)):
        if ids.size and (ids.min() < 0 or ids.max() >= profile.vocab_size):
            bad = ids[(ids < 0) | (ids >= profile.vocab_size)]
            return (
                "id_out_of_range",
                f"{name} hold {bad.size} id(s) outside [0, {profile.vocab_size}), e.g. {int(bad[0])}",
            )

    eos = profile.eos
    if not output.size or output[-1] != eos.id:
        last = int(output[-1]) if output.size else "nothing (empty output)"
        return "no_eos", f"the output ends in {last}, not the EOS {eos.text} ({eos.id}); finish_reason {finish!r}"
    if finish != "stop":
        return "no_eos", f"finish_reason is {finish!r}, not 'stop'"

    answer = (_check_instant_answer if mode == INSTANT else _check_thinking_answer)(output, profile, limits)
    return answer if answer is not None else check_logprobs(row, output, profile.vocab_size)


def _check_thinking_answer(
    output: np.ndarray, profile: ModelProfile, limits: ValidationLimits
) -> tuple[str, str] | None:
    start, end = profile.think_start, profile.think_end
    ends = np.flatnonzero(output == end.id)
    if profile.thinking == "prefilled":
        starts = np.count_nonzero(output == start.id)
        if starts:
            return "think_start_in_output", f"{start.text} ({start.id}) appears {starts} time(s) in the output"
    else:
        starts = np.flatnonzero(output == start.id)
        if not starts.size:
            return "missing_think_start", f"no {start.text} ({start.id}) in the output"
        if starts.size > 1:
            return "multiple_think_start", f"{start.text} ({start.id}) appears {starts.size} times in the output"
    if not ends.size:
        return "missing_think_end", f"no {end.text} ({end.id}) in the output"
    if ends.size > 1:
        return "multiple_think_end", f"{end.text} ({end.id}) appears {ends.size} times in the output"
    if profile.thinking == "generated" and ends[0] < starts[0]:
        return (
            "think_end_before_start",
            f"{end.text} at {int(ends[0])} comes before {start.text} at {int(starts[0])}",
        )
    reasoning = int(ends[0])
    if reasoning == len(output) - 2:
        return "empty_answer", f"the EOS directly follows {end.text}: no answer after {reasoning} reasoning tokens"
    if limits.max_reasoning_tokens is not None and reasoning > limits.max_reasoning_tokens:
        return (
            "runaway_thinking",
            f"{reasoning} reasoning tokens, more than max_reasoning_tokens {limits.max_reasoning_tokens}",
        )
    return _check_loop(output, limits)


def _check_loop(output: np.ndarray, limits: ValidationLimits) -> tuple[str, str] | None:
    loop = find_repetition_loop(output[:-1][-limits.loop_window :], limits.loop_ngram_max, limits.loop_min_repeats)
    if loop:
        n, repeats = loop
        gram = output[len(output) - 1 - n : len(output) - 1].tolist()
        shown = str(gram) if n <= 8 else f"{str(gram[:8])[:-1]}, ...]"
        return "repetition_loop", f"the output ends in a {n}-gram {shown} repeated {repeats} times before the EOS"
    return None


def _check_instant_answer(
    output: np.ndarray, profile: ModelProfile, limits: ValidationLimits
) -> tuple[str, str] | None:
    """An instant answer (the output ends in the EOS, checked before): no think token, something before the EOS,
    no loop. A think token means the model reasoned although the template told it not to: the model's doing
    (quarantined, never sent again), or a template whose switch the model does not know."""
    think = [t for t in (profile.think_start, profile.think_end) if np.count_nonzero(output == t.id)]
    if think:
        found = ", ".join(f"{t.text} ({t.id}) x{int(np.count_nonzero(output == t.id))}" for t in think)
        first = int(np.flatnonzero(np.isin(output, [t.id for t in think]))[0])
        return "think_token_in_instant", f"the instant answer holds {found}, the first at {first}"
    if len(output) == 1:
        return "empty_answer", "the EOS directly follows the instant prompt: no answer"
    return _check_loop(output, limits)


def _suffix_detail(prompt: np.ndarray, facts: ModeFacts, profile: ModelProfile) -> str:
    """What the prompt ends in instead, naming the other mode when it is that mode's suffix."""
    detail = f"prompt_ids end in {prompt[-len(facts.prompt_suffix) :].tolist()}, not {facts.describe_suffix()}"
    for other in profile.modes:
        suffix = profile.mode(other).prompt_suffix_ids
        if other != facts.name and tuple(prompt[len(prompt) - len(suffix) :].tolist()) == suffix:
            return f"{detail}: the prompt is the {other} mode's, the sample {facts.name} (rendered in the wrong mode)"
    return f"{detail} ({facts.name} mode)"


def _count(ids: Any) -> int | str:
    try:
        return len(ids)
    except TypeError:
        return "?"
