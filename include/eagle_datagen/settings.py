"""The settings of a run, declared once: their defaults (and why), and where each front end takes them.

A run is configured from three front ends: the `eagle-datagen run` flags (cli/run.py, cli/arguments.py), the recipe
(sources/recipe.py) and, in Airflow, the trigger form (plugins/eagle_datagen_airflow/form.py), the SGLang
connection and the DAG itself, which reach the steps as a `generation.steps.RunConfig`. Every setting is a
`Setting` below; the front ends take their constant defaults from here (`default_of`), and
tests/test_settings.py fails when a flag, a recipe key, a form param, a connection key or a `RunConfig` field
exists that this table does not declare, when a declared one is missing, or when a setting is missing from a
front end without `only` saying why (a front-end-only setting).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The defaults several modules need; the table below is their one declaration.
SHARD_SIZE = 1000
MAX_ATTEMPTS = 8
DRAFT_VOCAB_SIZE = 32000
CLAIM_TTL_S = 3600.0
REQUEST_TIMEOUT_S = 3600.0
GIVE_UP_AFTER_S = 600.0
LOST_AFTER_S = 120.0
WAIT_READY_S = 30.0
MIN_ENDPOINTS = 1
CHECKPOINT_EVERY = 64
CHECKPOINT_INTERVAL_S = 2.0
MAX_RECORD_BYTES = 1_000_000
PROFILE = "kimi-k2.5"
BALANCE = "prefix-affinity"


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any  # what a run uses when no front end sets it (None: decided elsewhere, `why` says where)
    why: str  # why the default is what it is
    cli: str | None = None  # the flag of `eagle-datagen run`
    recipe: str | None = None  # the recipe key: top level, `defaults.*`, `category.*` or `source.*`
    form: str | None = None  # the param of the Airflow trigger form
    airflow: str | None = None  # how Airflow sets it without a form param: "extra:<key>", "env:<VAR>", or a phrase
    config: str | None = None  # the field of generation.steps.RunConfig that carries it to the steps
    only: str = ""  # why a front end lacks it (required when one does)

    @property
    def in_cli(self) -> bool:
        return self.cli is not None

    @property
    def in_recipe(self) -> bool:
        return self.recipe is not None

    @property
    def in_airflow(self) -> bool:
        return self.form is not None or self.airflow is not None


_DEPLOYMENT = "a fact of the deployment, not of the prompt set: no recipe key"
_RECIPE_FOR_AIRFLOW = "Airflow runs take the DAG's recipe value, so every run of a category DAG agrees"

RUN_SETTINGS: tuple[Setting, ...] = (
    # --- prompt sources
    Setting(
        "prompts",
        [],
        "no default source: a run names its prompts",
        cli="--prompts",
        recipe="category.sources",
        config="prompts",
        only="Airflow runs read the sources of the DAG's recipe category",
    ),
    Setting(
        "recipe",
        None,
        "optional: --prompts alone is a run",
        cli="--recipe",
        airflow="env:EAGLE_DATAGEN_RECIPE",
        config="recipe",
        only="the recipe is the file itself",
    ),
    Setting(
        "prompts_format",
        None,
        "detected per record, so mixed sources need no flag",
        cli="--prompts-format",
        recipe="source.format",
        config="prompts_format",
        only="Airflow: the recipe's per-source format",
    ),
    Setting(
        "prompts_column",
        {},
        "the formats' own column names",
        cli="--prompts-column",
        recipe="source.columns",
        config="prompts_columns",
        only="Airflow: the recipe's per-source columns",
    ),
    Setting(
        "prompts_history",
        None,
        "keep: earlier replies are the conversation's context",
        cli="--prompts-history",
        recipe="source.history",
        config="prompts_history",
        only="Airflow: the recipe's per-source history",
    ),
    Setting(
        "dataset_split",
        None,
        "train, the split a dataset's prompts are in",
        recipe="source.split",
        only="CLI: in the hf:// URI (?split=); Airflow: the recipe's",
    ),
    Setting(
        "dataset_config",
        None,
        "the dataset's default configuration",
        recipe="source.config",
        only="CLI: in the hf:// URI (?config=); Airflow: the recipe's",
    ),
    Setting(
        "max_prompts",
        None,
        "no cap: a prompt set is used whole unless its recipe caps it",
        recipe="category.max_prompts",
        only="a cap belongs to the prompt set; --limit and the form's limit "
        "narrow one run (a source's max_prompts is source.max_prompts)",
    ),
    Setting(
        "source_max_prompts",
        None,
        "no cap per source",
        recipe="source.max_prompts",
        only="a cap of one source of a recipe category",
    ),
    Setting(
        "categories",
        None,
        "every category of the recipe",
        cli="--categories",
        recipe="categories",
        airflow="one DAG per category",
        config="categories",
    ),
    Setting(
        "limit",
        None,
        "every prompt; a limit is for trying a run small",
        cli="--limit",
        form="limit",
        config="limit",
        only="the recipe caps with max_prompts",
    ),
    Setting(
        "seed",
        0,
        "a fixed seed, so caps select the same prompts on every rerun",
        cli="--seed",
        recipe="seed",
        config="seed",
        only=_RECIPE_FOR_AIRFLOW,
    ),
    Setting(
        "max_reject_rate",
        0.05,
        "a few bad records are normal; more means a wrong source or format",
        cli="--max-reject-rate",
        recipe="max_reject_rate",
        config="max_reject_rate",
        only=_RECIPE_FOR_AIRFLOW,
    ),
    Setting(
        "benchmarks",
        [],
        "decontamination is opt-in: which benchmarks matter depends on the drafter",
        cli="--benchmark",
        recipe="decontamination.benchmarks",
        config="benchmarks",
        only=_RECIPE_FOR_AIRFLOW,
    ),
    Setting(
        "benchmark_ngram",
        13,
        "13 words: the n-gram length of the usual contamination studies",
        cli="--benchmark-ngram",
        recipe="decontamination.ngram",
        config="benchmark_ngram",
        only=_RECIPE_FOR_AIRFLOW,
    ),
    Setting(
        "near_duplicate_threshold",
        None,
        "off; 0.7 when on: one word changed in 36 keeps 0.84",
        cli="--near-duplicate-threshold",
        recipe="near_duplicates.threshold",
        form="near_duplicate_threshold",
        config="near_duplicate_threshold",
    ),
    Setting(
        "near_duplicate_shingle_words",
        3,
        "3-word shingles: word order matters, rewording does not hide",
        recipe="near_duplicates.shingle_words",
        only="a tuning of the filter, kept with the prompt set",
    ),
    Setting(
        "near_duplicate_num_perm",
        128,
        "128 permutations: about 0.09 error on the similarity estimate",
        recipe="near_duplicates.num_perm",
        only="a tuning of the filter, kept with the prompt set",
    ),
    Setting(
        "max_record_bytes",
        MAX_RECORD_BYTES,
        "1 MB of prompt JSON is far above any real prompt",
        cli="--max-record-bytes",
        config="max_record_bytes",
        only="a reader's safety limit, for the rare source with huge records",
    ),
    # --- model and tokenizer
    Setting(
        "tokenizer",
        None,
        "no default: it must be the served model's",
        cli="--tokenizer",
        airflow="extra:tokenizer",
        config="tokenizer",
        only=_DEPLOYMENT,
    ),
    Setting(
        "profile",
        PROFILE,
        "Kimi-K2.5 is the first target",
        cli="--profile",
        airflow="extra:profile",
        config="profile",
        only=_DEPLOYMENT,
    ),
    Setting(
        "trust_remote_code",
        False,
        "never on by default: tokenizer code runs with the worker's rights",
        cli="--trust-remote-code",
        airflow="extra:trust_remote_code",
        config="trust_remote_code",
        only=_DEPLOYMENT,
    ),
    Setting(
        "allow_special_token_text",
        False,
        "special-token text in a record forges turn boundaries",
        cli="--allow-special-token-text",
        recipe="allow_special_token_text",
        config="allow_special_token_text",
        only="an opt-in for a reviewed prompt set: " + _RECIPE_FOR_AIRFLOW,
    ),
    Setting(
        "max_prompt_tokens",
        32768,
        "longer prompts are rare and leave little room for the answer",
        cli="--max-prompt-tokens",
        recipe="defaults.max_prompt_tokens",
        config="max_prompt_tokens",
        only=_RECIPE_FOR_AIRFLOW,
    ),
    # --- SGLang
    Setting(
        "sglang_urls",
        [],
        "no default: the servers are the deployment's",
        cli="--sglang-url",
        airflow="extra:urls",
        config="sglang_urls",
        only=_DEPLOYMENT,
    ),
    Setting(
        "model", None, "the profile's model", cli="--model", airflow="extra:model", config="model", only=_DEPLOYMENT
    ),
    Setting(
        "allow_model_mismatch",
        False,
        "data from another model than intended is worse than no data",
        cli="--allow-model-mismatch",
        config="allow_model_mismatch",
        only="a hand override for a renamed model; a scheduled run never has it",
    ),
    Setting(
        "concurrency",
        None,
        "1.25 x the server's max_running_requests keeps every slot busy",
        cli="--concurrency",
        airflow="extra:concurrency",
        config="concurrency",
        only=_DEPLOYMENT,
    ),
    Setting(
        "balance",
        BALANCE,
        "a prompt's samples and prompts sharing leading ids on one replica, so its prefix cache serves them",
        cli="--balance",
        airflow="extra:balance",
        config="balance",
        only=_DEPLOYMENT,
    ),
    Setting(
        "max_attempts",
        MAX_ATTEMPTS,
        "8 attempts with backoff ride out a replica restart",
        cli="--max-attempts",
        config="max_attempts",
        only="Airflow keeps the default: its task retries resend what is left",
    ),
    Setting(
        "request_timeout",
        REQUEST_TIMEOUT_S,
        "an hour: a 32k-token reasoning sample can take many minutes",
        cli="--request-timeout",
        config="request_timeout_s",
        only="a hand tuning for one deployment; Airflow keeps the default",
    ),
    Setting(
        "lost_after",
        LOST_AFTER_S,
        "2 minutes of a server counting fewer requests than the run has there: polls 5 s apart agree by then, "
        "and a lost request costs minutes, not the hour of the request timeout",
        cli="--lost-after",
        config="lost_after_s",
        only="a hand tuning for one deployment; Airflow keeps the default",
    ),
    Setting(
        "give_up_after",
        GIVE_UP_AFTER_S,
        "10 minutes of every endpoint failing is an outage, not a blip",
        cli="--give-up-after",
        config="give_up_after_s",
        only="Airflow keeps the default: a failed task is retried by Airflow",
    ),
    Setting(
        "wait_ready",
        WAIT_READY_S,
        "30 s covers a server finishing its start; longer belongs to a retry",
        cli="--wait-ready",
        config="wait_ready_s",
        only="Airflow keeps the default: the preflight task retries",
    ),
    Setting(
        "min_endpoints",
        MIN_ENDPOINTS,
        "one healthy replica can do the work: a broken one is left out with a warning, not a failed night",
        cli="--min-endpoints",
        recipe="min_endpoints",
        form="min_endpoints",
        config="min_endpoints",
    ),
    Setting(
        "canary",
        True,
        "one request proves the deployment before any GPU time is spent",
        cli="--no-canary",
        config="canary",
        only="an escape hatch by hand; a scheduled run always checks",
    ),
    # --- sampling
    Setting(
        "max_new_tokens",
        8192,
        "room for long reasoning; the recipe sets it per category",
        cli="--max-new-tokens",
        recipe="defaults.sampling.max_new_tokens",
        form="max_new_tokens",
        config="max_new_tokens",
    ),
    Setting(
        "temperature",
        1.0,
        "Kimi-K2.5's recommended sampling: the drafter learns the served distribution",
        cli="--temperature",
        recipe="defaults.sampling.temperature",
        form="temperature",
        config="temperature",
    ),
    Setting(
        "top_p",
        0.95,
        "Kimi-K2.5's recommended sampling",
        cli="--top-p",
        recipe="defaults.sampling.top_p",
        form="top_p",
        config="top_p",
    ),
    Setting(
        "top_k",
        None,
        "off, as Kimi-K2.5 is served",
        cli="--top-k",
        recipe="defaults.sampling.top_k",
        config="top_k",
        only=_RECIPE_FOR_AIRFLOW,
    ),
    Setting(
        "min_p",
        None,
        "off, as Kimi-K2.5 is served",
        recipe="defaults.sampling.min_p",
        only="rarely changed: the recipe's, for every front end",
    ),
    Setting(
        "samples_per_prompt",
        1,
        "one sample per prompt; more for a small prompt set",
        cli="--samples-per-prompt",
        recipe="defaults.samples_per_prompt",
        form="samples_per_prompt",
        config="samples_per_prompt",
    ),
    Setting(
        "turns",
        "last",
        "one sample per record: the answer to its last message",
        cli="--turns",
        recipe="defaults.turns",
        form="turns",
        config="turns",
    ),
    Setting(
        "max_tool_steps",
        8,
        "8 tool calls in a row: longer loops are rare and mostly stuck",
        recipe="defaults.max_tool_steps",
        only="a property of the prompt set's agentic conversations",
    ),
    # --- output, shards and resume
    Setting(
        "output",
        None,
        "no default on the command line; the form's is EAGLE_DATAGEN_OUTPUT",
        cli="--output",
        form="output",
        config="output",
        only=_DEPLOYMENT,
    ),
    Setting(
        "run_id",
        None,
        "a new UTC timestamp id; reused to resume",
        cli="--run-id",
        airflow="from the DAG run id (runs.run_id_for)",
        config="run_id",
        only="a name of one run",
    ),
    Setting(
        "incremental",
        False,
        "a run by hand generates what it is told; the nightly DAG is incremental",
        cli="--incremental",
        form="force_regenerate",
        config="incremental",
        only="one run's choice (the form's force_regenerate is its inverse)",
    ),
    Setting(
        "per_weight_version",
        False,
        "by hand: samples of any weights count",
        cli="--per-weight-version",
        airflow="always on: new weights make every sample new",
        config="per_weight_version",
        only="one run's choice",
    ),
    Setting(
        "claim_ttl",
        CLAIM_TTL_S,
        "an hour outlasts a live run's quiet spells; a longer silence is a death",
        cli="--claim-ttl",
        airflow="env:EAGLE_DATAGEN_CLAIM_TTL",
        config="claim_ttl_s",
        only="a fact of the deployment's pool waits",
    ),
    Setting(
        "shard_size",
        SHARD_SIZE,
        "1000 prompts: minutes of work per mapped task, few tasks per run",
        cli="--shard-size",
        form="shard_size",
        config="shard_size",
        only="a unit of scheduling, not of the prompt set",
    ),
    Setting(
        "checkpoint_every",
        CHECKPOINT_EVERY,
        "64 samples: a crash loses little, the store sees few writes",
        cli="--checkpoint-every",
        config="checkpoint_every",
        only="a tuning of the writer; Airflow keeps the default",
    ),
    Setting(
        "checkpoint_interval",
        CHECKPOINT_INTERVAL_S,
        "2 s: a slow run still checkpoints often",
        cli="--checkpoint-interval",
        config="checkpoint_interval_s",
        only="a tuning of the writer; Airflow keeps the default",
    ),
    Setting(
        "processes",
        None,
        "one per 2000 prompts, up to the CPU count",
        cli="--processes",
        config="processes",
        only="a property of the machine; Airflow workers use the default",
    ),
    # --- validation and publishing
    Setting(
        "draft_vocab_size",
        DRAFT_VOCAB_SIZE,
        "32000: EAGLE-3's draft vocabulary for large targets",
        cli="--draft-vocab-size",
        form="draft_vocab_size",
        config="draft_vocab_size",
        only="a training choice, not of the prompt set",
    ),
    Setting(
        "max_reasoning_tokens",
        None,
        "no limit: long reasoning is what the drafter must learn",
        cli="--max-reasoning-tokens",
        config="max_reasoning_tokens",
        only="not yet in the recipe or the form",
    ),
    Setting(
        "max_rates",
        {},
        "validation/diagnosis.py's thresholds, tuned per reason",
        cli="--max-rate",
        recipe="max_rates",
        form="max_rates",
        config="max_rates",
    ),
    Setting(
        "draft_vocab_required",
        False,
        "a run whose few distinct tokens cannot fill the default vocabulary is published without one",
        config="draft_vocab_required",
        only="derived: the command line sets it when --draft-vocab-size is given",
    ),
    Setting(
        "front_end",
        "cli",
        "the command line; Airflow's tasks say airflow",
        config="front_end",
        only="set by the front end itself: messages name a setting as it calls it (settings.named)",
    ),
    # --- Airflow only
    Setting(
        "dry_run",
        False,
        "a triggered run generates",
        form="dry_run",
        config="dry_run",
        only="Airflow-only: on the command line `tokenize` is the dry run",
    ),
    Setting(
        "sglang_conn_id",
        "sglang_default",
        "Airflow's naming convention",
        form="sglang_conn_id",
        only="Airflow-only: the connection that holds the deployment's settings",
    ),
    Setting(
        "aws_conn_id",
        "aws_default",
        "the Amazon provider's default connection",
        form="aws_conn_id",
        only="Airflow-only: the command line reads the AWS environment",
    ),
)

# Recipe keys that shape the file rather than set a run: no front end but the recipe has them.
RECIPE_STRUCTURE = frozenset(
    {
        "version",
        "name",
        "defaults",
        "defaults.sampling",
        "decontamination",
        "near_duplicates",
        "category.sampling",
        "source.path",
    }
)


def setting(name: str) -> Setting:
    for entry in RUN_SETTINGS:
        if entry.name == name:
            return entry
    raise KeyError(name)


def default_of(name: str) -> Any:
    return setting(name).default


# --- the one precedence, for every front end
# A setting's value is the first of these that sets it (None: not set). The command line's flags and the Airflow
# form's params are the same layer: each front end has one of them. tests/generation/test_precedence.py holds
# every front end to it (the qwen3 case: a recipe that sets no temperature samples at the profile's 0.6).
PRECEDENCE = (
    "the flag (command line) or the form param (Airflow)",
    "the recipe category's value",
    "the recipe's defaults",
    "the model profile's recommendation (sampling only)",
    "the built-in default (this table)",
)
# The sampling parameters of SGLang's /generate that a run sets; a model profile recommends some of them.
SAMPLING = ("max_new_tokens", "temperature", "top_p", "top_k", "min_p")


def resolve(
    name: str, *, given: Any = None, category: Any = None, defaults: Any = None, profile: Any = None
) -> Any:
    """The value of setting `name`: the first of `PRECEDENCE` that is not None, else the declared default."""
    for value in (given, category, defaults, profile):
        if value is not None:
            return value
    return default_of(name)


def named(name: str, front_end: str) -> str:
    """The setting as the front end that runs calls it: `--draft-vocab-size` on the command line, the
    `draft_vocab_size` param in Airflow, the recipe key in a recipe (else its name)."""
    entry = setting(name)
    if front_end == "cli" and entry.cli:
        return entry.cli
    if front_end == "airflow" and entry.form:
        return f"the {entry.form} param"
    if front_end == "airflow" and (entry.airflow or "").startswith("extra:"):
        return f"the SGLang connection's extra {entry.airflow.removeprefix('extra:')!r}"
    if front_end == "airflow" and (entry.airflow or "").startswith("env:"):
        return entry.airflow.removeprefix("env:")
    if front_end == "recipe" and entry.recipe:
        return f"the recipe's {entry.recipe}"
    return name


# --- the configuration reference (docs/configuration.md), generated from the table
REFERENCE_START = "<!-- settings reference: generated by `python -m eagle_datagen.settings`; do not edit -->"
REFERENCE_END = "<!-- end of the settings reference -->"


def _cell(value: Any) -> str:
    text = "" if value is None else (f"`{value}`" if not isinstance(value, str) or value else "")
    return text.replace("|", "\\|")


def reference_table() -> str:
    """Every setting: its built-in default and why, and its name in each front end (markdown)."""
    lines = [
        REFERENCE_START,
        "",
        "| setting | default | flag (`run`) | recipe key | Airflow | why the default |",
        "|---|---|---|---|---|---|",
    ]
    for entry in RUN_SETTINGS:
        airflow = f"form `{entry.form}`" if entry.form else (entry.airflow or "")
        if airflow.startswith("extra:"):
            airflow = f"connection extra `{airflow.removeprefix('extra:')}`"
        elif airflow.startswith("env:"):
            airflow = f"`{airflow.removeprefix('env:')}`"
        default = "none" if entry.default is None else f"`{entry.default!r}`"
        lines.append(
            f"| {entry.name} | {default} | {_cell(entry.cli)} | {_cell(entry.recipe)} | {airflow} | "
            f"{entry.why.replace('|', '/')} |"
        )
    lines += ["", "Precedence, for every front end: " + " > ".join(PRECEDENCE) + ".", "", REFERENCE_END]
    return "\n".join(lines)


# --- the front ends' values as settings: one map per front end, derived from the table
# (the values go into generation.steps.RunConfig, whose `options()` is the one map to the layers' options)
_FROM_FRONT_END = {  # the few settings whose front-end value is not the setting's value itself
    "canary": lambda no_canary: not no_canary,  # --no-canary
    "prompts_column": dict,  # --prompts-column FIELD=COLUMN pairs
    "max_rates": dict,  # --max-rate REASON=RATE pairs, or the form's object
}


def flag_dest(entry: Setting) -> str:
    """The argparse attribute of the setting's flag."""
    return entry.cli.removeprefix("--").replace("-", "_")


