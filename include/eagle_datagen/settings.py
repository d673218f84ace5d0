"""The settings of a run, declared once: their defaults (and why), and where each front end takes them.

A run is configured from three front ends: the `eagle-datagen run` flags, the recipe (sources/recipe.py) and, in
Airflow, the trigger form, the SGLang connection and the DAG itself. Every setting is a `Setting` below, and
everything else is derived from it:

- the flags, from its `Flag` (cli/flags.py); the form's params, from its `FormParam`
  (plugins/eagle_datagen_airflow/form.py); the recipe schema's defaults (`default_of`);
- the front ends' values as settings (`from_flags`, `from_form`, `from_connection`);
- `generation.steps.RunConfig`, the plain-JSON carrier the steps take: one field per setting with `config`,
  its default from here (`config_fields`);
- the layers' options: `RunConfig.options()` puts each value where the setting's `option` says, a dotted path
  into generation.stage.RunOptions (`build_options`);
- messages, which name a setting as the running front end calls it (`named`);
- docs/configuration.md's settings table (`reference_table`) and synopsis (cli/reference.py writes both).

Adding a setting is one declaration here plus its use in the layer whose options it feeds (a field of that
layer's options, named by `option`); no front end, carrier or map is written again. A layer's option that no
front end should set is listed in `OPTION_TUNINGS` instead. tests/dags/test_run_settings.py fails when a flag, a
recipe key, a form param, a connection key, a `RunConfig` field or a RunOptions leaf exists that this table
does not declare, when a declared one is missing or lands elsewhere, when a flag or param is not the one its
declaration builds, or when a setting is missing from a front end without `only` saying why.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import typing
from dataclasses import dataclass, field
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


# The groups of `eagle-datagen run --help` (`tokenize` has the first two).
SOURCES = "prompt sources (give --recipe or --prompts)"
MODEL = "model"
SGLANG = "SGLang"
SAMPLING_FLAGS = "sampling (override the recipe for every category)"
OUTPUT = "output, shards and resume"
PUBLISH = "validation and publishing"
RUN_FLAG_GROUPS = (SOURCES, MODEL, SGLANG, SAMPLING_FLAGS, OUTPUT, PUBLISH)  # `run` and `check` take them all
# The sections of the Airflow trigger form.
FORM_SAMPLING = "Prompts and sampling"
FORM_RUN = "Run"
FORM_DEPLOYMENT = "Deployment and storage"
FORM_SECTIONS = (FORM_SAMPLING, FORM_RUN, FORM_DEPLOYMENT)  # in the form's order
# An s3:// prefix or an absolute local folder (a relative path means nothing on a worker).
OUTPUT_PATTERN = r"^(s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?|/.*)$"
SHOWN = object()  # a form param's default: the value the form shows (the recipe's or the deployment's), else `default`


@dataclass(frozen=True)
class Flag:
    """The `eagle-datagen run` flag of a setting, as cli/flags.py builds it with argparse. A bool setting is a
    store_true flag; the flag's default is the setting's, except None where a lower layer (a recipe key) decides,
    and [] for a repeated flag. `help` may say {default} and {choices}."""

    group: str  # the --help group (SOURCES, MODEL, ...)
    help: str
    metavar: str | None = None
    type: str | None = None  # an argument type of cli/arguments.py by name, or a builtin ("int")
    choices: str | None = None  # "module:NAME" of the allowed values
    repeat: bool = False  # action="append": the flag may be given several times
    required: bool = False
    unset: bool = False  # the flag defaults to None although the setting has a default: `why` says what decides


@dataclass(frozen=True)
class FormParam:
    """The Airflow trigger form's param of a setting, as plugins/eagle_datagen_airflow/form.py builds the `Param`:
    JSON-schema `type` (["null", type] when the value shown is None, or always when `nullable`), further schema
    keywords, title, section and description (which may say {category} and {unset}: what empty means)."""

    type: str | list[str]  # a list: any of these JSON types (min_endpoints: a count or a share)
    title: str
    description: str
    section: str
    schema: dict = field(default_factory=dict)
    nullable: bool = False
    default: Any = SHOWN  # a fixed default of the form itself (force_regenerate: False)


@dataclass(frozen=True)
class Bounds:
    """A numeric setting's range, declared once and checked by every front end that takes it: the flag
    (cli/flags.py wraps its type), the form param's JSON schema (form.py) and the recipe's field
    (sources/recipe.py, `bounds_of`)."""

    minimum: float | None = None
    maximum: float | None = None
    above: bool = False  # strictly above the minimum (top_p 0 would sample nothing)

    def schema(self) -> dict[str, float]:
        """The JSON-schema keywords (the trigger form's param)."""
        keywords: dict[str, float] = {}
        if self.minimum is not None:
            keywords["exclusiveMinimum" if self.above else "minimum"] = self.minimum
        if self.maximum is not None:
            keywords["maximum"] = self.maximum
        return keywords

    def field(self) -> dict[str, float]:
        """pydantic's Field keywords (the recipe's models)."""
        keywords: dict[str, float] = {}
        if self.minimum is not None:
            keywords["gt" if self.above else "ge"] = self.minimum
        if self.maximum is not None:
            keywords["le"] = self.maximum
        return keywords

    def describe(self) -> str:
        """The range as the configuration reference states it: `>= 1, <= 64`, `> 0`."""
        parts = [] if self.minimum is None else [f"{'>' if self.above else '>='} {self.minimum:g}"]
        return ", ".join(parts + ([] if self.maximum is None else [f"<= {self.maximum:g}"]))

    def problem(self, value: float) -> str | None:
        """Why `value` is out of range (None: it is in range)."""
        low, high = self.minimum, self.maximum
        if low is not None and (value <= low if self.above else value < low):
            return f"must be {'above' if self.above else 'at least'} {low:g}" + (
                f" and at most {high:g}" if high is not None else ""
            )
        if high is not None and value > high:
            return f"must be at most {high:g}"
        return None


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
    # Where the value lands in the layers' options: a dotted path into generation.stage.RunOptions
    # ("sampling.temperature"); several paths for a value two layers read. `RunConfig.options()` is built from these.
    option: str | tuple[str, ...] | None = None
    required: bool = False  # every run must have it: its RunConfig field has no default
    bounds: Bounds | None = None  # a number's range, for every front end that takes it
    only: str = ""  # why a front end lacks it (required when one does)
    flag: Flag | None = None  # how cli/flags.py builds the flag `cli` (None: written by hand in cli/run.py)
    param: FormParam | None = None  # how form.py builds the param `form` (None: written by hand in form.py)

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
        flag=Flag(
            SOURCES,
            help=(
                "prompt records (data contract v1) to read; repeat for several sources. Each record must carry its "
                "own category."
            ),
            metavar="SRC",
            type="source_spec",
            repeat=True,
        ),
        recipe="category.sources",
        config="prompts",
        option="prompts.prompts",
        only="Airflow runs read the sources of the DAG's recipe category",
    ),
    Setting(
        "prompts_format",
        None,
        "detected per record, so mixed sources need no flag",
        cli="--prompts-format",
        flag=Flag(
            SOURCES,
            help=(
                "format of every --prompts source: {choices} (default: detected per record; a recipe names format: "
                "per source). See docs/internals/prompt-sources.md"
            ),
            metavar="FORMAT",
            choices="eagle_datagen.sources.formats:FORMAT_NAMES",
        ),
        recipe="source.format",
        config="prompts_format",
        option="prompts.prompts_format",
        only="Airflow: the recipe's per-source format",
    ),
    Setting(
        "prompts_column",
        {},
        "the formats' own column names",
        cli="--prompts-column",
        flag=Flag(
            SOURCES,
            help=(
                "read a format's FIELD (prompt, instruction, conversations, messages, id, category, system, ...) "
                "from the sources' COLUMN; repeatable"
            ),
            metavar="FIELD=COLUMN",
            type="column_mapping",
            repeat=True,
        ),
        recipe="source.columns",
        config="prompts_columns",
        option="prompts.prompts_columns",
        only="Airflow: the recipe's per-source columns",
    ),
    Setting(
        "prompts_history",
        None,
        "keep: earlier replies are the conversation's context",
        cli="--prompts-history",
        flag=Flag(
            SOURCES,
            help=(
                "earlier assistant replies of a conversation: keep them as history (default) or drop them and "
                "everything after the first user turn; trailing replies are always cut"
            ),
            choices="eagle_datagen.sources.formats:HISTORY_POLICIES",
        ),
        recipe="source.history",
        config="prompts_history",
        option="prompts.prompts_history",
        only="Airflow: the recipe's per-source history",
    ),
    Setting(
        "recipe",
        None,
        "optional: --prompts alone is a run",
        cli="--recipe",
        flag=Flag(
            SOURCES,
            help="recipe YAML mapping categories to sources, caps and sampling (see include/recipes/)",
            metavar="FILE",
        ),
        airflow="env:EAGLE_DATAGEN_RECIPE",
        config="recipe",
        option="prompts.recipe",
        only="the recipe is the file itself",
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
        bounds=Bounds(1),
    ),
    Setting(
        "source_max_prompts",
        None,
        "no cap per source",
        recipe="source.max_prompts",
        only="a cap of one source of a recipe category",
        bounds=Bounds(1),
    ),
    Setting(
        "categories",
        None,
        "every category of the recipe",
        cli="--categories",
        flag=Flag(
            SOURCES,
            help="only these categories (default: all)",
            metavar="a,b",
            type="category_list",
        ),
        recipe="categories",
        airflow="one DAG per category",
        config="categories",
        option="prompts.categories",
    ),
    Setting(
        "limit",
        None,
        "every prompt; a limit is for trying a run small",
        cli="--limit",
        flag=Flag(
            SOURCES,
            help="at most N prompts per category, sampled deterministically (default: no limit)",
            metavar="N",
            type="positive_int",
        ),
        form="limit",
        param=FormParam(
            "integer",
            "Prompt limit",
            "At most this many {category} prompts, chosen deterministically. Empty: every prompt.",
            FORM_SAMPLING,
        ),
        config="limit",
        option="prompts.limit",
        only="the recipe caps with max_prompts",
        bounds=Bounds(1),
    ),
    Setting(
        "seed",
        0,
        "a fixed seed, so caps select the same prompts on every rerun",
        cli="--seed",
        flag=Flag(
            SOURCES,
            help="seed of the sampling under caps and --limit (default: the recipe's, else 0)",
            metavar="N",
            type="int",
        ),
        recipe="seed",
        config="seed",
        option="prompts.seed",
        only=_RECIPE_FOR_AIRFLOW,
    ),
    Setting(
        "max_reject_rate",
        0.05,
        "a few bad records are normal; more means a wrong source or format",
        cli="--max-reject-rate",
        flag=Flag(
            SOURCES,
            help="fail when more than this fraction of records is rejected (default: the recipe's, else 0.05)",
            metavar="R",
            type="fraction",
        ),
        recipe="max_reject_rate",
        config="max_reject_rate",
        option="prompts.max_reject_rate",
        only=_RECIPE_FOR_AIRFLOW,
        bounds=Bounds(0, 1),
    ),
    Setting(
        "benchmarks",
        [],
        "decontamination is opt-in: which benchmarks matter depends on the drafter",
        cli="--benchmark",
        flag=Flag(
            SOURCES,
            help=(
                "reject prompts whose user text shares a long n-gram with an item of this benchmark set (a file, "
                "folder or dataset of prompts; SPEED-Bench, MT-Bench, BFCL, GSM8K, MATH-500, C-Eval, AIME and "
                "HumanEval files are read in their published formats), or equals one, as benchmark_overlap; "
                "repeatable; 'humaneval' alone is the shipped HumanEval set (beside the recipe's "
                "decontamination.benchmarks)"
            ),
            metavar="NAME=PATH",
            repeat=True,
        ),
        recipe="decontamination.benchmarks",
        config="benchmarks",
        option="prompts.benchmarks",
        only=_RECIPE_FOR_AIRFLOW,
    ),
    Setting(
        "benchmark_ngram",
        13,
        "13 words: the n-gram length of the usual contamination studies",
        cli="--benchmark-ngram",
        flag=Flag(
            SOURCES,
            help="words per n-gram of the benchmark overlap check (default: the recipe's, else 13)",
            metavar="N",
            type="positive_int",
        ),
        recipe="decontamination.ngram",
        config="benchmark_ngram",
        option="prompts.benchmark_ngram",
        only=_RECIPE_FOR_AIRFLOW,
        bounds=Bounds(4, 64),
    ),
    Setting(
        "benchmark_dir",
        None,
        "relative benchmark paths are the recipe's own: beside the recipe file",
        cli="--benchmark-dir",
        flag=Flag(
            SOURCES,
            help=(
                "the folder that holds the benchmark files of the recipe's decontamination.benchmarks: their relative "
                "paths are read under it, not beside the recipe (docs/internals/prompt-sources.md, \"Benchmark files\")"
            ),
            metavar="DIR",
        ),
        airflow="env:EAGLE_DATAGEN_BENCHMARK_DIR",
        config="benchmark_dir",
        option="prompts.benchmark_dir",
        only="a fact of the machine (where its benchmark files are), not of the prompt set: no recipe key",
    ),
    Setting(
        "near_duplicate_threshold",
        None,
        "off; 0.7 when on: one word changed in 36 keeps 0.84",
        cli="--near-duplicate-threshold",
        flag=Flag(
            SOURCES,
            help=(
                "reject prompts whose MinHash similarity to a prompt kept before them is at least T, as "
                "near_duplicate (default: the recipe's near_duplicates, else off; 0.7 is its default threshold)"
            ),
            metavar="T",
            type="probability",
        ),
        recipe="near_duplicates.threshold",
        form="near_duplicate_threshold",
        param=FormParam(
            "number",
            "Near-duplicate threshold",
            (
                "Leave out prompts whose MinHash similarity to a prompt kept before them (in this "
                "category) is at least this. Empty: off. Default: the recipe's near_duplicates."
            ),
            FORM_SAMPLING,
            nullable=True,
        ),
        config="near_duplicate_threshold",
        option="prompts.near_duplicate_threshold",
        bounds=Bounds(0, 1, above=True),
    ),
    Setting(
        "near_duplicate_shingle_words",
        3,
        "3-word shingles: word order matters, rewording does not hide",
        recipe="near_duplicates.shingle_words",
        only="a tuning of the filter, kept with the prompt set",
        bounds=Bounds(1, 16),
    ),
    Setting(
        "near_duplicate_num_perm",
        128,
        "128 permutations: about 0.09 error on the similarity estimate",
        recipe="near_duplicates.num_perm",
        only="a tuning of the filter, kept with the prompt set",
        bounds=Bounds(16, 1024),
    ),
    Setting(
        "max_record_bytes",
        MAX_RECORD_BYTES,
        "1 MB of prompt JSON is far above any real prompt",
        cli="--max-record-bytes",
        flag=Flag(
            SOURCES,
            help="reject records whose prompt JSON is larger than N bytes (default: {default})",
            metavar="N",
            type="positive_int",
        ),
        config="max_record_bytes",
        option="prompts.max_record_bytes",
        only="a reader's safety limit, for the rare source with huge records",
        bounds=Bounds(1),
    ),
    # --- model and tokenizer
    Setting(
        "tokenizer",
        None,
        "no default: it must be the served model's",
        cli="--tokenizer",
        flag=Flag(
            MODEL,
            help="tokenizer directory or hub id of the target model, or standin:kimi-k2.5",
            metavar="TOK",
            required=True,
        ),
        airflow="extra:tokenizer",
        config="tokenizer",
        option="prompts.tokenizer",
        required=True,
        only=_DEPLOYMENT,
    ),
    Setting(
        "profile",
        PROFILE,
        "Kimi-K2.5 is the first target",
        cli="--profile",
        flag=Flag(
            MODEL,
            help="model profile: a shipped name (kimi-k2.5, qwen3, deepseek-r1) or a YAML file (default: {default})",
            metavar="NAME|FILE",
        ),
        airflow="extra:profile",
        config="profile",
        option="prompts.profile",
        only=_DEPLOYMENT,
    ),
    Setting(
        "trust_remote_code",
        False,
        "never on by default: tokenizer code runs with the worker's rights",
        cli="--trust-remote-code",
        flag=Flag(
            MODEL,
            help=(
                "allow the tokenizer to run its own Python code (needed by the real Kimi tokenizer; only for sources "
                "you trust)"
            ),
        ),
        airflow="extra:trust_remote_code",
        config="trust_remote_code",
        option="prompts.trust_remote_code",
        only=_DEPLOYMENT,
    ),
    Setting(
        "tiktoken_fast_path",
        False,
        "ids come from the tokenizer's own code, as SGLang calls it; a faster path checked on sample texts cannot "
        "prove that it gives the same ids for every text (tokenization/tiktoken_path.py)",
        cli="--tiktoken-fast-path",
        flag=Flag(
            MODEL,
            help=(
                "opt in to encoding prompts through the tokenizer's tiktoken.Encoding directly (about 3x faster per "
                "process) instead of its own call; used only where proven on sample texts at load, recorded in the "
                "manifest, and a rerun with the other path is refused. Not exact by construction: the tokenizer's "
                "own code may differ from plain tiktoken on texts no sample holds"
            ),
        ),
        airflow="extra:tiktoken_fast_path",
        config="tiktoken_fast_path",
        option="prompts.tiktoken_fast_path",
        only=_DEPLOYMENT,
    ),
    Setting(
        "allow_special_token_text",
        False,
        "special-token text in a record forges turn boundaries",
        cli="--allow-special-token-text",
        flag=Flag(
            MODEL,
            help=(
                "keep records whose text (a user typing <|im_end|> or <think>) would become special tokens the chat "
                "template did not place; by default they are rejected as special_token_text (default: the recipe's, "
                "else off)"
            ),
        ),
        recipe="allow_special_token_text",
        config="allow_special_token_text",
        option="prompts.allow_special_token_text",
        only="an opt-in for a reviewed prompt set: " + _RECIPE_FOR_AIRFLOW,
    ),
    Setting(
        "max_prompt_tokens",
        32768,
        "longer prompts are rare and leave little room for the answer",
        cli="--max-prompt-tokens",
        flag=Flag(
            MODEL,
            help="reject prompts longer than N tokens (default: the recipe's, else 32768)",
            metavar="N",
            type="positive_int",
        ),
        recipe="defaults.max_prompt_tokens",
        config="max_prompt_tokens",
        option="prompts.max_prompt_tokens",
        only=_RECIPE_FOR_AIRFLOW,
        bounds=Bounds(1),
    ),
    # --- SGLang
    Setting(
        "sglang_urls",
        [],
        "no default: the servers are the deployment's",
        cli="--sglang-url",
        flag=Flag(
            SGLANG,
            help="base URL of an SGLang server or router (http://host:30000); repeat for replicas",
            metavar="URL",
            repeat=True,
            required=True,
        ),
        airflow="extra:urls",
        config="sglang_urls",
        option="sglang_urls",
        required=True,
        only=_DEPLOYMENT,
    ),
    Setting(
        "api_key_file",
        None,
        "$EAGLE_DATAGEN_API_KEY when set, else no key; a key is never a flag's value (ps and shell history show those)",
        cli="--api-key-file",
        flag=Flag(
            SGLANG,
            help=(
                "a file holding the API key of the SGLang deployment (its --api-key, or the router's client key), "
                "sent as 'Authorization: Bearer' on every request (default: $EAGLE_DATAGEN_API_KEY when set)"
            ),
            metavar="FILE",
        ),
        airflow="the SGLang connection's password",
        config="api_key_file",
        option="api_key_file",
        only=_DEPLOYMENT + "; Airflow takes the key itself from the connection's password",
    ),
    Setting(
        "ca_bundle",
        None,
        "the system's CA certificates check an https endpoint",
        cli="--ca-bundle",
        flag=Flag(
            SGLANG,
            help="a PEM file of the CA certificates that check https:// endpoints (default: the system's)",
            metavar="FILE",
        ),
        airflow="extra:ca_bundle",
        config="ca_bundle",
        option="ca_bundle",
        only=_DEPLOYMENT,
    ),
    Setting(
        "model",
        None,
        "the profile's model",
        cli="--model",
        flag=Flag(
            SGLANG,
            help="the model the servers must serve (default: the profile's, e.g. moonshotai/Kimi-K2.5)",
            metavar="NAME",
        ),
        airflow="extra:model",
        config="model",
        option="model",
        only=_DEPLOYMENT,
    ),
    Setting(
        "allow_model_mismatch",
        False,
        "data from another model than intended is worse than no data",
        cli="--allow-model-mismatch",
        flag=Flag(
            SGLANG,
            help="go on when /get_model_info reports another model than --model",
        ),
        config="allow_model_mismatch",
        option="allow_model_mismatch",
        only="a hand override for a renamed model; a scheduled run never has it",
    ),
    Setting(
        "allow_unchecked_tokenizer",
        False,
        "ids no server has confirmed may be another tokenizer's; only for endpoints whose /v1/tokenize cannot be asked",
        cli="--allow-unchecked-tokenizer",
        flag=Flag(
            SGLANG,
            help=(
                "use an endpoint whose /v1/tokenize cannot be asked (no route, not JSON) without checking its "
                "tokenizer against the client's; the manifest records it unchecked"
            ),
        ),
        airflow="extra:allow_unchecked_tokenizer",
        config="allow_unchecked_tokenizer",
        option="allow_unchecked_tokenizer",
        only=_DEPLOYMENT,
    ),
    Setting(
        "concurrency",
        None,
        "1.25 x the slots behind the URL (every worker's, behind a router) keeps every slot busy",
        cli="--concurrency",
        flag=Flag(
            SGLANG,
            help=(
                "requests in flight per endpoint (default: 1.25 x the slots behind it: the server's "
                "max_running_requests, summed over a router's workers)"
            ),
            metavar="N",
            type="positive_int",
        ),
        airflow="extra:concurrency",
        config="concurrency",
        option="concurrency",
        only=_DEPLOYMENT,
        bounds=Bounds(1),
    ),
    Setting(
        "replicas_behind_url",
        None,
        "found per URL: a router's workers from its GET /workers (smg), else one server",
        cli="--replicas-behind-url",
        flag=Flag(
            SGLANG,
            help=(
                "replicas behind each --sglang-url, for a router or proxy that does not list its workers: the "
                "window is 1.25 x this many times the slots one answer reports (default: the router's GET /workers, "
                "else 1)"
            ),
            metavar="N",
            type="positive_int",
        ),
        airflow="extra:replicas_behind_url",
        config="replicas_behind_url",
        option="replicas_behind_url",
        only=_DEPLOYMENT,
        bounds=Bounds(1),
    ),
    Setting(
        "balance",
        BALANCE,
        "a prompt's samples and prompts sharing leading ids on one replica, so its prefix cache serves them",
        cli="--balance",
        flag=Flag(
            SGLANG,
            help=(
                "how requests are spread over several --sglang-url replicas: prefix-affinity sends a prompt's "
                "samples and prompts sharing leading ids to one replica (bounded load), so its prefix cache serves "
                "them; least-outstanding ignores the prompt (default: prefix-affinity; one URL, such as a router: no "
                "effect)"
            ),
            choices="eagle_datagen.inference.affinity:BALANCE_POLICIES",
        ),
        airflow="extra:balance",
        config="balance",
        option="balance",
        only=_DEPLOYMENT,
    ),
    Setting(
        "max_attempts",
        MAX_ATTEMPTS,
        "8 attempts with backoff ride out a replica restart",
        cli="--max-attempts",
        flag=Flag(
            SGLANG,
            help=(
                "attempts per sample for transient failures (503, 429, 408, 5xx, aborts, disconnects, timeouts) "
                "before it is left for a rerun (default: {default})"
            ),
            metavar="N",
            type="positive_int",
        ),
        config="max_attempts",
        option="retry.max_attempts",
        only="Airflow keeps the default: its task retries resend what is left",
        bounds=Bounds(1),
    ),
    Setting(
        "request_timeout",
        REQUEST_TIMEOUT_S,
        "an hour: a 32k-token reasoning sample can take many minutes",
        cli="--request-timeout",
        flag=Flag(
            SGLANG,
            help="seconds one /generate request may take (default: {default})",
            metavar="S",
            type="positive_float",
        ),
        config="request_timeout_s",
        option="retry.request_timeout_s",
        only="a hand tuning for one deployment; Airflow keeps the default",
        bounds=Bounds(0, above=True),
    ),
    Setting(
        "lost_after",
        LOST_AFTER_S,
        "2 minutes of a server counting fewer requests than the run has there: polls 5 s apart agree by then, "
        "and a lost request costs minutes, not the hour of the request timeout",
        cli="--lost-after",
        flag=Flag(
            SGLANG,
            help=(
                "when a server counts fewer requests (its /v1/loads) than the run has there for S seconds, the "
                "difference is lost: the oldest are sent again elsewhere, the first answer kept (default: {default})"
            ),
            metavar="S",
            type="positive_float",
        ),
        airflow="extra:lost_after",
        config="lost_after_s",
        option="liveness.lost_after_s",
        only=_DEPLOYMENT,
        bounds=Bounds(0, above=True),
    ),
    Setting(
        "drain_hedge",
        True,
        "at a run's end the replicas that fell idle cost the same whether they work or not: a copy of the run's "
        "slowest requests there can only shorten the wait for them",
        cli="--no-drain-hedge",
        flag=Flag(
            SGLANG,
            help=(
                "once the run has handed out its last request, do not copy its slowest requests in flight (over 2x "
                "the run's median answer time) to replicas that fell idle (inference/liveness.py)"
            ),
        ),
        airflow="extra:drain_hedge",
        config="drain_hedge",
        option="liveness.drain_hedge",
        only=_DEPLOYMENT,
    ),
    Setting(
        "give_up_after",
        GIVE_UP_AFTER_S,
        "10 minutes of every endpoint failing is an outage, not a blip",
        cli="--give-up-after",
        flag=Flag(
            SGLANG,
            help=(
                "when every endpoint has been failing for S seconds, stop and leave the remaining samples for a "
                "rerun (default: {default})"
            ),
            metavar="S",
            type="positive_float",
        ),
        config="give_up_after_s",
        option="breaker.give_up_after_s",
        only="Airflow keeps the default: a failed task is retried by Airflow",
        bounds=Bounds(0, above=True),
    ),
    Setting(
        "wait_ready",
        WAIT_READY_S,
        "30 s covers a server finishing its start; longer belongs to a retry",
        cli="--wait-ready",
        flag=Flag(
            SGLANG,
            help="how long the preflight waits for a server that is still starting (default: {default})",
            metavar="S",
            type="non_negative_float",
        ),
        config="wait_ready_s",
        option="preflight_wait_s",
        only="Airflow keeps the default: the preflight task retries",
        bounds=Bounds(0),
    ),
    Setting(
        "min_endpoints",
        MIN_ENDPOINTS,
        "one healthy replica can do the work: a broken one is left out with a warning, not a failed night",
        cli="--min-endpoints",
        flag=Flag(
            SGLANG,
            help=(
                "endpoints that must pass preflight, a number or a share of those given (50%%); one that fails "
                "(unreachable, wrong model, a reasoning parser, the echo bug, watermarking) is left out with a "
                "warning, and the run stops only when fewer pass (default: the recipe's min_endpoints, else "
                "{default})"
            ),
            metavar="N|P%",
            type="endpoint_minimum",
        ),
        recipe="min_endpoints",
        form="min_endpoints",
        param=FormParam(
            ["string", "integer"],
            "Minimum endpoints",
            "SGLang endpoints that must pass preflight: a number (2) or a share of the endpoints (50%, rounded "
            "up); one that fails is left out of the run with a warning, and the run fails only when fewer pass. "
            "Default: the recipe's min_endpoints, else 1.",
            FORM_DEPLOYMENT,
            schema={"pattern": r"^([1-9][0-9]*|([1-9][0-9]?(\.[0-9]+)?|100)%)$", "minimum": 1},
        ),
        config="min_endpoints",
        option="min_endpoints",
    ),
    Setting(
        "canary",
        True,
        "one request proves the deployment before any GPU time is spent",
        cli="--no-canary",
        flag=Flag(
            SGLANG,
            help="skip the canary generation of the preflight (health, model and version are still checked)",
        ),
        config="canary",
        option="canary",
        only="an escape hatch by hand; a scheduled run always checks",
    ),
    # --- sampling
    Setting(
        "max_new_tokens",
        8192,
        "room for long reasoning; the recipe sets it per category",
        cli="--max-new-tokens",
        flag=Flag(
            SAMPLING_FLAGS,
            help="most tokens generated per sample (default: the recipe's, else 8192)",
            metavar="N",
            type="positive_int",
        ),
        recipe="defaults.sampling.max_new_tokens",
        form="max_new_tokens",
        param=FormParam(
            "integer",
            "Max new tokens",
            (
                "Longest output per sample; longer ones are quarantined as finish_length. Default: the "
                "recipe's value. {unset}"
            ),
            FORM_SAMPLING,
        ),
        config="max_new_tokens",
        option="sampling.max_new_tokens",
        bounds=Bounds(1),
    ),
    Setting(
        "temperature",
        1.0,
        "Kimi-K2.5's recommended sampling: the drafter learns the served distribution",
        cli="--temperature",
        flag=Flag(
            SAMPLING_FLAGS,
            help="sampling temperature (default: the recipe's, else the profile's: 1.0 for Kimi)",
            metavar="T",
            type="non_negative_float",
        ),
        recipe="defaults.sampling.temperature",
        form="temperature",
        param=FormParam(
            "number",
            "Temperature",
            "Sampling temperature (0-2). Default: the recipe's value. {unset}",
            FORM_SAMPLING,
        ),
        config="temperature",
        option="sampling.temperature",
        bounds=Bounds(0, 2),
    ),
    Setting(
        "top_p",
        0.95,
        "Kimi-K2.5's recommended sampling",
        cli="--top-p",
        flag=Flag(
            SAMPLING_FLAGS,
            help="nucleus sampling (default: the recipe's, else the profile's: 0.95 for Kimi)",
            metavar="P",
            type="probability",
        ),
        recipe="defaults.sampling.top_p",
        form="top_p",
        param=FormParam(
            "number",
            "Top p",
            "Nucleus sampling (above 0, at most 1). Default: the recipe's value. {unset}",
            FORM_SAMPLING,
        ),
        config="top_p",
        option="sampling.top_p",
        bounds=Bounds(0, 1, above=True),
    ),
    Setting(
        "top_k",
        None,
        "off, as Kimi-K2.5 is served",
        cli="--top-k",
        flag=Flag(
            SAMPLING_FLAGS,
            help="top-k sampling, -1 for off (default: off)",
            metavar="K",
            type="top_k",
        ),
        recipe="defaults.sampling.top_k",
        config="top_k",
        option="sampling.top_k",
        only=_RECIPE_FOR_AIRFLOW,
    ),
    Setting(
        "min_p",
        None,
        "off, as Kimi-K2.5 is served",
        recipe="defaults.sampling.min_p",
        only="rarely changed: the recipe's, for every front end",
        bounds=Bounds(0, 1),
    ),
    Setting(
        "samples_per_prompt",
        1,
        "one sample per prompt; more for a small prompt set",
        cli="--samples-per-prompt",
        flag=Flag(
            SAMPLING_FLAGS,
            help="samples per prompt, each with its own seed (default: the recipe's, else 1)",
            metavar="K",
            type="positive_int",
        ),
        recipe="defaults.samples_per_prompt",
        form="samples_per_prompt",
        param=FormParam(
            "integer",
            "Samples per prompt",
            "Generations per prompt, each with its own sampling seed (1-64).",
            FORM_SAMPLING,
        ),
        config="samples_per_prompt",
        option="sampling.samples_per_prompt",
        bounds=Bounds(1, 64),
    ),
    Setting(
        "turns",
        "last",
        "one sample per record: the answer to its last message",
        cli="--turns",
        flag=Flag(
            SAMPLING_FLAGS,
            help=(
                "last: one sample per record (the last answer); each: one sample per assistant turn, generated "
                "on-policy with tool loops continued from recorded results (default: the recipe's, else last; "
                "docs/internals/multi-turn.md)"
            ),
            choices="eagle_datagen.conversation:TURNS",
        ),
        recipe="defaults.turns",
        form="turns",
        param=FormParam(
            "string",
            "Turns",
            (
                "last: one sample per record (its last answer). each: one sample per assistant turn, "
                "generated on-policy, tool loops continued with the recorded tool results "
                "(docs/internals/multi-turn.md)."
            ),
            FORM_SAMPLING,
        ),
        config="turns",
        option="sampling.turns",
    ),
    Setting(
        "top_logprobs",
        0,
        "off: today's EAGLE-3 trainers learn from the ids alone, and soft targets cost 3-5 bytes per output token "
        "per k in the shards (72 at k=20, against 1.9 for the ids; docs/internals/benchmarks.md)",
        cli="--top-logprobs",
        flag=Flag(
            SAMPLING_FLAGS,
            help=(
                "store the top-K logprobs of every output token beside output_ids (soft targets: the "
                "top_logprob_ids, top_logprobs and output_logprobs columns; docs/internals/training.md); "
                "0: off (default: the "
                "recipe's, else 0)"
            ),
            metavar="K",
            type="int",
        ),
        recipe="defaults.top_logprobs",
        form="top_logprobs",
        param=FormParam(
            "integer",
            "Top-k logprobs",
            (
                "Store the top-k logprobs of every output token beside its ids (soft targets for trainers that "
                "distil); 0: off. Default: the recipe's value."
            ),
            FORM_SAMPLING,
        ),
        config="top_logprobs",
        option="sampling.top_logprobs",
        bounds=Bounds(0, 128),
    ),
    Setting(
        "mode",
        "thinking",
        "what the pipeline generated before modes existed; a drafter that serves instant traffic needs instant or mix",
        cli="--mode",
        flag=Flag(
            SAMPLING_FLAGS,
            help=(
                "thinking: the model reasons before it answers; instant: the chat template turns thinking off "
                "(Kimi-K2.5's thinking=False: the prompt ends in <think></think>) and the answer has no reasoning; "
                "mix: a share (--instant-fraction) of the prompts instant, chosen per prompt by a seeded hash; each "
                "mode samples with the profile's recommendation for it (default: the recipe's, else thinking; "
                'docs/internals/generation.md "Modes")'
            ),
            choices="eagle_datagen.modes:MODES",
        ),
        recipe="defaults.mode",
        form="mode",
        param=FormParam(
            "string",
            "Mode",
            (
                "thinking: the model reasons first. instant: the chat template turns thinking off (the prompt ends "
                "in an empty think block) and the answer has no reasoning. mix: a share of the prompts instant "
                "(Instant fraction), chosen per prompt. Each mode samples with the model's recommendation for it."
            ),
            FORM_SAMPLING,
        ),
        config="mode",
        option="sampling.mode",
    ),
    Setting(
        "instant_fraction",
        0.5,
        "half and half, when a mix names no share",
        cli="--instant-fraction",
        flag=Flag(
            SAMPLING_FLAGS,
            help=(
                "with --mode mix (or a recipe category's mode: mix): the share of prompts generated instant, the "
                "same prompts on every rerun (default: the recipe's, else 0.5)"
            ),
            metavar="F",
            type="fraction",
        ),
        recipe="defaults.instant_fraction",
        form="instant_fraction",
        param=FormParam(
            "number",
            "Instant fraction",
            "With mode mix: the share of {category} prompts generated instant (0-1), the same prompts on every rerun.",
            FORM_SAMPLING,
        ),
        config="instant_fraction",
        option="sampling.instant_fraction",
        bounds=Bounds(0, 1),
    ),
    Setting(
        "max_tool_steps",
        8,
        "8 tool calls in a row: longer loops are rare and mostly stuck",
        recipe="defaults.max_tool_steps",
        only="a property of the prompt set's agentic conversations",
        bounds=Bounds(0, 256),
    ),
    # --- output, shards and resume
    Setting(
        "output",
        None,
        "no default on the command line; the form's is the recipe's airflow.output, else EAGLE_DATAGEN_OUTPUT "
        "(with several recipes in one Airflow: EAGLE_DATAGEN_OUTPUT/<airflow.name>)",
        cli="--output",
        flag=Flag(
            OUTPUT,
            help="output root: a local folder or s3://bucket/prefix",
            metavar="ROOT",
            required=True,
        ),
        form="output",
        param=FormParam(
            "string",
            "Output root",
            "s3://bucket/prefix or an absolute folder; runs, manifests and releases go under it.",
            FORM_DEPLOYMENT,
            schema={"pattern": OUTPUT_PATTERN},
        ),
        recipe="airflow.output",
        config="output",
        option="prompts.output",
        required=True,
        only="the recipe's airflow.output is read by the DAGs only (the default of their form)",
    ),
    Setting(
        "run_id",
        None,
        "a new UTC timestamp id; reused to resume",
        cli="--run-id",
        flag=Flag(
            OUTPUT,
            help="name of the run (default: a new UTC timestamp id); reuse it to resume a run",
            metavar="ID",
        ),
        airflow="from the DAG run id (runs.run_id_for)",
        config="run_id",
        option="run_id",
        required=True,
        only="a name of one run",
    ),
    Setting(
        "incremental",
        False,
        "a run by hand generates what it is told; the nightly DAG is incremental",
        cli="--incremental",
        flag=Flag(
            OUTPUT,
            help=(
                "generate only samples that no run under ROOT has yet (same prompt, sample index, model and "
                "sampling): the nightly refresh"
            ),
        ),
        form="force_regenerate",
        param=FormParam(
            "boolean",
            "Force regenerate",
            "Generate every sample again, also those a published run already has (not incremental).",
            FORM_RUN,
            default=False,
        ),
        config="incremental",
        option="incremental",
        only="one run's choice (the form's force_regenerate is its inverse)",
    ),
    Setting(
        "per_weight_version",
        False,
        "by hand: samples of any weights count",
        cli="--per-weight-version",
        flag=Flag(
            OUTPUT,
            help="with --incremental: samples made with other weights do not count, so new weights regenerate",
        ),
        airflow="always on: new weights make every sample new",
        config="per_weight_version",
        option="per_weight_version",
        only="one run's choice",
    ),
    Setting(
        "heldout_fraction",
        0.02,
        "2%: a category of ~20k prompts holds out ~400, which bound its mean accept length within about +-0.05 "
        "(docs/internals/evaluation.md)",
        cli="--heldout-fraction",
        flag=Flag(
            OUTPUT,
            help=(
                "share of prompts held out of every export, chosen by a stable hash of the prompt, for `eagle-datagen "
                "evaluate` (default: the output root's frozen fraction, else 0.02 for its first run); another "
                "fraction than the root's is refused"
            ),
            metavar="F",
            type="fraction",
            unset=True,
        ),
        form="heldout_fraction",
        param=FormParam(
            "number",
            "Held-out fraction",
            (
                "Share of prompts held out of every export for evaluation (a stable hash of the prompt). Empty: the "
                "output root's frozen fraction, else 0.02. Another fraction than the root's is refused."
            ),
            FORM_RUN,
            nullable=True,
        ),
        config="heldout_fraction",
        option="heldout_fraction",
        only="a policy of the output root, frozen by its first run, not of a prompt set: no recipe key",
        bounds=Bounds(0, 0.5),
    ),
    Setting(
        "claim_ttl",
        CLAIM_TTL_S,
        "an hour outlasts a live run's quiet spells; a longer silence is a death",
        cli="--claim-ttl",
        flag=Flag(
            OUTPUT,
            help=(
                "with --incremental: the samples planned by another run under ROOT that has not published yet count "
                "as existing while that run wrote something in the last S seconds (default: 3600, longer than a live "
                "run stays silent); an older run's samples are generated again"
            ),
            metavar="S",
            type="positive_float",
            unset=True,
        ),
        airflow="env:EAGLE_DATAGEN_CLAIM_TTL",
        config="claim_ttl_s",
        option="claim_ttl_s",
        only="a fact of the deployment's pool waits",
        bounds=Bounds(0, above=True),
    ),
    Setting(
        "shard_size",
        SHARD_SIZE,
        "1000 prompts: minutes of work per mapped task, few tasks per run",
        cli="--shard-size",
        flag=Flag(
            OUTPUT,
            help="prompts per shard (default: {default})",
            metavar="N",
            type="positive_int",
        ),
        form="shard_size",
        param=FormParam(
            "integer",
            "Shard size",
            "Prompts per shard; each shard is one mapped task in the sglang pool.",
            FORM_RUN,
        ),
        config="shard_size",
        option="shard_size",
        only="a unit of scheduling, not of the prompt set",
        bounds=Bounds(1),
    ),
    Setting(
        "checkpoint_every",
        CHECKPOINT_EVERY,
        "64 samples: a crash loses little, the store sees few writes",
        cli="--checkpoint-every",
        flag=Flag(
            OUTPUT,
            help="write finished samples to ROOT/checkpoints when N are waiting (default: {default})",
            metavar="N",
            type="positive_int",
        ),
        config="checkpoint_every",
        option="checkpoint.max_samples",
        only="a tuning of the writer; Airflow keeps the default",
        bounds=Bounds(1),
    ),
    Setting(
        "checkpoint_interval",
        CHECKPOINT_INTERVAL_S,
        "2 s: a slow run still checkpoints often",
        cli="--checkpoint-interval",
        flag=Flag(
            OUTPUT,
            help="... or when the oldest has waited S seconds (default: {default})",
            metavar="S",
            type="positive_float",
        ),
        config="checkpoint_interval_s",
        option="checkpoint.max_age_s",
        only="a tuning of the writer; Airflow keeps the default",
        bounds=Bounds(0, above=True),
    ),
    Setting(
        "processes",
        None,
        "one per 1000 prompts, up to the CPUs this process may use (its affinity, its cgroup's CPU quota)",
        cli="--processes",
        flag=Flag(
            OUTPUT,
            help=(
                "worker processes for tokenization, each running the tokenizer's own code (default: one per 1000 "
                "prompts, up to the CPUs this process may use)"
            ),
            metavar="N",
            type="positive_int",
        ),
        config="processes",
        option="prompts.processes",
        only="a property of the machine: an Airflow task sizes it to the CPUs it may use (a pod's limit, pinning)",
        bounds=Bounds(1),
    ),
    # --- validation and publishing
    Setting(
        "draft_vocab_size",
        DRAFT_VOCAB_SIZE,
        "32000: EAGLE-3's draft vocabulary for large targets",
        cli="--draft-vocab-size",
        flag=Flag(
            PUBLISH,
            help=(
                "tokens in the EAGLE-3 draft vocabulary (d2t/t2d) built from the run's trained tokens; fails when "
                "the run has fewer distinct tokens (default: 32000, skipped with a warning for such a run)"
            ),
            metavar="K",
            type="positive_int",
            unset=True,
        ),
        form="draft_vocab_size",
        param=FormParam(
            "integer",
            "Draft vocabulary size",
            "K most frequent trained tokens in the run's draft vocabulary (EAGLE-3 d2t/t2d).",
            FORM_RUN,
        ),
        config="draft_vocab_size",
        option="publish.draft_vocab_size",
        only="a training choice, not of the prompt set",
        bounds=Bounds(1),
    ),
    Setting(
        "max_reasoning_tokens",
        None,
        "no limit: long reasoning is what the drafter must learn",
        cli="--max-reasoning-tokens",
        flag=Flag(
            PUBLISH,
            help="quarantine samples whose reasoning (before </think>) is longer than N tokens (default: no limit)",
            metavar="N",
            type="positive_int",
        ),
        config="max_reasoning_tokens",
        option="publish.limits.max_reasoning_tokens",
        only="not yet in the recipe or the form",
        bounds=Bounds(1),
    ),
    Setting(
        "max_rates",
        {},
        "validation/diagnosis.py's thresholds, tuned per reason",
        cli="--max-rate",
        flag=Flag(
            PUBLISH,
            help=(
                "the highest acceptable share of samples with this reject reason (repeatable, e.g. "
                "prompt_echo=0.05); above it the run stops with its diagnosis, as soon as the answers show it. For a "
                "server fault (prompt_echo, completion_tokens_mismatch, prompt_tokens_mismatch, id_out_of_range) it "
                "is the share of an endpoint's last 50 answers above which the endpoint is taken out (at least 3 of "
                "them). Default: the recipe's max_rates, else validation/diagnosis.py's"
            ),
            metavar="REASON=RATE",
            type="max_rate",
            repeat=True,
        ),
        recipe="max_rates",
        form="max_rates",
        param=FormParam(
            "object",
            "Max rate per reject reason",
            (
                "Highest acceptable share of samples per reject reason (0-1): above it the run stops with "
                "its diagnosis as soon as the answers show it. For a server fault (prompt_echo, "
                "completion_tokens_mismatch, prompt_tokens_mismatch, id_out_of_range) it is the share of an endpoint's "
                "last 50 answers above which the endpoint is taken out of the run (at least 3). Default: the recipe's "
                "max_rates over the built-in values."
            ),
            FORM_RUN,
            schema={"additionalProperties": False},
        ),
        config="max_rates",
        option="max_rates",
    ),
    Setting(
        "draft_vocab_required",
        False,
        "a run whose few distinct tokens cannot fill the default vocabulary is published without one",
        config="draft_vocab_required",
        option="publish.draft_vocab_required",
        only="derived: the command line sets it when --draft-vocab-size is given",
    ),
    Setting(
        "front_end",
        "cli",
        "the command line; Airflow's tasks say airflow",
        config="front_end",
        option=("front_end", "prompts.front_end", "publish.front_end"),
        only="set by the front end itself: messages name a setting as it calls it (settings.named)",
    ),
    # --- Airflow only
    Setting(
        "dry_run",
        False,
        "a triggered run generates",
        form="dry_run",
        param=FormParam("boolean", "Dry run", "Preflight and plan only (writes the plan), generate nothing.", FORM_RUN),
        config="dry_run",
        option="dry_run",
        only="Airflow-only: on the command line `tokenize` is the dry run",
    ),
    Setting(
        "sglang_conn_id",
        "sglang_default",
        "Airflow's naming convention",
        form="sglang_conn_id",
        param=FormParam(
            "string",
            "SGLang connection",
            (
                "Airflow connection of the SGLang deployment: host and port, or extra "
                '{"urls": [...]} for several replicas, and extra "tokenizer".'
            ),
            FORM_DEPLOYMENT,
            schema={"minLength": 1},
        ),
        recipe="airflow.sglang_conn_id",  # the form's default; with several recipes: sglang_<airflow.name>
        only="Airflow-only: the connection that holds the deployment's settings",
    ),
    Setting(
        "aws_conn_id",
        "aws_default",
        "the Amazon provider's default connection",
        form="aws_conn_id",
        param=FormParam(
            "string",
            "AWS connection",
            (
                "Amazon provider connection for the object store (endpoint_url in its extra for "
                "S3-compatible stores). Without it, the worker's AWS environment is used."
            ),
            FORM_DEPLOYMENT,
            schema={"minLength": 1},
        ),
        recipe="airflow.aws_conn_id",  # the form's default
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
        # named training mixes: read by exports (`eagle-datagen export --mix NAME`, the release DAG's
        # export_mixes), not by a run (export/mix.py)
        "mixes",
        "mixes.weights",
        "mixes.modes",
        "mixes.seed",
        # the recipe's DAGs in Airflow (plugins/eagle_datagen_airflow/recipe_set.py): the name in their ids and
        # assets, and the pool of their SGLang tasks; they shape the DAGs, not a run
        "airflow",
        "airflow.name",
        "airflow.pool",
    }
)

