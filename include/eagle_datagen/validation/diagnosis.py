"""Run-level checks: turn the reject-reason counts of a run into diagnoses that name the cause and the fix.

A few bad samples are normal (a model sometimes rambles past max_new_tokens); a high rate of one reason
is the signature of a misconfiguration (a proxy stripping think tokens, the wrong tokenizer,
an SGLang version with the echo bug). `diagnose` compares each reason's rate with its threshold;
`check_run` raises `ValidationFailed` with every violated threshold in one line. A reason only one mode can give
(`REASON_MODES`: no `</think>` in a thinking answer, a think token in an instant one) is a share of that mode's
samples when the counts per mode are given, so a broken mode shows in a mix however small its share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from eagle_datagen import settings
from eagle_datagen.errors import ConfigError, DataGenError
from eagle_datagen.modes import INSTANT, THINKING
from eagle_datagen.profile import ModelProfile
from eagle_datagen.validation.rules import REASONS


class ValidationFailed(DataGenError):
    """Too many samples of a run failed validation for one reason: the setup, not the model, is wrong."""

    def __init__(self, diagnoses: list[str]) -> None:
        super().__init__("; ".join(diagnoses))
        self.diagnoses = list(diagnoses)


@dataclass(frozen=True)
class DiagnosisThresholds:
    """The highest acceptable share of a run's samples (0..1) per reason code; 0.0: any one is fatal."""

    request_error: float = 0.2
    finish_abort: float = 0.2
    finish_length: float = 0.5
    prompt_suffix: float = 0.0
    prompt_tokens_mismatch: float = 0.01
    completion_tokens_mismatch: float = 0.01
    prompt_echo: float = 0.01
    id_out_of_range: float = 0.0
    no_eos: float = 0.05
    think_start_in_output: float = 0.2
    think_token_in_instant: float = 0.2
    missing_think_start: float = 0.5
    multiple_think_start: float = 0.2
    missing_think_end: float = 0.5
    multiple_think_end: float = 0.2
    think_end_before_start: float = 0.2
    empty_answer: float = 0.2
    runaway_thinking: float = 0.5
    repetition_loop: float = 0.2
    # soft targets: a wrong shape or value is the server's (or a router's) doing, not the model's: a few are a
    # sign, many a deployment that drops or mangles return_logprob
    logprobs_missing: float = 0.01
    logprobs_shape: float = 0.01
    logprobs_invalid: float = 0.01
    logprob_mismatch: float = 0.01
    # Below this many samples rates say little: only the zero-tolerance reasons (threshold 0.0) are judged.
    min_samples: int = 20

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "min_samples":
                if value < 0:
                    raise ConfigError("min_samples must be >= 0")
            elif not 0.0 <= value <= 1.0:
                raise ConfigError(f"threshold {f.name} must be a rate between 0 and 1, not {value}")

    def rate(self, reason: str) -> float | None:
        """The threshold of a reason code, or None for a code without one."""
        return getattr(self, reason) if reason in REASONS else None

    def with_rates(self, rates: Mapping[str, float] | None) -> DiagnosisThresholds:
        """These thresholds with the user's rates per reason (`--max-rate`, a recipe's `max_rates`, the form)."""
        return replace(self, **parse_rates(rates or {})) if rates else self

    def rates(self) -> dict[str, float]:
        """The threshold of every reason code (what a manifest records and the trigger form shows)."""
        return {k: v for k, v in asdict(self).items() if k in REASONS}


# The reasons only samples of one mode can have (validation/rules.py): their rate is a share of that mode.
REASON_MODES: dict[str, str] = {
    **dict.fromkeys(
        (
            "think_start_in_output",
            "missing_think_start",
            "multiple_think_start",
            "missing_think_end",
            "multiple_think_end",
            "think_end_before_start",
            "runaway_thinking",
        ),
        THINKING,
    ),
    "think_token_in_instant": INSTANT,
}


def parse_rates(rates: Mapping[str, Any], where: str = "max rate") -> dict[str, float]:
    """Checked `{reason: rate}`; one ConfigError that names the bad entry and the known reasons. One check
    for every place a user sets them (command line, recipe, trigger form)."""
    checked = {}
    for reason, rate in rates.items():
        if reason not in REASONS:
            raise ConfigError(f"{where}: unknown reason {reason!r}; known reasons: {', '.join(REASONS)}")
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0.0 <= rate <= 1.0:
            raise ConfigError(f"{where}: the rate of {reason} must be a number between 0 and 1, not {rate!r}")
        checked[reason] = float(rate)
    return checked


def _tok(profile: ModelProfile | None, name: str, fallback: str) -> str:
    if profile is None:
        return fallback
    token = profile.tokens[name]
    return f"{token.text} ({token.id})"


