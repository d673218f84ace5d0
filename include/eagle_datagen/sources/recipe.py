"""Recipes: which sources feed which category, with caps and sampling overrides (YAML, strict).

```yaml
version: 1
name: demo
seed: 20260101            # sampling under a cap is a pure function of (seed, category, prompt_id)
max_reject_rate: 0.05     # fail the run when more input records than this are rejected
max_rates: {prompt_echo: 0.05}   # highest acceptable share per reject reason (default: diagnosis.py's)
min_endpoints: 1          # endpoints that must pass preflight; the others are left out with a warning
defaults:
  samples_per_prompt: 1
  turns: last             # last: one sample per record; each: one per assistant turn (docs/internals/multi-turn.md)
  mode: thinking          # thinking | instant | mix (modes.py): instant renders the template with thinking off
  instant_fraction: 0.5   # with mode: mix, the share of prompts generated instant (a seeded hash per prompt)
  max_tool_steps: 8       # with turns: each, tool results spliced in per conversation at most
  max_prompt_tokens: 32768
  sampling: {temperature: 1.0, top_p: 0.95, max_new_tokens: 8192}
decontamination:          # optional: drop prompts that overlap benchmark items (sources/decontamination.py)
  ngram: 13
  benchmarks: [humaneval, {name: gsm8k, path: data/gsm8k_test.jsonl, field: question}]
near_duplicates: {threshold: 0.7}   # optional: MinHash near-duplicates (sources/near_duplicates.py)
airflow:                  # optional, read by the Airflow DAGs only: their names and where they run
                          # (docs/internals/airflow.md)
  name: k25               # in the DAG ids (eagle_datagen__k25__math); default with several recipes: the recipe's name
  sglang_conn_id: sglang_kimi   # the forms' default; with several recipes: sglang_<name>, else sglang_default
  output: s3://eagle/k25  # the forms' default; with several recipes: EAGLE_DATAGEN_OUTPUT/<name>
  pool: sglang_kimi       # the SGLang tasks' pool; with several recipes: sglang_<name>, else sglang
mixes:                    # optional: named training mixes for `eagle-datagen export --mix NAME` and the release DAG
  phase1: {weights: {chat: 1, math: 2}, modes: [thinking, instant]}
  phase2: {weights: {chat: 0.25, math: 0}, seed: 1}   # export/mix.py: unnamed categories keep weight 1
categories:
  math:
    sources: [data/math/*.jsonl, {path: "s3://bucket/math/", max_prompts: 5000}]
    max_prompts: 20000
    sampling: {max_new_tokens: 16384}
  chat:
    sources: [{path: "hf://datasets/OWNER/NAME", split: train, format: sharegpt, history: drop}]
    mode: mix
    instant_fraction: 0.4
```
Relative source paths are resolved against the recipe file's folder.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from eagle_datagen import settings
from eagle_datagen.conversation import TURNS
from eagle_datagen.errors import ConfigError
from eagle_datagen.inference.endpoint_minimum import parse_min_endpoints
from eagle_datagen.modes import MODES
from eagle_datagen.records import CATEGORY_PATTERN
from eagle_datagen.sources.benchmarks import DEFAULT_NGRAM, BenchmarkSource
from eagle_datagen.sources.formats import MAPPABLE_FIELDS, FormatName, HistoryPolicy, SourceFormat
from eagle_datagen.sources.hub_paths import split_query

MAX_RECIPE_VALUES = 100_000  # a recipe with thousands of sources is still far below
# Near-duplicates (sources/near_duplicates.py): a prompt of 36 words with one word changed keeps a Jaccard
# similarity of 0.84 over 3-word shingles.
DEFAULT_THRESHOLD = 0.7
DEFAULT_SHINGLE_WORDS = 3
DEFAULT_NUM_PERM = 128


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SamplingParams(_Strict):
    """SGLang sampling parameters a recipe may set (`sampling_seed` is derived per sample, not set here)."""

    temperature: float | None = Field(None, **settings.bounds_of("temperature"))
    top_p: float | None = Field(None, **settings.bounds_of("top_p"))
    top_k: int | None = Field(None, ge=-1)  # -1 turns it off; 0 is refused by SGLang
    min_p: float | None = Field(None, **settings.bounds_of("min_p"))
    max_new_tokens: int | None = Field(None, **settings.bounds_of("max_new_tokens"))

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, value: int | None) -> int | None:
        if value == 0:
            raise ValueError("top_k must be -1 (off) or at least 1")
        return value

    def merged(self, override: SamplingParams | None) -> SamplingParams:
        if override is None:
            return self
        return self.model_copy(update=override.model_dump(exclude_none=True))


class SourceSpec(_Strict):
    path: str = Field(min_length=1)
    max_prompts: int | None = Field(None, **settings.bounds_of("source_max_prompts"))
    format: FormatName | None = None  # None: detected per record (sources/formats.py)
    columns: dict[str, str] = Field(default_factory=dict)  # format field -> the source's column
    history: HistoryPolicy | None = None  # earlier assistant replies: keep (default) or drop
    split: str | None = Field(None, min_length=1)  # Hugging Face datasets (default: train)
    config: str | None = Field(None, min_length=1)

    @field_validator("columns")
    @classmethod
    def _known_fields(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - set(MAPPABLE_FIELDS))
        if unknown:
            raise ValueError(f"columns maps unknown field(s) {unknown}; the fields are {list(MAPPABLE_FIELDS)}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _query(cls, value: Any) -> Any:
        """`hf://datasets/OWNER/NAME?config=C&split=S`: split and config in the path, as the CLI gives them."""
        return split_query(value) if isinstance(value, dict) else value

    def source_format(self) -> SourceFormat:
        return SourceFormat(self.format, dict(self.columns), self.history)


Turns = Literal[TURNS]  # type: ignore[valid-type]
Mode = Literal[MODES]  # type: ignore[valid-type]


class CategorySpec(_Strict):
    sources: list[SourceSpec] = Field(min_length=1)
    max_prompts: int | None = Field(None, **settings.bounds_of("max_prompts"))
    samples_per_prompt: int | None = Field(None, **settings.bounds_of("samples_per_prompt"))
    turns: Turns | None = None
    max_tool_steps: int | None = Field(None, **settings.bounds_of("max_tool_steps"))
    max_prompt_tokens: int | None = Field(None, **settings.bounds_of("max_prompt_tokens"))
    top_logprobs: int | None = Field(None, **settings.bounds_of("top_logprobs"))
    mode: Mode | None = None
    instant_fraction: float | None = Field(None, **settings.bounds_of("instant_fraction"))
    sampling: SamplingParams | None = None

    @field_validator("sources", mode="before")
    @classmethod
    def _plain_paths(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list):
            return [{"path": v} if isinstance(v, str) else v for v in value]
        return value


class Decontamination(_Strict):
    """Reject prompts whose user text shares an n-gram of `ngram` words with a benchmark item, or equals one."""

    ngram: int = Field(DEFAULT_NGRAM, **settings.bounds_of("benchmark_ngram"))
    benchmarks: list[BenchmarkSource] = Field(default_factory=list)


class NearDuplicates(_Strict):
    """Reject prompts whose MinHash similarity (over shingles of `shingle_words` words) to a prompt kept before
    them is at least `threshold`."""

    threshold: float = Field(DEFAULT_THRESHOLD, **settings.bounds_of("near_duplicate_threshold"))
    shingle_words: int = Field(DEFAULT_SHINGLE_WORDS, **settings.bounds_of("near_duplicate_shingle_words"))
    num_perm: int = Field(DEFAULT_NUM_PERM, **settings.bounds_of("near_duplicate_num_perm"))


MixName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")]
ALL_MIX = "all"  # the export of every category and mode, unweighted: the release DAG's default
MIX_MODES = ("thinking", "instant")  # export/mix.py's MODES (the recipe is read at DAG parse time: no numpy here)


class MixSpec(_Strict):
    """A training mix (export/mix.py): per-category weights (>= 0; a category not named keeps 1), the modes to
    keep (default every mode) and the seed of the selection under a fractional weight."""

    weights: dict[str, float] = Field(default_factory=dict)
    modes: list[Literal[MIX_MODES]] | None = Field(None, min_length=1)  # type: ignore[valid-type]
    seed: int = 0

    @field_validator("weights")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        for category, weight in value.items():
            if not CATEGORY_PATTERN.fullmatch(category):
                raise ValueError(f"mix weight for {category!r}: not a category name")
            if not 0 <= weight <= 1000:
                raise ValueError(f"mix weight for {category}: {weight} must be from 0 to 1000")
        return value


AIRFLOW_NAME = r"^([a-z0-9][a-z0-9_]{0,63})?$"  # "" keeps the DAG ids of a single recipe (eagle_datagen__<category>)
CONN_ID = r"^[A-Za-z0-9_.-]{1,250}$"  # what Airflow accepts as a connection id


class AirflowSpec(_Strict):
    """Where a recipe's DAGs run when several recipes share one Airflow (the DAGs read these; a run does not).
    Unset keys are derived from `name` by plugins/eagle_datagen_airflow/recipe_set.py."""

    name: str | None = Field(None, pattern=AIRFLOW_NAME)
    sglang_conn_id: str | None = Field(None, pattern=CONN_ID)
    aws_conn_id: str | None = Field(None, pattern=CONN_ID)
    output: str | None = Field(None, pattern=settings.OUTPUT_PATTERN)
    pool: str | None = Field(None, min_length=1, max_length=256)


class Defaults(_Strict):
    """The recipe's defaults for every category. Their own defaults are eagle_datagen/settings.py's; the sampling
    is left unset, so that what the recipe does not set comes from the model profile, then settings.py
    (settings.PRECEDENCE, applied by generation/stage.category_settings)."""

    samples_per_prompt: int = Field(
        settings.default_of("samples_per_prompt"), **settings.bounds_of("samples_per_prompt")
    )
    turns: Turns = settings.default_of("turns")
    max_tool_steps: int = Field(settings.default_of("max_tool_steps"), **settings.bounds_of("max_tool_steps"))
    max_prompt_tokens: int = Field(settings.default_of("max_prompt_tokens"), **settings.bounds_of("max_prompt_tokens"))
    # k > 0: store the top-k logprobs of every output token (soft targets, inference/logprobs.py)
    top_logprobs: int = Field(settings.default_of("top_logprobs"), **settings.bounds_of("top_logprobs"))
    mode: Mode = settings.default_of("mode")
    instant_fraction: float = Field(settings.default_of("instant_fraction"), **settings.bounds_of("instant_fraction"))
    sampling: SamplingParams = SamplingParams()


class Recipe(_Strict):
    version: Literal[1] = 1
    # Part of the Airflow asset URIs (eagle-datagen://<name>/<category>): a plain name, no path.
    name: str = Field("recipe", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    seed: int = settings.default_of("seed")
    max_reject_rate: float = Field(settings.default_of("max_reject_rate"), **settings.bounds_of("max_reject_rate"))
    # Literal special-token text in a record (a user typing <|im_end|>) forges turn boundaries; such
    # records are rejected (special_token_text) unless this is true. See docs/internals/security.md.
    allow_special_token_text: bool = False
    # The highest acceptable share of samples per reject reason (validation/diagnosis.py), over today's
    # defaults; `--max-rate` and the trigger form override them. For example {prompt_echo: 0.05}.
    max_rates: dict[str, float] = Field(default_factory=dict)
    # Endpoints that must pass preflight for the run to go on (inference/preflight.judge_endpoints); None:
    # settings.MIN_ENDPOINTS, unless a flag or the trigger form sets it.
    # A count (2) or a share of the endpoints given ("50%"): inference/endpoint_minimum.py.
    min_endpoints: int | str | None = None
    defaults: Defaults = Defaults()
    decontamination: Decontamination | None = None
    near_duplicates: NearDuplicates | None = None  # off unless given ({} for the defaults)
    mixes: dict[MixName, MixSpec] = Field(default_factory=dict)  # named training mixes (export/mix.py)
    airflow: AirflowSpec = AirflowSpec()  # the DAGs' names, connections, output root and pool
    categories: dict[str, CategorySpec] = Field(min_length=1)
    base_dir: Path | None = Field(None, exclude=True)

    @field_validator("min_endpoints", mode="before")
    @classmethod
    def _min_endpoints(cls, value: object) -> int | str | None:
        try:
            return None if value is None else parse_min_endpoints(value)
        except ConfigError as exc:  # said as the recipe's other bad values are
            raise ValueError(str(exc)) from None

    @field_validator("categories")
    @classmethod
    def _category_names(cls, value: dict[str, CategorySpec]) -> dict[str, CategorySpec]:
        for name in value:
            if not CATEGORY_PATTERN.fullmatch(name):
                raise ValueError(f"category name {name!r} must match [a-z0-9][a-z0-9_-]{{0,63}}")
        return value

    @model_validator(mode="after")
    def _mix_categories(self) -> Recipe:
        if ALL_MIX in self.mixes:
            raise ValueError(f"mixes: {ALL_MIX!r} is the export of everything, unweighted: give the mix another name")
        for name, mix in self.mixes.items():
            unknown = sorted(set(mix.weights) - set(self.categories))
            if unknown:
                raise ValueError(f"mixes.{name} weighs {unknown}, which are not categories of the recipe")
        return self

    @field_validator("max_rates")
    @classmethod
    def _known_reasons(cls, value: dict[str, float]) -> dict[str, float]:
        from eagle_datagen.validation.diagnosis import parse_rates

        try:
            return parse_rates(value, "max_rates")
        except ConfigError as exc:
            raise ValueError(str(exc).removeprefix("max_rates: ")) from None

    def sampling_for(self, category: str) -> SamplingParams:
        return self.defaults.sampling.merged(self.categories[category].sampling)

    def samples_per_prompt_for(self, category: str) -> int:
        return self.categories[category].samples_per_prompt or self.defaults.samples_per_prompt

    def turns_for(self, category: str) -> str:
        return self.categories[category].turns or self.defaults.turns

    def max_tool_steps_for(self, category: str) -> int:
        spec = self.categories[category].max_tool_steps
        return self.defaults.max_tool_steps if spec is None else spec

    def top_logprobs_for(self, category: str) -> int:
        spec = self.categories[category].top_logprobs
        return self.defaults.top_logprobs if spec is None else spec
    def mode_for(self, category: str) -> str:
        return self.categories[category].mode or self.defaults.mode

    def instant_fraction_for(self, category: str) -> float:
        spec = self.categories[category].instant_fraction
        return self.defaults.instant_fraction if spec is None else spec

    def max_prompt_tokens_for(self, category: str) -> int:
        return self.categories[category].max_prompt_tokens or self.defaults.max_prompt_tokens


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "recipe"
    message = error["msg"]
    if error["type"] == "extra_forbidden":
        message = "unknown key (check the spelling against the recipe format in docs/configuration.md)"
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {message}{more}"


def parse_recipe(raw: Any, origin: str = "<recipe>", base_dir: Path | None = None) -> Recipe:
    if not isinstance(raw, dict):
        raise ConfigError(f"recipe {origin} must be a YAML mapping with 'categories'")
    try:
        return Recipe.model_validate({**raw, "base_dir": base_dir})
    except ValidationError as exc:
        raise ConfigError(f"recipe {origin} is invalid: {_first_error(exc)}") from None


class _RecipeLoader(yaml.SafeLoader):
    """safe_load, except that a key given twice is an error (YAML would keep the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults` may be overridden key by key
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable):
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _check_expansion(value: Any, origin: str) -> None:
    """YAML aliases can make a small file expand to billions of values (or refer to themselves)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(item: Any) -> int:
        if not isinstance(item, dict | list):
            return 1
        key = id(item)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ConfigError(f"recipe {origin} refers to itself (a recursive YAML alias)")
        active.add(key)
        children = list(item.keys()) + list(item.values()) if isinstance(item, dict) else item
        sizes[key] = 1 + sum(size(child) for child in children)
        active.discard(key)
        return sizes[key]

    total = size(value)
    if total > MAX_RECIPE_VALUES:
        raise ConfigError(
            f"recipe {origin} expands to {total:,} values (limit {MAX_RECIPE_VALUES:,}): too many YAML aliases?"
        )


def load_recipe(path: str | Path) -> Recipe:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"recipe not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read recipe {path}: {exc}") from None
    try:
        raw = yaml.load(text, Loader=_RecipeLoader)  # noqa: S506 - a SafeLoader subclass
        _check_expansion(raw, str(path))
    except yaml.YAMLError as exc:
        raise ConfigError(f"recipe {path} is not valid YAML: {' '.join(str(exc).split())[:300]}") from None
    except RecursionError:
        raise ConfigError(f"recipe {path} is nested too deeply to read") from None
    return parse_recipe(raw, str(path), base_dir=path.resolve().parent)