# The layers' options that no front end sets (generation.stage.RunOptions' leaves, or whole nested options, that
# no setting's `option` names): tunings kept in the layer that owns them. tests/dags/test_run_settings.py fails on
# a RunOptions leaf that is neither a setting's `option` nor here, so a forgotten mapping cannot pass unnoticed.
OPTION_TUNINGS = frozenset(
    {
        "retry.base_delay_s",  # the backoff's curve (inference/retry.py)
        "retry.max_delay_s",
        "breaker.failures_to_open",  # the breaker's curve (inference/endpoints.py)
        "breaker.open_s",
        "breaker.max_open_s",
        "liveness.poll_s",  # the lost-request monitor's mechanics (inference/liveness.py)
        "liveness.grace_s",
        "liveness.enabled",
        "liveness.failures_to_probe",
        "liveness.probe_failures",
        "liveness.request_timeout_s",
        "liveness.drain_hedge_factor",  # the drain hedge's threshold (inference/liveness.py)
        "liveness.drain_hedge_min_s",
        "content_breaker",  # the sick-endpoint statistics (inference/content_breaker.py)
        "plan_lock",  # the planners' lock timing (generation/plan_lock.py)
        "canary_max_new_tokens",
        "publish.thresholds",  # resolved from max_rates and the recipe (generation.stage.resolve_thresholds)
        "publish.limits.loop_ngram_max",  # the validator's loop and echo checks (validation/rules.py)
        "publish.limits.loop_min_repeats",
        "publish.limits.loop_window",
        "publish.limits.echo_tail",
    }
)


