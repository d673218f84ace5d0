"""The deployment checklist: `eagle-datagen check`, and the first thing a DAG run does.

One line per item, each `ok`, `warn` or `refused` with a short why and the fix: the recipe; the tokenizer (loads,
remote code allowed, the profile's tokens); every SGLang endpoint through the run's own preflight
(inference/preflight.judge_each: health, served model, the server checklist of server_flags.py, the canary, the
tokenizer agreement of tokenizer_agreement.py); the output root (a probe object written, read back and listed);
each prompt source (found, its records counted as they stream by). An orchestrator adds lines of its own (the
Airflow pool and connections). Nothing is refused here that a run would accept, nor accepted that it would refuse:
the same functions judge both. Items are independent: a tokenizer that fails still lets the endpoints be checked
(without a canary), so one pass shows everything to fix.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

from eagle_datagen import settings
from eagle_datagen.errors import DataGenError
from eagle_datagen.inference.endpoint_minimum import required_endpoints
from eagle_datagen.inference.preflight import LeftOut, ServerInfo, judge_each, too_few_endpoints
from eagle_datagen.inference.server_flags import SERVER_FLAGS
from eagle_datagen.inference.tokenizer_agreement import agreement_check
from eagle_datagen.redaction import redact

Verdict = Literal["ok", "warn", "refused"]
# Written (and overwritten) by every check: one small object under a name that says what it is, never deleted.
PROBE_KEY = "checks/eagle-datagen-check-probe.json"
UNCOMPARED = {
    "no_tokenizer": "the server has no tokenizer (--skip-tokenizer-init); the run's ids are still sent as they are",
    "unchecked": "its /v1/tokenize cannot be asked; allowed by allow_unchecked_tokenizer and recorded unchecked",
}
_DETERMINISTIC = next(f for f in SERVER_FLAGS if f.key == "enable_deterministic_inference")


@dataclass(frozen=True)
class CheckLine:
    item: str  # what was checked: "endpoint http://...", "tokenizer", "output root", "source math: a.jsonl"
    verdict: Verdict
    detail: str  # what was found; for warn and refused, why and the fix

    def text(self) -> str:
        return f"{self.verdict:<7} {self.item}: {self.detail}"

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def refused(lines: list[CheckLine]) -> list[CheckLine]:
    return [line for line in lines if line.verdict == "refused"]


def _one_line(exc: BaseException) -> str:
    """The failure as one line, secrets redacted (a store's error can echo what it was given)."""
    text = redact(str(exc) or type(exc).__name__)
    return " ".join(text.split())[:500]


def check_recipe(options: Any) -> tuple[list[CheckLine], Any, list[Any]]:
    """The recipe (or --prompts) and the source plans it makes; (lines, recipe or None, plans)."""
    from eagle_datagen.sources.collect import plans_from_recipe, plans_from_sources
    from eagle_datagen.sources.recipe import load_recipe

    prompts = options.prompts
    try:
        if prompts.recipe:
            recipe = load_recipe(prompts.recipe)
            plans = plans_from_recipe(recipe, prompts.categories)
            what = f"{prompts.recipe}: {len(plans)} categor{'y' if len(plans) == 1 else 'ies'}"
            return [CheckLine("recipe", "ok", what)], recipe, plans
        if prompts.prompts:
            plans = plans_from_sources(
                prompts.prompts,
                format=prompts.prompts_format,
                columns=prompts.prompts_columns,
                history=prompts.prompts_history,
            )
            return [CheckLine("prompts", "ok", f"{len(prompts.prompts)} source(s) given")], None, plans
        fix = f"give {settings.named('recipe', options.front_end)} or {settings.named('prompts', options.front_end)}"
        return [CheckLine("recipe", "refused", f"no recipe and no prompt source: {fix}")], None, []
    except DataGenError as exc:
        return [CheckLine("recipe", "refused", _one_line(exc))], None, []


def check_tokenizer(options: Any) -> tuple[list[CheckLine], Any]:
    """The run's tokenizer setup (tokenizer, profile, recipe, as a run loads them); (lines, TokenizeSetup or None)."""
    from eagle_datagen.tokenization.stage import setup_tokenize

    try:
        setup = setup_tokenize(options.prompts)
    except DataGenError as exc:
        return [CheckLine("tokenizer", "refused", _one_line(exc))], None
    facts = setup.loaded.provenance()
    remote = "remote code allowed and used" if facts.get("remote_code") else "no remote code needed"
    detail = f"{facts['tokenizer']} loads ({facts['tokenizer_class']}, profile {facts['profile']}, {remote})"
    return [CheckLine("tokenizer", "ok", detail)], setup


def check_endpoints(options: Any, setup: Any) -> list[CheckLine]:
    """Every endpoint through the run's preflight (the same session and judgements); with the tokenizer loaded, the
    canary and the tokenizer agreement too."""
    from eagle_datagen.generation.endpoint_check import min_endpoints
    from eagle_datagen.generation.stage import canary_request
    from eagle_datagen.profile import load_profile

    urls = list(options.sglang_urls or [])
    if not urls:
        return [
            CheckLine("endpoints", "refused", "none given: give " + settings.named("sglang_urls", options.front_end))
        ]
    lines: list[CheckLine] = []
    try:
        profile = setup.profile if setup is not None else load_profile(options.prompts.profile)
        canary = canary_request(setup, options) if setup is not None else None
        agreement = None
        if setup is not None:
            agreement = agreement_check(
                setup.loaded.tokenizer,
                options.front_end,
                encode=setup.loaded.encoder(),
                allow_unchecked=options.allow_unchecked_tokenizer,
            )
        else:
            lines.append(
                CheckLine("endpoints", "warn", "no canary and no tokenizer agreement: the tokenizer did not load")
            )
        verdicts, checks, _ = asyncio.run(
            judge_each(
                urls,
                profile,
                options.model or profile.model,
                canary,
                options.allow_model_mismatch,
                options.preflight_wait_s,
                agreement=agreement,
                front_end=options.front_end,
                replicas_behind_url=options.replicas_behind_url,
                access=options.access(),  # the run's key and CA bundle: an endpoint that refuses it is refused here
            )
        )
    except DataGenError as exc:  # a bad URL, or every endpoint disagreeing with the tokenizer (the run's own)
        return [*lines, CheckLine("endpoints", "refused", _one_line(exc))]
    passed = sum(isinstance(v, ServerInfo) for v in verdicts)
    recipe = setup.recipe if setup is not None else None
    try:
        needed = max(required_endpoints(min_endpoints(options.min_endpoints, recipe), len(urls)), 1)
    except DataGenError as exc:
        return [*lines, CheckLine("endpoints", "refused", _one_line(exc))]
    summary = f"{passed} of {len(urls)} pass preflight, {needed} required"
    for verdict in verdicts:  # one a run would leave out while enough others pass is a warning, as in the run
        lines += _endpoint_lines(verdict, checks, "refused" if passed < needed else "warn", summary)
    if passed < needed:  # in the run's own words
        left = [v for v in verdicts if isinstance(v, LeftOut)]
        lines.append(
            CheckLine("endpoints", "refused", too_few_endpoints(passed, urls, left, needed, options.front_end))
        )
    else:
        lines.append(CheckLine("endpoints", "ok", summary))
    weights = {v.weight_version for v in verdicts if isinstance(v, ServerInfo)}
    if len(weights) > 1:
        lines.append(
            CheckLine(
                "endpoints", "refused", f"they serve different weight versions {sorted(map(str, weights))}: use one"
            )
        )
    return lines


def _endpoint_lines(
    verdict: ServerInfo | LeftOut, checks: dict[str, str], left_out: Verdict, summary: str
) -> list[CheckLine]:
    item = f"endpoint {verdict.url}"
    if isinstance(verdict, LeftOut):
        if verdict.key_refused:  # a refused API key stops a run whatever the other endpoints say
            return [CheckLine(item, "refused", verdict.reason)]
        after = "" if left_out == "refused" else f" (a run leaves this endpoint out and goes on: {summary})"
        return [CheckLine(item, left_out, verdict.reason + after)]
    slots = f", {verdict.max_running_requests} running slots" if verdict.max_running_requests else ""
    compared = checks.get(verdict.url)
    agrees = f"; tokenizer agrees (compared by {compared})" if compared in ("messages", "prompt") else ""
    lines = [CheckLine(item, "ok", f"serves {verdict.model_path} (SGLang {verdict.version or '?'}{slots}){agrees}")]
    if compared is not None and not agrees:  # tokenizer_agreement.Comparison: no_tokenizer, unchecked
        lines.append(
            CheckLine(
                item,
                "warn",
                f"tokenizer not compared with the server's ({compared}): "
                f"{UNCOMPARED.get(compared, 'see the preflight log')}",
            )
        )
    lines += [CheckLine(item, "warn", warning) for warning in verdict.warnings]
    if _DETERMINISTIC.applies(verdict.deterministic_inference):  # the run says this once for all its servers
        lines.append(CheckLine(item, "warn", _DETERMINISTIC.line(verdict.url, False)))
    return lines


def check_output_root(uri: str) -> list[CheckLine]:
    """Write a small probe object, read it back and find it in a listing (no delete: the probe stays, overwritten
    by the next check)."""
    from eagle_datagen.storage.output_root import open_output_root

    item = f"output root {uri}"
    body = json.dumps({"written_by": "eagle-datagen check", "at": time.time()}).encode()
    try:
        root = open_output_root(uri)
        root.write_bytes(PROBE_KEY, body)
        back = root.read_bytes(PROBE_KEY)
        listed = PROBE_KEY in root.list("checks/")
    except Exception as exc:  # noqa: BLE001 - a check reports every failure of the store as its line
        return [
            CheckLine(
                item,
                "refused",
                f"cannot write, read and list {PROBE_KEY} ({_one_line(exc)}): fix the "
                "location, its permissions or the store's credentials",
            )
        ]
    if back != body or not listed:
        return [
            CheckLine(
                item, "refused", f"{PROBE_KEY} was written but read back {'different' if back != body else 'unlisted'}"
            )
        ]
    return [CheckLine(item, "ok", f"wrote, read back and listed {root.location(PROBE_KEY)}")]


def check_sources(plans: list[Any], recipe: Any, count: bool = True) -> list[CheckLine]:
    """Each prompt source found, and (with `count`) its records counted as they stream by, none kept."""
    from eagle_datagen.sources.collect import SourcePlan, resolve_sources
    from eagle_datagen.sources.readers import read_rows

    lines = []
    base_dir = recipe.base_dir if recipe is not None else None
    for plan in plans:
        for spec in plan.sources:
            item = f"source {plan.category + ': ' if plan.category else ''}{spec.path}"
            try:
                files = resolve_sources([SourcePlan(plan.category, (spec,))], base_dir)[(0, 0)]  # this spec alone
                records = sum(sum(1 for _ in read_rows(f)) for f in files) if count else None
            except DataGenError as exc:
                lines.append(CheckLine(item, "refused", _one_line(exc)))
                continue
            if records == 0:  # a run reads it and plans nothing from it: worth saying, not a refusal
                lines.append(CheckLine(item, "warn", f"{len(files)} file(s) and no record: is it the right source?"))
            else:
                counted = f", {records:,} records" if records is not None else ""
                lines.append(CheckLine(item, "ok", f"{len(files)} file(s){counted}"))
    return lines


def run_checklist(options: Any, count_records: bool = True) -> list[CheckLine]:
    """Every item of the checklist for a run with these options (generation.stage.RunOptions), in order."""
    lines, recipe, plans = check_recipe(options)
    tokenizer_lines, setup = check_tokenizer(options)
    lines += tokenizer_lines
    lines += check_endpoints(options, setup)
    lines += check_output_root(options.prompts.output)
    lines += check_sources(plans, recipe, count_records)
    return lines
