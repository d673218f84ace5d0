"""The trigger forms: typed params with titles, descriptions and JSON-schema validation.

Airflow validates a run's conf against these schemas when the run is created (the UI form, `airflow dags
trigger -c`, the REST API, `dag.test(run_conf=...)`), and refuses a bad value with
`Invalid input for param <name>: ...`. Sampling defaults are the recipe's values for the category, so
the form shows what a scheduled run uses; a value the recipe does not set is empty, and the run takes the model
profile's recommendation, else settings.py's default (settings.PRECEDENCE, the same as on the command line).
Credentials never go here: only connection ids.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param

from eagle_datagen import settings
from eagle_datagen.sources.recipe import Recipe

# The form's sections and the output root's pattern are declared with the settings.
SAMPLING, RUN, DEPLOYMENT = settings.FORM_SAMPLING, settings.FORM_RUN, settings.FORM_DEPLOYMENT
OUTPUT_PATTERN = settings.OUTPUT_PATTERN


def _unset(name: str) -> str:
    """What an empty sampling param means (settings.PRECEDENCE), as the form says it."""
    default = settings.default_of(name)
    return f"Empty: the model profile's recommendation, else {default}." if default is not None else "Empty: off."


def _rates_schema(rates: dict[str, float]) -> dict[str, Any]:
    """Every reject reason the form shows is a rate in 0..1; the schema refuses an unknown reason."""
    return {"properties": {reason: {"type": "number", "minimum": 0, "maximum": 1} for reason in rates}}


# Schema keywords that depend on the value shown (the few the declaration cannot state).
SCHEMA_OF_VALUE = {"max_rates": _rates_schema}


def param(entry: settings.Setting, shown: dict[str, Any], category: str = "") -> Param:
    """The `Param` of a setting, built from its declaration (settings.FormParam): the value the form shows is the
    declaration's fixed default, else `shown`'s (the recipe's or the deployment's), else the declared default."""
    spec = entry.param
    value = spec.default if spec.default is not settings.SHOWN else shown.get(entry.name, entry.default)
    schema = dict(spec.schema) | (entry.bounds.schema() if entry.bounds else {})
    if (choices := settings.choices_of(entry)) is not None:
        schema["enum"] = list(choices)
    schema |= SCHEMA_OF_VALUE.get(entry.name, lambda _: {})(value)
    return Param(
        value,
        type=["null", spec.type] if spec.nullable or value is None else spec.type,
        title=spec.title,
        description=spec.description.replace("{category}", category).replace("{unset}", _unset(entry.name)),
        section=spec.section,
        **schema,
    )


def category_params(
    recipe: Recipe, category: str, output: str, draft_vocab_size: int, connections: dict[str, str] | None = None
) -> dict[str, Param]:
    """Every declared form param (section by section, in settings.RUN_SETTINGS's order), showing the recipe's
    value for the category where the recipe has one, and the deployment's output root, draft vocabulary size and
    connection ids (`connections`, the recipe's in Airflow: recipe.AirflowRecipe.connections; else the declared)."""
    from eagle_datagen.validation.diagnosis import DiagnosisThresholds

    sampling = recipe.sampling_for(category)
    shown = {
        **{name: getattr(sampling, name) for name in settings.SAMPLING},
        "near_duplicate_threshold": recipe.near_duplicates.threshold if recipe.near_duplicates else None,
        "samples_per_prompt": recipe.samples_per_prompt_for(category),
        "turns": recipe.turns_for(category),
        "top_logprobs": recipe.top_logprobs_for(category),
        "mode": recipe.mode_for(category),
        "instant_fraction": recipe.instant_fraction_for(category),
        "max_rates": DiagnosisThresholds().with_rates(recipe.max_rates).rates(),
        "min_endpoints": recipe.min_endpoints or settings.MIN_ENDPOINTS,
        "output": output,
        "draft_vocab_size": draft_vocab_size,
        "heldout_fraction": None,  # empty: the output root's frozen fraction (a value would refuse another root's)
        **(connections or {}),
    }
    declared = [entry for entry in settings.RUN_SETTINGS if entry.form and entry.param]
    declared.sort(key=lambda entry: settings.FORM_SECTIONS.index(entry.param.section))  # section by section
    params = {entry.form: param(entry, shown, category) for entry in declared}
    return params | hand_written_params(recipe, category)


def hand_written_params(recipe: Recipe, category: str) -> dict[str, Param]:
    """The one place for a param written by hand: a setting declared with `form` but without a `FormParam` (none
    today). The per-setting tests still hold it to its declaration (name, default)."""
    return {}


def evaluate_params(output: str, connections: dict[str, str] | None = None) -> dict[str, Param]:
    """The evaluate DAG's form: every evaluate setting with a form param (settings.EVALUATE_SETTINGS), section by
    section; the sampling params empty, so each category takes the recipe's sampling as its runs do."""
    shown = {"output": output} | {name: None for name in settings.SAMPLING} | (connections or {})
    declared = [entry for entry in settings.EVALUATE_SETTINGS if entry.form and entry.param]
    declared.sort(key=lambda entry: settings.EVALUATE_FORM_SECTIONS.index(entry.param.section))
    return {entry.form: param(entry, shown) for entry in declared}


def storage_params(output: str, connections: dict[str, str] | None = None) -> dict[str, Param]:
    shown = {"output": output} | (connections or {})
    return {name: param(settings.setting(name), shown) for name in ("output", "aws_conn_id")}


def release_params(
    output: str, draft_vocab_size: int, mixes: list[str] | None = None, connections: dict[str, str] | None = None
) -> dict[str, Param]:
    """The release DAG's params; `mixes`: the recipe's named training mixes, offered beside `all`."""
    from eagle_datagen.export import FORMATS
    from eagle_datagen.sources.recipe import ALL_MIX

    choices = [ALL_MIX, *(mixes or [])]

    return {
        "draft_vocab_size": Param(
            draft_vocab_size,
            type="integer",
            minimum=1,
            title="Draft vocabulary size",
            description="K most frequent trained tokens over the whole release.",
        ),
        "export_formats": Param(
            [],
            type="array",
            items={"type": "string", "enum": list(FORMATS)},
            uniqueItems=True,
            examples=list(FORMATS),
            title="Export for trainers",
            description="Also write the release in these trainers' formats under exports/release=<id>/<format>/ "
            "(docs/internals/training.md): speculators, specforge, torchspec, hf, jsonl. Empty: no export.",
        ),
        "export_mixes": Param(
            [ALL_MIX],
            type="array",
            items={"type": "string", "enum": choices},
            uniqueItems=True,
            minItems=1,
            examples=choices,
            title="Training mixes",
            description="Export each of these mixes (the recipe's mixes:, docs/internals/training.md): "
            "all is every category "
            "and mode unweighted, under exports/release=<id>/<format>/; a named mix goes under "
            "exports/release=<id>/mix=<name>/<format>/. A two-phase training set is two mixes.",
        ),
        "export_max_seq_len": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            title="Export sequence length",
            description="Cut exported rows to this many tokens, as the trainer would (drops rows left without a "
            "supervised token). Empty: no cut.",
        ),
        **storage_params(output, connections),
    }