# --- the evaluate command (`eagle-datagen evaluate`, the evaluate DAG): a table of its own
# RUN_SETTINGS is the `run` command's flags one for one (tests/dags/test_run_settings.py), its carrier RunConfig and
# its options RunOptions; `evaluate` is another command with another carrier (evaluation.options.EvaluateConfig) and
# other options (EvaluateOptions). So it declares its own settings here, and takes the run's that mean the same thing
# (the tokenizer, the endpoints, the client's tunings, the sampling and its precedence) as they are declared above:
# the same name, default, why, type and range, only shown in its own --help groups and form.
EVAL_PROMPTS = "prompt set (default: the held-out prompts of --output's published runs)"
EVAL_DEPLOYMENT = "deployment A: the speculative SGLang endpoints"
EVAL_COMPARISON = "deployment B: a paired comparison (--compare-url or --baseline)"
EVAL_RESULTS = "results"
FORM_EVALUATION = "Evaluation"
EVALUATE_FORM_SECTIONS = (FORM_EVALUATION, FORM_SAMPLING, FORM_DEPLOYMENT)
_STRINGS = {"items": {"type": "string", "minLength": 1}}


def _shared(
    name: str, group: str | None = None, help: str | None = None, flag_required: bool | None = None, **changes: Any
) -> Setting:
    """A run setting as `evaluate` takes it: the same declaration, in an evaluate --help group (or another help,
    or a flag `evaluate` does not require); `changes` add its evaluate form param or drop a requirement."""
    entry = next(e for e in RUN_SETTINGS if e.name == name)
    if entry.flag is not None:
        required = entry.flag.required if flag_required is None else flag_required
        flag = dataclasses.replace(
            entry.flag, group=group or entry.flag.group, help=help or entry.flag.help, required=required
        )
        changes = {"flag": flag} | changes
    return dataclasses.replace(entry, **changes)


