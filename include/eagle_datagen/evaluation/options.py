"""An evaluation's settings: `EvaluateConfig`, the plain-JSON carrier that the command line and the evaluate DAG
build from their front ends (settings.EVALUATE_SETTINGS), and `EvaluateOptions`, what the steps use.

The settings that `evaluate` shares with `run` land where they land in a run (`prompts.tokenizer`,
`sampling.temperature`, `retry.max_attempts`, `liveness.lost_after_s`, ...): the same option classes, filled by the
same `settings.build_options`, so the client, its retries and the sampling's precedence are generation's own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from eagle_datagen import settings
from eagle_datagen.errors import ConfigError
from eagle_datagen.generation.stage import SamplingOverrides
from eagle_datagen.inference.access import COMPARE_API_KEY_VARIABLE, ServerAccess, server_access
from eagle_datagen.inference.endpoints import BreakerPolicy
from eagle_datagen.inference.liveness import LivenessPolicy
from eagle_datagen.inference.retry import RetryPolicy
from eagle_datagen.tokenization.stage import TokenizeOptions

SCHEMA = "eagle-datagen/evaluation/v1"


@dataclass(frozen=True)
class EvaluateOptions:
    prompts: TokenizeOptions  # tokenizer, profile, --prompts sources, categories, the output root, the recipe
    sglang_urls: list[str]  # deployment A
    compare_urls: list[str] = field(default_factory=list)  # deployment B (same requests, paired)
    api_key_file: str | None = None  # deployment A's key; None: $EAGLE_DATAGEN_API_KEY, if set (inference/access.py)
    compare_api_key_file: str | None = None  # B's; None: $EAGLE_DATAGEN_COMPARE_API_KEY, else A's key
    ca_bundle: str | None = None  # None: the system's CA certificates
    baseline: str | None = None  # or an earlier evaluation's JSON, paired by prompt
    label: str | None = None
    compare_label: str | None = None
    runs: list[str] = field(default_factory=list)  # with the output root: only these runs' held-out prompts
    max_prompts_per_category: int | None = None
    requests_per_prompt: int = 1
    seed: int = 0
    eval_id: str | None = None
    to: str | None = None
    model: str | None = None  # what the servers must serve; default: the profile's model
    sampling: SamplingOverrides = field(default_factory=SamplingOverrides)
    concurrency: int | None = None  # per endpoint; default from the server's max_running_requests
    replicas_behind_url: int | None = None  # None: a router's workers from its /workers, else one (inference/fleet.py)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)
    liveness: LivenessPolicy = field(default_factory=LivenessPolicy)
    preflight_wait_s: float = settings.WAIT_READY_S
    allow_unchecked_tokenizer: bool = False  # endpoints whose /v1/tokenize cannot be asked are measured unchecked
    allow_comparison_mismatch: bool = False  # compare with B measured otherwise (comparable.py); the results say so
    front_end: str = "cli"

    @property
    def compares(self) -> bool:
        return bool(self.compare_urls) or self.baseline is not None

    def access(self) -> dict[str, ServerAccess]:
        """Each deployment's API key and CA bundle, read now: "A", and "B" (its own key, else A's)."""
        a = server_access(self.api_key_file, self.ca_bundle, front_end=self.front_end)
        b = server_access(
            self.compare_api_key_file,
            self.ca_bundle,
            variable=COMPARE_API_KEY_VARIABLE,
            flag="--compare-api-key-file",
            fallback=a,
            front_end=self.front_end,
        )
        return {"A": a, "B": b}


class _EvaluateConfigMethods:
    def __post_init__(self) -> None:
        if self.compare_urls and self.baseline:
            raise ConfigError(
                f"give {settings.named('compare_urls', self.front_end)} or {settings.named('baseline', self.front_end)}"
                ", not both: an evaluation compares with one other deployment"
            )

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> EvaluateConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"unknown evaluation setting(s) {unknown}; known: {sorted(known)}")
        return cls(**raw)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def options(self) -> EvaluateOptions:
        return settings.build_options(EvaluateOptions, self, settings.EVALUATE_SETTINGS)


# One field per setting of settings.EVALUATE_SETTINGS that has a `config`, named and defaulted there.
EvaluateConfig = dataclasses.make_dataclass(
    "EvaluateConfig",
    settings.config_fields(settings.EVALUATE_SETTINGS),
    bases=(_EvaluateConfigMethods,),
    namespace={"__module__": __name__, "__doc__": "An evaluation's settings (settings.EVALUATE_SETTINGS)."},
    frozen=True,
    kw_only=True,
)
