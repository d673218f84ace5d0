"""Load the target model's tokenizer and check it against the model profile before any work is done.

A tokenizer that disagrees with the profile (a special token at another id, a chat template that does
not end the prompt in `<think>`) would silently produce wrong training data, so it stops the run here
with one line that names the mismatch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle_datagen.errors import ConfigError
from eagle_datagen.profile import ModelProfile

log = logging.getLogger(__name__)
STANDIN_PREFIX = "standin:"
PROBE_MESSAGES = [{"role": "user", "content": "Hello"}]
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
    "tiktoken.model",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
)


@dataclass(frozen=True)
class LoadedTokenizer:
    tokenizer: Any  # a transformers tokenizer
    profile: ModelProfile
    spec: str  # what the user asked for
    path: str  # where it was loaded from
    chat_template_sha256: str
    tokenizer_sha256: str | None  # over the tokenizer files, when they are local

    def provenance(self) -> dict[str, Any]:
        return {
            "tokenizer": self.spec,
            "tokenizer_sha256": self.tokenizer_sha256,
            "chat_template_sha256": self.chat_template_sha256,
            "profile": self.profile.name,
        }


def resolve_tokenizer_path(spec: str) -> str:
    """`standin:kimi-k2.5` builds (once) and returns the project's stand-in; anything else is used as is."""
    if spec.startswith(STANDIN_PREFIX):
        from eagle_datagen.standin.kimi_tokenizer import STANDIN_NAME, standin_tokenizer_dir

        name = spec[len(STANDIN_PREFIX) :]
        if name != STANDIN_NAME:
            raise ConfigError(f"unknown stand-in tokenizer {spec!r}: the project ships {STANDIN_PREFIX}{STANDIN_NAME}")
        return str(standin_tokenizer_dir())
    return spec


def _hash_files(folder: Path) -> str | None:
    files = [folder / name for name in TOKENIZER_FILES if (folder / name).is_file()]
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def template_sha256(template: str | dict[str, str]) -> str:
    text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _auto_tokenizer(path: str, trust_remote_code: bool) -> Any:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # silence "PyTorch was not found"
    from transformers import AutoTokenizer

    local = Path(path).expanduser()
    if (path.startswith((".", "/", "~")) or local.exists()) and not local.is_dir():
        raise ConfigError(f"tokenizer directory not found: {path} (give the model's directory or hub id)")
    try:
        source = str(local) if local.is_dir() else path
        return AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    except ValueError as exc:
        if "trust_remote_code" in str(exc):
            raise ConfigError(
                f"tokenizer {path} runs its own code: pass --trust-remote-code if you trust its source"
            ) from None
        raise ConfigError(f"cannot load tokenizer {path}: {' '.join(str(exc).split())[:300]}") from None
    except OSError as exc:
        raise ConfigError(
            f"cannot load tokenizer {path}: {' '.join(str(exc).split())[:300]} "
            "(give a local tokenizer directory, or make the hub reachable)"
        ) from None


def check_tokenizer(tokenizer: Any, profile: ModelProfile, where: str) -> None:
    """Stop unless the tokenizer's ids and chat template agree with the profile."""
    for name, fact in profile.tokens.items():
        actual = tokenizer.convert_tokens_to_ids(fact.text)
        if actual != fact.id:
            raise ConfigError(
                f"tokenizer {where} does not match profile {profile.name}: {fact.text!r} ({name}) is id {actual}, "
                f"expected {fact.id} (wrong --tokenizer or --profile?)"
            )
    largest = max(tokenizer.get_vocab().values())
    if largest >= profile.vocab_size:
        raise ConfigError(
            f"tokenizer {where} has id {largest}, beyond profile {profile.name}'s vocab_size {profile.vocab_size}"
        )
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(
            f"tokenizer {where} has no chat template: use the model's own tokenizer directory "
            "(with chat_template.jinja or a chat_template in tokenizer_config.json)"
        )
    try:
        ids = tokenizer.apply_chat_template(
            PROBE_MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False
        )
    except Exception as exc:  # a broken template can raise anything jinja can
        raise ConfigError(f"the chat template of {where} fails on a one-message prompt: {exc}") from None
    suffix = profile.prompt_suffix_ids
    if tuple(ids[-len(suffix) :]) != suffix:
        tail = tokenizer.convert_ids_to_tokens(ids[-len(suffix) :])
        raise ConfigError(
            f"the chat template of {where} does not end the prompt in {profile.describe_suffix()} but in "
            f"{tail} {ids[-len(suffix) :]}: use the {profile.model} chat template, or a profile that fits this model"
        )


def load_tokenizer(spec: str, profile: ModelProfile, trust_remote_code: bool = False) -> LoadedTokenizer:
    path = resolve_tokenizer_path(spec)
    tokenizer = _auto_tokenizer(path, trust_remote_code)
    check_tokenizer(tokenizer, profile, spec)
    local = Path(path).expanduser()
    loaded = LoadedTokenizer(
        tokenizer=tokenizer,
        profile=profile,
        spec=spec,
        path=str(local.resolve()) if local.is_dir() else path,
        chat_template_sha256=template_sha256(tokenizer.chat_template),
        tokenizer_sha256=_hash_files(local) if local.is_dir() else None,
    )
    log.info(
        "tokenizer %s matches profile %s (chat template sha256 %s)",
        spec,
        profile.name,
        loaded.chat_template_sha256[:12],
    )
    return loaded