EVALUATE_OWN: tuple[Setting, ...] = (
    Setting(
        "eval_runs",
        [],
        "every published run of the output root",
        cli="--run-id",
        flag=Flag(
            EVAL_PROMPTS,
            help="with --output: only the held-out prompts of these published runs (repeatable; default: every one)",
            metavar="ID",
            repeat=True,
        ),
        form="run_ids",
        param=FormParam(
            "array",
            "Runs",
            "Only the held-out prompts of these published runs. Empty: every published run of the output root.",
            FORM_EVALUATION,
            schema=_STRINGS,
        ),
        config="runs",
        option="runs",
    ),
    Setting(
        "max_prompts_per_category",
        None,
        "every held-out prompt: ~400 per category at the default held-out fraction",
        cli="--max-prompts-per-category",
        flag=Flag(
            EVAL_PROMPTS,
            help="at most N prompts per category, chosen by --seed (default: every prompt)",
            metavar="N",
            type="positive_int",
        ),
        form="max_prompts_per_category",
        param=FormParam(
            "integer",
            "Prompts per category",
            "At most this many prompts per category, chosen by the seed. Empty: every prompt.",
            FORM_EVALUATION,
        ),
        config="max_prompts_per_category",
        option="max_prompts_per_category",
        bounds=Bounds(1),
    ),
    Setting(
        "requests_per_prompt",
        1,
        "one: intervals are over prompts, and more requests of a prompt only narrow that prompt's own noise",
        cli="--requests-per-prompt",
        flag=Flag(
            EVAL_PROMPTS,
            help="requests per prompt, each with its own sampling seed; a prompt's value is their mean (default: 1)",
            metavar="K",
            type="positive_int",
        ),
        form="requests_per_prompt",
        param=FormParam(
            "integer",
            "Requests per prompt",
            "Requests per prompt, each with its own seed; a prompt's value is their mean.",
            FORM_EVALUATION,
        ),
        config="requests_per_prompt",
        option="requests_per_prompt",
        bounds=Bounds(1, 64),
    ),
    Setting(
        "eval_seed",
        0,
        "a fixed seed: every evaluation sends the same requests, so two evaluations pair prompt for prompt",
        cli="--seed",
        flag=Flag(
            SAMPLING_FLAGS,
            help="seed of the requests' sampling seeds and of the prompts chosen under --max-prompts-per-category; "
            "the same seed sends the same requests, which --baseline pairs (default: 0)",
            metavar="N",
            type="int",
        ),
        form="seed",
        param=FormParam(
            "integer",
            "Seed",
            "Seed of the requests' sampling seeds (the same seed pairs with a baseline) and of the prompts chosen.",
            FORM_SAMPLING,
        ),
        config="seed",
        option="seed",
        bounds=Bounds(0),
    ),
    Setting(
        "label",
        None,
        "the draft model path deployment A's /server_info reports",
        cli="--label",
        flag=Flag(
            EVAL_DEPLOYMENT, help="name of deployment A in the report (default: its draft model path)", metavar="NAME"
        ),
        form="label",
        param=FormParam(
            "string", "Label", "Name of the deployment in the report. Empty: its draft model path.", FORM_EVALUATION
        ),
        config="label",
        option="label",
    ),
    Setting(
        "compare_urls",
        [],
        "no comparison",
        cli="--compare-url",
        flag=Flag(
            EVAL_COMPARISON,
            help="an endpoint of deployment B (another drafter; repeat for replicas): the same requests go to both, "
            "and the report gives B's results and the paired difference A - B per category",
            metavar="URL",
            repeat=True,
        ),
        form="compare_urls",
        param=FormParam(
            "array",
            "Compare with endpoints",
            "Endpoints of a second speculative deployment (another drafter): the same requests go to both, and "
            "the report gives the paired difference per category.",
            FORM_EVALUATION,
            schema=_STRINGS,
        ),
        config="compare_urls",
        option="compare_urls",
    ),
    Setting(
        "compare_label",
        None,
        "deployment B's draft model path",
        cli="--compare-label",
        flag=Flag(
            EVAL_COMPARISON, help="name of deployment B in the report (default: its draft model path)", metavar="NAME"
        ),
        form="compare_label",
        param=FormParam(
            "string", "Compare label", "Name of the second deployment. Empty: its draft model path.", FORM_EVALUATION
        ),
        config="compare_label",
        option="compare_label",
    ),
    Setting(
        "compare_api_key_file",
        None,
        "$EAGLE_DATAGEN_COMPARE_API_KEY when set, else deployment A's key",
        cli="--compare-api-key-file",
        flag=Flag(
            EVAL_COMPARISON,
            help="a file holding the API key of deployment B (default: $EAGLE_DATAGEN_COMPARE_API_KEY when set, "
            "else deployment A's key)",
            metavar="FILE",
        ),
        airflow="env:EAGLE_DATAGEN_COMPARE_API_KEY",
        config="compare_api_key_file",
        option="compare_api_key_file",
        only="the key itself: Airflow's workers read it from $EAGLE_DATAGEN_COMPARE_API_KEY, else use A's",
    ),
    Setting(
        "baseline",
        None,
        "no comparison",
        cli="--baseline",
        flag=Flag(
            EVAL_COMPARISON,
            help="an earlier evaluation's JSON (a path or s3:// URI; its records file beside it): the paired "
            "difference against its per-prompt values, which needs the same prompts, sampling and --seed",
            metavar="FILE.json",
        ),
        form="baseline",
        param=FormParam(
            "string",
            "Baseline",
            "An earlier evaluation's JSON (under the output root's evaluations/, or an s3:// URI) to compare with, "
            "prompt for prompt. Empty: none.",
            FORM_EVALUATION,
        ),
        config="baseline",
        option="baseline",
    ),
    Setting(
        "to",
        None,
        "with --output: ROOT/evaluations/eval=<eval id>.json",
        cli="--to",
        flag=Flag(
            EVAL_RESULTS,
            help="the results' JSON (a path or s3:// URI; the records and the report beside it; default with "
            "--output: ROOT/evaluations/eval=<eval id>.json)",
            metavar="FILE.json",
        ),
        config="to",
        option="to",
        only="the command line's: the DAG writes under the output root",
    ),
    Setting(
        "eval_id",
        None,
        "a new UTC timestamp id",
        cli="--eval-id",
        flag=Flag(EVAL_RESULTS, help="name of the evaluation (default: a new UTC timestamp id)", metavar="ID"),
        config="eval_id",
        option="eval_id",
        only="Airflow: from the DAG run id",
    ),
    Setting(
        "allow_comparison_mismatch",
        False,
        "two drafters compare only on one target, one set of draft settings and one sampling",
        cli="--allow-comparison-mismatch",
        flag=Flag(
            EVAL_COMPARISON,
            help="compare with a deployment or --baseline measured otherwise (another model, weight version, draft "
            "settings or sampling per category and mode); the results list the differences",
        ),
        form="allow_comparison_mismatch",
        param=FormParam(
            "boolean",
            "Allow comparison mismatch",
            "Compare even when the other deployment or the baseline was measured with another model, weight "
            "version, draft settings or sampling; the results list the differences.",
            FORM_EVALUATION,
        ),
        config="allow_comparison_mismatch",
        option="allow_comparison_mismatch",
    ),
)

