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
from eagle_datagen.conversation import TURNS
from eagle_datagen.sources.recipe import Recipe

SAMPLING = "Prompts and sampling"
RUN = "Run"
DEPLOYMENT = "Deployment and storage"
# An s3:// prefix or an absolute local folder (a relative path means nothing on a worker).
OUTPUT_PATTERN = r"^(s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?|/.*)$"


def _number(default: float | int | None, kind: str, **schema: Any) -> Param:
    """A number param; nullable only when the recipe leaves the value to the model profile."""
    return Param(default, type=kind if default is not None else ["null", kind], **schema)


def _unset(name: str) -> str:
    """What an empty sampling param means (settings.PRECEDENCE), as the form says it."""
    default = settings.default_of(name)
    return f"Empty: the model profile's recommendation, else {default}." if default is not None else "Empty: off."


def category_params(recipe: Recipe, category: str, output: str, draft_vocab_size: int) -> dict[str, Param]:
    sampling = recipe.sampling_for(category)
    return {
        "limit": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            title="Prompt limit",
            description=f"At most this many {category} prompts, chosen deterministically. Empty: every prompt.",
            section=SAMPLING,
        ),
        "near_duplicate_threshold": Param(
            recipe.near_duplicates.threshold if recipe.near_duplicates else None,
            type=["null", "number"],
            exclusiveMinimum=0,
            maximum=1,
            title="Near-duplicate threshold",
            description="Leave out prompts whose MinHash similarity to a prompt kept before them (in this "
            "category) is at least this. Empty: off. Default: the recipe's near_duplicates.",
            section=SAMPLING,
        ),
        "samples_per_prompt": Param(
            recipe.samples_per_prompt_for(category),
            type="integer",
            minimum=1,
            maximum=64,
            title="Samples per prompt",
            description="Generations per prompt, each with its own sampling seed (1-64).",
            section=SAMPLING,
        ),
        "turns": Param(
            recipe.turns_for(category),
            type="string",
            enum=list(TURNS),
            title="Turns",
            description="last: one sample per record (its last answer). each: one sample per assistant turn, "
            "generated on-policy, tool loops continued with the recorded tool results (docs/multi-turn.md).",
            section=SAMPLING,
        ),
        "temperature": _number(
            sampling.temperature,
            "number",
            minimum=0,
            maximum=2,
            title="Temperature",
            description="Sampling temperature (0-2). Default: the recipe's value. " + _unset("temperature"),
            section=SAMPLING,
        ),
        "top_p": _number(
            sampling.top_p,
            "number",
            exclusiveMinimum=0,
            maximum=1,
            title="Top p",
            description="Nucleus sampling (above 0, at most 1). Default: the recipe's value. " + _unset("top_p"),
            section=SAMPLING,
        ),
        "max_new_tokens": _number(
            sampling.max_new_tokens,
            "integer",
            minimum=1,
            title="Max new tokens",
            description="Longest output per sample; longer ones are quarantined as finish_length. Default: the "
            "recipe's value. " + _unset("max_new_tokens"),
            section=SAMPLING,
        ),
        "shard_size": Param(
            settings.default_of("shard_size"),
            type="integer",
            minimum=1,
            title="Shard size",
            description="Prompts per shard; each shard is one mapped task in the sglang pool.",
            section=RUN,
        ),
        "draft_vocab_size": Param(
            draft_vocab_size,
            type="integer",
            minimum=1,
            title="Draft vocabulary size",
            description="K most frequent trained tokens in the run's draft vocabulary (EAGLE-3 d2t/t2d).",
            section=RUN,
        ),
        "max_rates": max_rates_param(recipe),
        "min_endpoints": Param(
            recipe.min_endpoints or settings.MIN_ENDPOINTS,
            type="integer",
            minimum=1,
            title="Minimum endpoints",
            description="SGLang endpoints that must pass preflight; one that fails is left out of the run with a "
            "warning, and the run fails only when fewer than this pass. Default: the recipe's min_endpoints, "
            "else 1.",
            section=DEPLOYMENT,
        ),
        "dry_run": Param(
            settings.default_of("dry_run"),
            type="boolean",
            title="Dry run",
            description="Preflight and plan only (writes the plan), generate nothing.",
            section=RUN,
        ),
        "force_regenerate": Param(
            False,
            type="boolean",
            title="Force regenerate",
            description="Generate every sample again, also those a published run already has (not incremental).",
            section=RUN,
        ),
        "sglang_conn_id": Param(
            settings.default_of("sglang_conn_id"),
            type="string",
            minLength=1,
            title="SGLang connection",
            description="Airflow connection of the SGLang deployment: host and port, or extra "
            '{"urls": [...]} for several replicas, and extra "tokenizer".',
            section=DEPLOYMENT,
        ),
        **storage_params(output),
    }


def max_rates_param(recipe: Recipe) -> Param:
    """Every reject reason's threshold, today's defaults under the recipe's `max_rates`; the schema refuses an
    unknown reason or a rate outside 0..1 when the run is created."""
    from eagle_datagen.validation.diagnosis import DiagnosisThresholds

    rates = DiagnosisThresholds().with_rates(recipe.max_rates).rates()
    return Param(
        rates,
        type="object",
        properties={reason: {"type": "number", "minimum": 0, "maximum": 1} for reason in rates},
        additionalProperties=False,
        title="Max rate per reject reason",
        description="Highest acceptable share of samples per reject reason (0-1): above it the run stops with "
        "its diagnosis as soon as the answers show it. For a server fault (prompt_echo, "
        "completion_tokens_mismatch, prompt_tokens_mismatch, id_out_of_range) it is the share of an endpoint's "
        "last 50 answers above which the endpoint is taken out of the run (at least 3). Default: the recipe's "
        "max_rates over the built-in values.",
        section=RUN,
    )


def storage_params(output: str) -> dict[str, Param]:
    return {
        "output": Param(
            output,
            type="string",
            pattern=OUTPUT_PATTERN,
            title="Output root",
            description="s3://bucket/prefix or an absolute folder; runs, manifests and releases go under it.",
            section=DEPLOYMENT,
        ),
        "aws_conn_id": Param(
            settings.default_of("aws_conn_id"),
            type="string",
            minLength=1,
            title="AWS connection",
            description="Amazon provider connection for the object store (endpoint_url in its extra for "
            "S3-compatible stores). Without it, the worker's AWS environment is used.",
            section=DEPLOYMENT,
        ),
    }


def release_params(output: str, draft_vocab_size: int) -> dict[str, Param]:
    from eagle_datagen.export import FORMATS

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
            "(docs/training.md): speculators, specforge, torchspec, hf, jsonl. Empty: no export.",
        ),
        "export_max_seq_len": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            title="Export sequence length",
            description="Cut exported rows to this many tokens, as the trainer would (drops rows left without a "
            "supervised token). Empty: no cut.",
        ),
        **storage_params(output),
    }