def from_flags(args: dict[str, Any]) -> dict[str, Any]:
    """The command line's values as RunConfig fields: every declared flag the parsed arguments have; a flag left
    unset (None) is left out, so that the field's declared default (or a later layer) applies."""
    values = {}
    for entry in RUN_SETTINGS:
        if not (entry.cli and entry.config) or flag_dest(entry) not in args:
            continue
        value = args[flag_dest(entry)]
        if value is not None:
            values[entry.config] = _FROM_FRONT_END.get(entry.name, lambda v: v)(value)
    return values


def from_form(params: dict[str, Any]) -> dict[str, Any]:
    """The Airflow form's params as RunConfig fields (None: the param left empty, a later layer applies)."""
    values = {}
    for entry in RUN_SETTINGS:
        if not (entry.form and entry.config) or entry.form not in params:
            continue
        value = params[entry.form]
        if entry.name == "incremental":  # the form asks the inverse: force_regenerate
            value = not value
        if value is not None:
            values[entry.config] = _FROM_FRONT_END.get(entry.name, lambda v: v)(value)
    return values


def from_connection(extra: dict[str, Any]) -> dict[str, Any]:
    """The SGLang connection's extra (as deployment.Deployment reads it) as RunConfig fields."""
    values = {}
    for entry in RUN_SETTINGS:
        key = (entry.airflow or "").removeprefix("extra:")
        if entry.airflow and entry.airflow.startswith("extra:") and entry.config and extra.get(key) is not None:
            values[entry.config] = extra[key]
    return values


if __name__ == "__main__":
    print(reference_table())