EVALUATE_SETTINGS: tuple[Setting, ...] = (
    _shared(
        "output",
        EVAL_PROMPTS,
        help="output root (a folder or s3://bucket/prefix): the held-out prompts of its published runs, unless "
        "--prompts; the results go to its evaluations/",
        flag_required=False,
        required=False,
    ),
    _shared(
        "prompts",
        EVAL_PROMPTS,
        help="prompt records to evaluate on instead (data contract v1, each with its category); repeatable",
    ),
    *EVALUATE_OWN[:3],
    _shared(
        "categories",
        EVAL_PROMPTS,
        form="categories",
        param=FormParam(
            "array",
            "Categories",
            "Only these categories (one task each). Empty: every category with held-out prompts.",
            FORM_EVALUATION,
            schema=_STRINGS,
        ),
    ),
    _shared("max_reject_rate", EVAL_PROMPTS),
    _shared(
        "recipe",
        EVAL_PROMPTS,
        help="recipe whose per-category sampling applies, with generation's precedence (its sources are not read)",
    ),
    _shared("tokenizer"),
    _shared("profile"),
    _shared("trust_remote_code"),
    _shared(
        "sglang_urls",
        EVAL_DEPLOYMENT,
        help="base URL of a speculative SGLang server or router of deployment A; repeat for replicas",
        form="sglang_urls",
        param=FormParam(
            "array",
            "Speculative endpoints",
            "Endpoints of the speculative deployment to evaluate (SGLang with --speculative-algorithm). Empty: the "
            "SGLang connection's.",
            FORM_EVALUATION,
            schema=_STRINGS,
        ),
        required=False,
    ),
    EVALUATE_OWN[4],
    _shared(
        "api_key_file",
        EVAL_DEPLOYMENT,
        help="a file holding the API key of deployment A, sent as 'Authorization: Bearer' on every request "
        "(default: $EAGLE_DATAGEN_API_KEY when set)",
    ),
    _shared("ca_bundle", EVAL_DEPLOYMENT),
    _shared("model", EVAL_DEPLOYMENT),
    _shared("concurrency", EVAL_DEPLOYMENT),
    _shared("replicas_behind_url", EVAL_DEPLOYMENT),
    _shared(
        "max_attempts",
        EVAL_DEPLOYMENT,
        help="attempts per request for transient failures (503, 429, 408, 5xx, aborts, disconnects, timeouts, lost "
        "requests) before it counts as failed (default: {default})",
    ),
    _shared("request_timeout", EVAL_DEPLOYMENT),
    _shared("lost_after", EVAL_DEPLOYMENT),
    _shared(
        "give_up_after",
        EVAL_DEPLOYMENT,
        help="when every endpoint has been failing for S seconds, count the requests left as failed (default: "
        "{default})",
    ),
    _shared("wait_ready", EVAL_DEPLOYMENT),
    _shared("allow_unchecked_tokenizer", EVAL_DEPLOYMENT),
    *EVALUATE_OWN[5:8],
    _shared("max_new_tokens"),
    _shared("temperature"),
    _shared("top_p"),
    _shared("top_k"),
    _shared(
        "mode",
        help="with --prompts: the mode each prompt is rendered and sampled in (thinking, instant, or mix with "
        "--instant-fraction, chosen per prompt by --seed); held-out prompts keep the mode they were generated in "
        "(default: the recipe's, else thinking)",
        form=None,
        param=None,
        airflow=None,
        only="the command line's --prompts: the DAG evaluates held-out prompts, which keep their own mode",
    ),
    _shared(
        "instant_fraction",
        help="with --mode mix: the share of --prompts prompts rendered instant (default: the recipe's, else 0.5)",
        form=None,
        param=None,
        airflow=None,
        only="the command line's --prompts: the DAG evaluates held-out prompts, which keep their own mode",
    ),
    EVALUATE_OWN[3],
    *EVALUATE_OWN[8:],
    _shared("front_end", option=("front_end", "prompts.front_end")),
    _shared("sglang_conn_id"),
    _shared("aws_conn_id"),
)


