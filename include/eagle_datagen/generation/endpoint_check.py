"""The run's preflight of its endpoints, the same for the command line and the Airflow preflight task.

Every endpoint is judged on its own (inference/preflight.judge_endpoints); the ones left out are named in a
warning and recorded in the run's endpoint journal, so the report and the manifest list them and why. The
minimum that must pass: the flag or trigger form, else the recipe's `min_endpoints`, else settings.py's; a count
or a share of the endpoints given (inference/endpoint_minimum.py).
"""

from __future__ import annotations

from typing import Any

from eagle_datagen import settings
from eagle_datagen.generation.endpoint_journal import record_left_out, record_tokenizer_check
from eagle_datagen.inference.access import NO_ACCESS, ServerAccess
from eagle_datagen.inference.endpoint_minimum import MinEndpoints, parse_min_endpoints, required_endpoints
from eagle_datagen.inference.preflight import ServerInfo, judge_endpoints
from eagle_datagen.inference.tokenizer_agreement import AgreementCheck
from eagle_datagen.sources.recipe import Recipe
from eagle_datagen.storage.output_root import OutputRoot


def min_endpoints(wanted: MinEndpoints | None, recipe: Recipe | None) -> MinEndpoints:
    """The minimum in force, as it was given (a count or a share)."""
    if wanted is not None:
        return parse_min_endpoints(wanted)
    if recipe is not None and recipe.min_endpoints is not None:
        return parse_min_endpoints(recipe.min_endpoints)
    return settings.MIN_ENDPOINTS


async def preflight_run(
    urls: list[str],
    setup: Any,  # tokenization.stage.TokenizeSetup: the run's profile and recipe
    model: str,
    canary: dict[str, Any] | None,
    *,
    root: OutputRoot,
    run_id: str,
    wanted_min: MinEndpoints | None,
    allow_model_mismatch: bool,
    wait_s: float,
    by: str,
    agreement: AgreementCheck | None = None,
    front_end: str = "cli",
    replicas_behind_url: int | None = None,
    access: ServerAccess = NO_ACCESS,  # the deployment's API key and CA bundle (inference/access.py)
) -> list[ServerInfo]:
    """The endpoints that passed; the others recorded as left out of run `run_id` (by `by`: "run", "preflight").
    `agreement`: the client-vs-server tokenizer check (inference/tokenizer_agreement.py) on those that passed; how
    each was checked is recorded too (the manifest's validation.tokenizer_check)."""
    verdicts = await judge_endpoints(
        urls,
        setup.profile,
        model,
        canary,
        allow_model_mismatch=allow_model_mismatch,
        wait_s=wait_s,
        min_endpoints=required_endpoints(min_endpoints(wanted_min, setup.recipe), len(urls)),
        agreement=agreement,
        front_end=front_end,
        replicas_behind_url=replicas_behind_url,
        access=access,
    )
    if verdicts.left_out:
        record_left_out(root, run_id, [x.to_json() for x in verdicts.left_out], by)
    if verdicts.tokenizer_check:
        record_tokenizer_check(root, run_id, verdicts.tokenizer_check, by, verdicts.tokenizer_modes)
    return verdicts.servers
