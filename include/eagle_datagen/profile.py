"""Model profile: the token facts of a target model, declared in YAML (see `profiles/*.yaml`).

A profile is what validation and tokenization trust about the model: which token ends the prompt,
which tokens the output must carry, the EOS, the vocabulary size and context length. Adding a model is
adding a YAML file (or passing the path of one), not editing code.

The top-level `prompt_suffix` and `sampling` are the thinking mode's. A model that can answer without reasoning
declares `instant:` (modes.py): the chat template variables that turn thinking off, the prompt suffix they give
and the sampling recommended for it. A profile without it has no instant mode, and a run asking for one is
refused before any GPU time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

from eagle_datagen.errors import ConfigError
from eagle_datagen.modes import INSTANT, THINKING

Thinking = Literal["prefilled", "generated"]


@dataclass(frozen=True)
class TokenFact:
    text: str
    id: int


@dataclass(frozen=True)
class ModeFacts:
    """What one mode changes: the chat template's variables, the prompt's last tokens, the recommended sampling."""

    name: str  # thinking | instant
    prompt_suffix: tuple[TokenFact, ...]
    sampling: dict[str, float] = field(default_factory=dict)
    template_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt_suffix_ids(self) -> tuple[int, ...]:
        return tuple(t.id for t in self.prompt_suffix)

    def describe_suffix(self) -> str:
        return " ".join(f"{t.text!r} ({t.id})" for t in self.prompt_suffix)


@dataclass(frozen=True)
class ModelProfile:
    name: str
    model: str
    vocab_size: int
    context_length: int
    # "prefilled": the template ends the prompt inside the reasoning (Kimi); "generated": the model
    # writes think_start itself (Qwen3, DeepSeek-R1).
    thinking: Thinking
    tokens: dict[str, TokenFact]
    prompt_suffix: tuple[TokenFact, ...]
    sampling: dict[str, float] = field(default_factory=dict)
    # "remote_code": the model's own tokenizer is code shipped in its folder (Kimi-K2.5's tokenization_kimi.py);
    # a tokenizer folder without remote code is then a look-alike, and the loader warns (loader.py).
    reference_tokenizer: str = "any"
    instant: ModeFacts | None = None  # None: the model has no instant mode

    @property
    def modes(self) -> tuple[str, ...]:
        """The sample modes this model can generate in."""
        return (THINKING, INSTANT) if self.instant is not None else (THINKING,)

    def mode(self, name: str | None) -> ModeFacts:
        """The facts of a sample mode (None: thinking, as samples written before modes existed)."""
        if name in (None, THINKING):
            return ModeFacts(THINKING, self.prompt_suffix, dict(self.sampling))
        if name == INSTANT and self.instant is not None:
            return self.instant
        raise ConfigError(self.no_mode(str(name)))

    def no_mode(self, name: str) -> str:
        """The one line that refuses a mode this model lacks."""
        if name == INSTANT:
            return (
                f"profile {self.name} declares no instant mode ({self.model} cannot be told not to reason): use mode "
                "thinking, or a profile whose YAML declares instant (docs/internals/generation.md, \"Modes\")"
            )
        return f"unknown mode {name!r}: a sample is generated in one of {list(self.modes)}"

    @property
    def eos(self) -> TokenFact:
        return self.tokens["eos"]

    @property
    def think_start(self) -> TokenFact:
        return self.tokens["think_start"]

    @property
    def think_end(self) -> TokenFact:
        return self.tokens["think_end"]

    @property
    def prompt_suffix_ids(self) -> tuple[int, ...]:
        return tuple(t.id for t in self.prompt_suffix)

    def describe_suffix(self) -> str:
        return " ".join(f"{t.text!r} ({t.id})" for t in self.prompt_suffix)


REQUIRED_TOKENS = ("think_start", "think_end", "eos")


def available_profiles() -> list[str]:
    folder = resources.files("eagle_datagen.profiles")
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_profile(name_or_path: str) -> ModelProfile:
    """Load a shipped profile by name (`kimi-k2.5`) or a profile YAML file by path."""
    path = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")) or path.exists():
        if not path.is_file():
            raise ConfigError(
                f"profile file not found: {name_or_path} (give a YAML file or one of {available_profiles()})"
            )
        text = path.read_text(encoding="utf-8")
        origin = str(path)
    else:
        resource = resources.files("eagle_datagen.profiles").joinpath(f"{name_or_path}.yaml")
        if not resource.is_file():
            raise ConfigError(
                f"unknown profile {name_or_path!r}: use one of {available_profiles()} or a YAML file path"
            )
        text = resource.read_text(encoding="utf-8")
        origin = name_or_path
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"profile {origin} is not valid YAML: {str(exc).splitlines()[0]}") from None
    return parse_profile(raw, origin)


def _token_fact(value: Any, where: str, origin: str) -> TokenFact:
    if not (isinstance(value, dict) and isinstance(value.get("text"), str) and type(value.get("id")) is int):
        raise ConfigError(f"profile {origin}: {where} must be {{text: <token>, id: <int>}}")
    return TokenFact(value["text"], value["id"])


def parse_profile(raw: Any, origin: str = "<profile>") -> ModelProfile:
    if not isinstance(raw, dict):
        raise ConfigError(f"profile {origin} must be a YAML mapping")
    known = {
        "name",
        "model",
        "vocab_size",
        "context_length",
        "thinking",
        "tokens",
        "prompt_suffix",
        "sampling",
        "reference_tokenizer",
        "instant",
    }
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"profile {origin}: unknown key(s) {unknown}; allowed: {sorted(known)}")
    missing = sorted(k for k in known - {"sampling", "reference_tokenizer", "instant"} if k not in raw)
    if missing:
        raise ConfigError(f"profile {origin}: missing key(s) {missing}")
    for key in ("vocab_size", "context_length"):
        if type(raw[key]) is not int or raw[key] <= 0:
            raise ConfigError(f"profile {origin}: {key} must be a positive integer")
    if raw["thinking"] not in ("prefilled", "generated"):
        raise ConfigError(f"profile {origin}: thinking must be 'prefilled' or 'generated'")
    if not isinstance(raw["tokens"], dict):
        raise ConfigError(f"profile {origin}: tokens must be a mapping of name -> {{text, id}}")
    tokens = {name: _token_fact(v, f"tokens.{name}", origin) for name, v in raw["tokens"].items()}
    for name in REQUIRED_TOKENS:
        if name not in tokens:
            raise ConfigError(f"profile {origin}: tokens.{name} is required")
    for name, fact in tokens.items():
        if not 0 <= fact.id < raw["vocab_size"]:
            raise ConfigError(f"profile {origin}: tokens.{name} id {fact.id} is outside the vocabulary")
    if not isinstance(raw["prompt_suffix"], list) or not raw["prompt_suffix"]:
        raise ConfigError(f"profile {origin}: prompt_suffix must be a non-empty list")
    suffix = _suffix(raw["prompt_suffix"], "prompt_suffix", tokens, origin)
    if raw["thinking"] == "prefilled" and suffix[-1] != tokens["think_start"]:
        raise ConfigError(f"profile {origin}: thinking 'prefilled' needs prompt_suffix to end in think_start")
    reference = raw.get("reference_tokenizer", "any")
    if reference not in ("any", "remote_code"):
        raise ConfigError(f"profile {origin}: reference_tokenizer must be 'any' or 'remote_code'")
    sampling = raw.get("sampling") or {}
    if not isinstance(sampling, dict):
        raise ConfigError(f"profile {origin}: sampling must be a mapping")
    instant = _instant(raw["instant"], tokens, tuple(suffix), origin) if raw.get("instant") is not None else None
    return ModelProfile(
        name=str(raw["name"]),
        model=str(raw["model"]),
        vocab_size=raw["vocab_size"],
        context_length=raw["context_length"],
        thinking=raw["thinking"],
        tokens=tokens,
        prompt_suffix=tuple(suffix),
        sampling=dict(sampling),
        reference_tokenizer=reference,
        instant=instant,
    )


def _suffix(raw: Any, where: str, tokens: dict[str, TokenFact], origin: str) -> list[TokenFact]:
    """A prompt suffix: token names of `tokens` or {text, id} facts."""
    suffix = []
    for i, item in enumerate(raw):
        if isinstance(item, str):
            if item not in tokens:
                raise ConfigError(f"profile {origin}: {where}[{i}] names unknown token {item!r}")
            suffix.append(tokens[item])
        else:
            suffix.append(_token_fact(item, f"{where}[{i}]", origin))
    return suffix


def _instant(raw: Any, tokens: dict[str, TokenFact], thinking: tuple[TokenFact, ...], origin: str) -> ModeFacts:
    """The `instant:` mapping: template_kwargs (what turns thinking off), prompt_suffix, sampling."""
    where = f"profile {origin}: instant"
    if not isinstance(raw, dict) or sorted(set(raw) - {"template_kwargs", "prompt_suffix", "sampling"}):
        raise ConfigError(f"{where} must be a mapping of template_kwargs, prompt_suffix and sampling")
    kwargs, suffix, sampling = raw.get("template_kwargs"), raw.get("prompt_suffix"), raw.get("sampling") or {}
    if not isinstance(kwargs, dict) or not kwargs or not all(isinstance(k, str) for k in kwargs):
        raise ConfigError(f"{where}.template_kwargs must name the chat template variables that turn thinking off")
    if not isinstance(suffix, list) or not suffix:
        raise ConfigError(f"{where}.prompt_suffix must be a non-empty list")
    if not isinstance(sampling, dict):
        raise ConfigError(f"{where}.sampling must be a mapping")
    facts = tuple(_suffix(suffix, "instant.prompt_suffix", tokens, origin))
    if tokens["think_end"] not in facts:  # Kimi ends in </think>, Qwen3 in </think> and a blank line
        raise ConfigError(f"{where}.prompt_suffix must close the think block (hold think_end)")
    if facts == thinking:
        raise ConfigError(f"{where}.prompt_suffix is the thinking mode's: the two modes' prompts must differ")
    return ModeFacts(INSTANT, facts, dict(sampling), dict(kwargs))