def setting(name: str) -> Setting:
    """A setting by name: the run's, else the evaluate command's own (EVALUATE_SETTINGS)."""
    for entry in (*RUN_SETTINGS, *EVALUATE_OWN):
        if entry.name == name:
            return entry
    raise KeyError(name)


def default_of(name: str) -> Any:
    return setting(name).default


def bounds_of(name: str) -> dict[str, float]:
    """The recipe's pydantic Field keywords for a setting's declared range (ge/gt, le)."""
    entry = setting(name)
    return entry.bounds.field() if entry.bounds else {}


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


def resolve(name: str, *, given: Any = None, category: Any = None, defaults: Any = None, profile: Any = None) -> Any:
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
    if front_end in ("recipe", "airflow") and entry.recipe:  # an Airflow run takes the rest from the recipe
        return f"the recipe's {entry.recipe}"
    return name


def new_run_hint(front_end: str) -> str:
    """How the user of this front end starts a run of its own (another run id) instead of continuing one."""
    return "trigger a new DAG run" if front_end == "airflow" else "start a new --run-id"


def resume_hint(front_end: str, run_id: str | None = None) -> str:
    """How the user of this front end resumes a stopped run from its checkpoints."""
    if front_end == "airflow":
        return "clear the DAG run's failed tasks to resume it"
    return f"rerun with --run-id {run_id}" if run_id else "rerun with the same --run-id"