def _named(name: str, front_end: str) -> str:
    return settings.named(name, front_end)


def _sampling(profile: ModelProfile | None) -> str:
    if profile is None or not profile.sampling:
        return "check sampling (temperature/top_p): use the model's recommended values"
    recommended = ", ".join(f"{k} {v}" for k, v in profile.sampling.items())
    return f"check sampling (temperature/top_p): {profile.model} recommends {recommended}"


# reason -> (what the samples show, the likely cause and the fix); `p` is None without a profile.
_MESSAGES: dict[str, Callable[[ModelProfile | None, str], tuple[str, str]]] = {
    "request_error": lambda p, f: (
        "of requests failed permanently (request_error)",
        "SGLang rejected them (HTTP 400: prompts longer than the context, or bad sampling values): read the "
        f"error column of the quarantined rows and fix {_named('max_prompt_tokens', f)} or the sampling",
    ),
    "finish_abort": lambda p, f: (
        "of requests were aborted by the server (finish_reason abort)",
        f"it is overloaded or restarting: check its logs, lower {_named('concurrency', f)}, and "
        + settings.resume_hint(f),
    ),
    "finish_length": lambda p, f: (
        "of samples hit max_new_tokens (finish_reason length)",
        f"raise {_named('max_new_tokens', f)} (reasoning traces are long)",
    ),
    "prompt_suffix": lambda p, f: (
        f"of prompts do not end in {p.describe_suffix() if p else 'the profile prompt suffix'}"
        + (f" (instant ones: {p.instant.describe_suffix()})" if p and p.instant else ""),
        f"the tokenizer's template does not end prompts in {_tok(p, 'think_start', '<think>')} as the profile "
        f"expects: the tokenizer or the profile is wrong (check {_named('tokenizer', f)} and {_named('profile', f)})"
        + (f"; instant prompts need a template that honours {p.instant.template_kwargs}" if p and p.instant else ""),
    ),
    "prompt_tokens_mismatch": lambda p, f: (
        "of samples report prompt_tokens different from the number of prompt ids sent",
        "the server (or a proxy in front of it) did not process the input_ids as sent: send them to SGLang's "
        "native /generate, through the SGLang router at most",
    ),
    "completion_tokens_mismatch": lambda p, f: (
        "of samples have a number of output_ids different from completion_tokens",
        "the server returns ids it did not generate (the prompt-echo bug of SGLang 0.5.0-0.5.4): upgrade SGLang",
    ),
    "prompt_echo": lambda p, f: (
        "of samples have output_ids that start with the prompt's tail",
        "SGLang 0.5.0-0.5.4 has this bug: upgrade SGLang",
    ),
    "id_out_of_range": lambda p, f: (
        f"of samples carry ids beyond the vocabulary{f' of {p.model} ({p.vocab_size})' if p else ''}",
        f"the server serves another model: check its /get_model_info against {_named('model', f)} and "
        + _named("profile", f),
    ),
    "no_eos": lambda p, f: (
        f"of samples stopped without the EOS {_tok(p, 'eos', '')}".rstrip(),
        "the server stops on other tokens (stop strings or stop_token_ids) or serves another model: send no "
        f"stop settings and check {_named('profile', f)} against the served model",
    ),
    "think_start_in_output": lambda p, f: (
        f"of samples contain {_tok(p, 'think_start', '<think>')} in the output",
        "the model generated <think> although the prompt ends in it: is the chat template the model's own? "
        f"Check {_named('tokenizer', f)} and {_named('profile', f)}",
    ),
    "think_token_in_instant": lambda p, f: (
        f"of instant answers hold {_tok(p, 'think_start', '<think>')} or {_tok(p, 'think_end', '</think>')}",
        "the model reasons although the template turned thinking off: is the chat template the model's own (its "
        f"instant switch: {p.instant.template_kwargs if p and p.instant else 'none'})? Check {_named('tokenizer', f)}"
        f" and {_named('profile', f)}, or generate this category in mode thinking",
    ),
    "missing_think_start": lambda p, f: (
        f"of samples have no {_tok(p, 'think_start', '<think>')}",
        "the model did not think, or something strips think tokens from the answers (SGLang's --reasoning-parser "
        "does not: it acts on the OpenAI endpoints only; a proxy that rewrites answers does): enable thinking in the "
        "chat template and send /generate to SGLang directly",
    ),
    "multiple_think_start": lambda p, f: (
        f"of samples contain {_tok(p, 'think_start', '<think>')} more than once",
        f"the model re-opens its reasoning: {_sampling(p)}; is the chat template the model's own?",
    ),
    "missing_think_end": lambda p, f: (
        f"of samples have no {_tok(p, 'think_end', '</think>')}",
        "something strips think tokens from the answers (SGLang's --reasoning-parser does not: it acts on the OpenAI "
        "endpoints only): send /generate to SGLang directly, not through a proxy that rewrites answers",
    ),
    "multiple_think_end": lambda p, f: (
        f"of samples contain {_tok(p, 'think_end', '</think>')} more than once",
        f"the model closes its reasoning twice: {_sampling(p)}; is the chat template the model's own?",
    ),
    "think_end_before_start": lambda p, f: (
        f"of samples have {_tok(p, 'think_end', '</think>')} before {_tok(p, 'think_start', '<think>')}",
        f"the outputs do not have the profile's format: check {_named('profile', f)} against the served model",
    ),
    "empty_answer": lambda p, f: (
        f"of samples end right after {_tok(p, 'think_end', '</think>')} with no answer",
        f"the model stops after reasoning: {_sampling(p)}; is the chat template the model's own?",
    ),
    "runaway_thinking": lambda p, f: (
        "of samples reason for more than max_reasoning_tokens",
        f"raise the limit if such traces are wanted, else {_sampling(p)}",
    ),
    "repetition_loop": lambda p, f: (
        "of samples end in a repetition loop",
        f"the model degenerates: {_sampling(p)}",
    ),
    "logprobs_missing": lambda p, f: (
        "of answers have no top-k logprobs although they were asked for (logprobs_missing)",
        "the server or a router between drops return_logprob and top_logprobs_num: send to SGLang's /generate "
        f"directly, or set {_named('top_logprobs', f)} to 0",
    ),
    "logprobs_shape": lambda p, f: (
        "of answers have logprobs that are not k per output token (logprobs_shape)",
        "the server's logprobs do not follow its output_ids (an SGLang version or a proxy that cuts them): check "
        "meta_info.output_top_logprobs of one answer, or upgrade SGLang",
    ),
    "logprobs_invalid": lambda p, f: (
        "of answers have logprobs that are not numbers at most 0, or ids outside the vocabulary (logprobs_invalid)",
        "the server returns another model's distributions or mangled numbers: check the model and the SGLang version",
    ),
    "logprob_mismatch": lambda p, f: (
        "of answers give the sampled token another logprob than its top-k entry (logprob_mismatch)",
        "the sampled and top-k logprobs come from different distributions (a proxy mixing answers, or an SGLang bug): "
        "check one answer's output_token_logprobs against output_top_logprobs",
    ),
}