def offered(name: str, front_end: str) -> bool:
    """Whether the front end lets its user set the setting (a message suggests only what the user can do)."""
    entry = setting(name)
    if front_end == "cli":
        return entry.cli is not None
    if front_end == "airflow":
        return entry.form is not None or (entry.airflow or "").startswith(("extra:", "env:"))
    return front_end == "recipe" and entry.recipe is not None


# --- the configuration reference (docs/configuration.md), generated from the table
REFERENCE_START = "<!-- settings reference: generated by `python -m eagle_datagen.cli.reference`; do not edit -->"
REFERENCE_END = "<!-- end of the settings reference -->"


def _cell(value: Any) -> str:
    text = "" if value is None else (f"`{value}`" if not isinstance(value, str) or value else "")
    return text.replace("|", "\\|")


def reference_table() -> str:
    """Every setting: its built-in default and why, and its name in each front end (markdown)."""
    lines = [
        REFERENCE_START,
        "",
        "| setting | default | range | flag (`run`) | recipe key | Airflow | why the default |",
        "|---|---|---|---|---|---|---|",
    ]
    for entry in RUN_SETTINGS:
        airflow = f"form `{entry.form}`" if entry.form else (entry.airflow or "")
        if airflow.startswith("extra:"):
            airflow = f"connection extra `{airflow.removeprefix('extra:')}`"
        elif airflow.startswith("env:"):
            airflow = f"`{airflow.removeprefix('env:')}`"
        default = "none" if entry.default is None else f"`{entry.default!r}`"
        lines.append(
            f"| {entry.name} | {default} | {entry.bounds.describe() if entry.bounds else ''} | {_cell(entry.cli)} | "
            f"{_cell(entry.recipe)} | {airflow} | "
            f"{entry.why.replace('|', '/')} |"
        )
    precedence = "Precedence, on the command line and in Airflow alike: " + " > ".join(PRECEDENCE) + "."
    lines += ["", precedence, "", REFERENCE_END]
    return "\n".join(lines)


# --- the front ends' values as settings: one map per front end, derived from the table
# (the values go into generation.steps.RunConfig, whose `options()` is the one map to the layers' options)
_FROM_FRONT_END = {  # the few settings whose front-end value is not the setting's value itself
    "canary": lambda no_canary: not no_canary,  # --no-canary
    "drain_hedge": lambda no_drain_hedge: not no_drain_hedge,  # --no-drain-hedge
    "prompts_column": dict,  # --prompts-column FIELD=COLUMN pairs
    "max_rates": dict,  # --max-rate REASON=RATE pairs, or the form's object
}


def flag_dest(entry: Setting) -> str:
    """The argparse attribute of the setting's flag."""
    return entry.cli.removeprefix("--").replace("-", "_")


def choices_of(entry: Setting) -> tuple[str, ...] | None:
    """The allowed values of a setting (its flag's choices, the form's enum), imported where they are defined."""
    if not (entry.flag and entry.flag.choices):
        return None
    import importlib

    module, _, name = entry.flag.choices.partition(":")
    return tuple(getattr(importlib.import_module(module), name))


def flag_default(entry: Setting) -> Any:
    """The argparse default of the setting's flag: [] for a repeated flag; None where a lower layer may decide
    (a recipe key, or `Flag.unset`); False for a bool flag (the recipe's None); else the declared default."""
    if entry.flag and entry.flag.repeat:
        return []
    if entry.recipe or (entry.flag and entry.flag.unset):
        return None
    if isinstance(entry.default, bool):
        return False  # a store_true flag, also --no-canary for a setting on by default
    return entry.default


def from_flags(args: dict[str, Any], table: tuple[Setting, ...] | None = None) -> dict[str, Any]:
    """The command line's values as RunConfig fields (or those of another command's `table`'s carrier): every
    declared flag the parsed arguments have; a flag left unset (None) is left out, so that the field's declared
    default (or a later layer) applies."""
    values = {}
    for entry in RUN_SETTINGS if table is None else table:
        if not (entry.cli and entry.config) or flag_dest(entry) not in args:
            continue
        value = args[flag_dest(entry)]
        if value is not None:
            values[entry.config] = _FROM_FRONT_END.get(entry.name, lambda v: v)(value)
    return values


def from_form(params: dict[str, Any], table: tuple[Setting, ...] | None = None) -> dict[str, Any]:
    """The Airflow form's params as RunConfig fields (None: the param left empty, a later layer applies)."""
    values = {}
    for entry in RUN_SETTINGS if table is None else table:
        if not (entry.form and entry.config) or entry.form not in params:
            continue
        value = params[entry.form]
        if entry.name == "incremental":  # the form asks the inverse: force_regenerate
            value = not value
        if value is not None:
            values[entry.config] = _FROM_FRONT_END.get(entry.name, lambda v: v)(value)
    return values


def from_connection(extra: dict[str, Any], table: tuple[Setting, ...] | None = None) -> dict[str, Any]:
    """The SGLang connection's extra (as deployment.Deployment reads it) as RunConfig fields."""
    values = {}
    for entry in RUN_SETTINGS if table is None else table:
        key = (entry.airflow or "").removeprefix("extra:")
        if entry.airflow and entry.airflow.startswith("extra:") and entry.config and extra.get(key) is not None:
            values[entry.config] = extra[key]
    return values


# --- the steps' carrier (generation.steps.RunConfig) and the layers' options, derived from the table


def config_default(entry: Setting) -> Any:
    """The RunConfig field's default: None where a lower layer may decide (a recipe key: the recipe's value, else
    the declared default, is resolved when the recipe is read), a fresh copy for a list or a dict, else the
    declared default. A `required` setting has none (dataclasses.MISSING)."""
    if entry.required:
        return dataclasses.MISSING
    if isinstance(entry.default, list | dict):
        return copy.copy(entry.default)
    if entry.recipe:
        return None
    return entry.default


def config_fields(table: tuple[Setting, ...] | None = None) -> list[tuple[str, Any, Any]]:
    """RunConfig's fields (or another command's carrier's, from its `table`), one per setting with `config`, for
    dataclasses.make_dataclass."""
    fields = []
    for entry in RUN_SETTINGS if table is None else table:
        if entry.config:
            default = config_default(entry)
            if isinstance(default, list | dict):
                made = dataclasses.field(default_factory=functools.partial(copy.copy, default))
            else:
                made = dataclasses.field() if default is dataclasses.MISSING else dataclasses.field(default=default)
            fields.append((entry.config, Any, made))
    return fields


def option_paths(entry: Setting) -> tuple[str, ...]:
    if entry.option is None:
        return ()
    return (entry.option,) if isinstance(entry.option, str) else entry.option


def build_options(cls: type, config: Any, table: tuple[Setting, ...] | None = None) -> Any:
    """`cls` (generation.stage.RunOptions) from a RunConfig: each setting's value put where its `option` says, the
    nested options (TokenizeOptions, SamplingOverrides, RetryPolicy, ...) built the same way; every field that no
    setting feeds keeps its default. Lists and dicts are copied, so the options share nothing with the config."""
    values = {}
    for entry in RUN_SETTINGS if table is None else table:
        for path in option_paths(entry):
            values[path] = copy.copy(getattr(config, entry.config))
    return _build(cls, values, "")


def _build(cls: type, values: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        path = prefix + f.name
        if path in values:
            kwargs[f.name] = values[path]
        elif any(key.startswith(path + ".") for key in values):
            kwargs[f.name] = _build(options_class(hints[f.name]), values, path + ".")
    return cls(**kwargs)


def options_class(hint: Any) -> type:
    """The dataclass of a nested options field (its annotation, None left out of a union)."""
    for candidate in (hint, *typing.get_args(hint)):
        if dataclasses.is_dataclass(candidate):
            return candidate
    raise TypeError(f"{hint!r} is not an options dataclass")


if __name__ == "__main__":
    print(reference_table())