def explain(reason: str, profile: ModelProfile | None = None, front_end: str = "cli") -> tuple[str, str]:
    """(what the samples show, the likely cause and its fix) of a reason code; the fix names settings as the
    front end that runs calls them (settings.named)."""
    return _MESSAGES[reason](profile, front_end)


def _percent(count: int, total: int) -> str:
    return f"{100.0 * count / total:.3g}%"


def diagnose(
    reason_counts: Mapping[str, int],
    total: int,
    thresholds: DiagnosisThresholds = DiagnosisThresholds(),
    profile: ModelProfile | None = None,
    front_end: str = "cli",
    mode_totals: Mapping[str, int] | None = None,
) -> list[str]:
    """One line per violated threshold (in REASONS order): how many samples, the likely cause, the fix.

    `total` is the number of samples of the run (valid ones included); counts of unknown codes are ignored.
    With `mode_totals` (samples per mode), a reason of one mode (`REASON_MODES`) is a share of that mode's samples.
    """
    lines = []
    for reason in REASONS:
        count = int(reason_counts.get(reason, 0))
        limit = thresholds.rate(reason)
        if count <= 0 or limit is None:
            continue
        of_mode = mode_totals.get(REASON_MODES[reason]) if mode_totals and reason in REASON_MODES else None
        total_seen = max(total if of_mode is None else of_mode, count)
        if total_seen < thresholds.min_samples and limit > 0.0:
            continue
        if count / total_seen <= limit:
            continue
        what, fix = _MESSAGES[reason](profile, front_end)
        allowed = "none allowed" if limit == 0.0 else f"at most {100.0 * limit:.3g}% allowed"
        lines.append(f"{_percent(count, total_seen)} ({count}/{total_seen}) {what}, {allowed}: {fix}")
    return lines


def check_run(
    reason_counts: Mapping[str, int],
    total: int,
    thresholds: DiagnosisThresholds = DiagnosisThresholds(),
    profile: ModelProfile | None = None,
    front_end: str = "cli",
    mode_totals: Mapping[str, int] | None = None,
) -> None:
    """Raise ValidationFailed (one line, diagnoses joined by '; ') when any threshold is violated."""
    lines = diagnose(reason_counts, total, thresholds, profile, front_end, mode_totals)
    if lines:
        raise ValidationFailed(lines)
