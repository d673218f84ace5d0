"""Load the target model's tokenizer and check it against the model profile before any work is done.

A tokenizer that disagrees with the profile (a special token at another id, a chat template that does
not end the prompt in `<think>`) would silently produce wrong training data, so it stops the run here
with one line that names the mismatch.

A tokenizer may have more ids than the model's `vocab_size`: Kimi-K2.5's has 163,842 (its last two are
reserved tokens) for a model with 163,840 embedding rows. Such a tokenizer is accepted (the log says how
many ids lie beyond the model's vocabulary), and a prompt that would hold one of them is rejected at
tokenize time as `id_beyond_model_vocab` (tokenize.py): SGLang's scheduler dies on such an id.

A folder that ships its own tokenizer code (`auto_map`) is tokenized with that code or not at all
(remote_code.py). The provenance records what tokenized: class and module, the sha256 of `tiktoken.model` and
of each remote-code file, and of the canary conversations as rendered (canaries.py), and the encode path (the
tokenizer's own call, or the opted-in tiktoken fast path); a rerun with another tokenizer or path is refused
(provenance.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle_datagen import settings
from eagle_datagen.errors import ConfigError
from eagle_datagen.profile import ModelProfile
from eagle_datagen.tokenization import tiktoken_path
from eagle_datagen.tokenization.canaries import render_canaries, rendered_sha256
from eagle_datagen.tokenization.remote_code import (
    auto_map_class,
    check_loaded_class,
    import_failure,
    refuse_without_flag,
    remote_code_files,
    sha256_of,
)

log = logging.getLogger(__name__)
_LOAD_LOCK = threading.Lock()
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
    ids_beyond_vocab: int = 0  # tokenizer ids at or above the profile's vocab_size (never sent)
    tokenizer_class: str = ""
    tokenizer_module: str = ""
    remote_code: str | None = None  # the auto_map class (`module.Class`) when the folder ships its code
    file_sha256: dict[str, str] = field(default_factory=dict)  # tiktoken.model and each remote-code file
    rendered_template_sha256: str = ""  # the canary conversations as the tokenizer renders them
    tiktoken_encoding: Any = None  # only where the user opted in to the fast path and it passed (tiktoken_path.py)

    @property
    def encode_path(self) -> str:
        """What makes the prompt ids: the tokenizer's own call (the default), or the opted-in tiktoken fast path."""
        return tiktoken_path.FAST_PATH if self.tiktoken_encoding is not None else tiktoken_path.OWN_CALL

    def encoder(self) -> Callable[[Sequence[str]], list[list[int]]]:
        """Texts -> their ids: the tokenizer's own call, or the fast path where the user opted in to it; one per
        process and stream (the fast path counts the texts it spot-checks)."""
        return tiktoken_path.text_encoder(self.tokenizer, self.spec, self.tiktoken_encoding)

    def provenance(self) -> dict[str, Any]:
        return {
            "tokenizer": self.spec,
            "tokenizer_sha256": self.tokenizer_sha256,
            "chat_template_sha256": self.chat_template_sha256,
            "profile": self.profile.name,
            "tokenizer_class": self.tokenizer_class,
            "tokenizer_module": self.tokenizer_module,
            "remote_code": self.remote_code,
            "tokenizer_files_sha256": dict(self.file_sha256),
            "rendered_template_sha256": self.rendered_template_sha256,
            "encode_path": self.encode_path,
        }


def resolve_tokenizer_path(spec: str) -> str:
    """`standin:kimi-k2.5` (remote code, as the real folder) or `standin:kimi-k2.5-fast` builds (once) and returns
    the project's stand-in; anything else is used as is."""
    if spec.startswith(STANDIN_PREFIX):
        from eagle_datagen.standin.kimi_tokenizer import STANDIN_NAMES, standin_tokenizer_dir

        name = spec[len(STANDIN_PREFIX) :]
        if name not in STANDIN_NAMES:
            shipped = " or ".join(STANDIN_PREFIX + n for n in STANDIN_NAMES)
            raise ConfigError(f"unknown stand-in tokenizer {spec!r}: the project ships {shipped}")
        return str(standin_tokenizer_dir(None, name))
    return spec


def _hash_files(folder: Path) -> str | None:
    files = [folder / name for name in TOKENIZER_FILES if (folder / name).is_file()] + remote_code_files(folder)
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def template_sha256(template: str | dict[str, str]) -> str:
    text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _hub_auto_map_class(path: str) -> str | None:
    """`auto_map` of a hub id's tokenizer_config.json (from the hub cache, or the hub when reachable)."""
    try:
        from transformers.models.auto.tokenization_auto import get_tokenizer_config

        entry = (get_tokenizer_config(path).get("auto_map") or {}).get("AutoTokenizer")
    except Exception:  # unreachable hub, no such repo: from_pretrained says so in its own words
        return None
    names = [e for e in entry if e] if isinstance(entry, list) else [entry] if entry else []
    return str(names[0]) if names else None


def _auto_tokenizer(path: str, trust_remote_code: bool, where: str, front_end: str = "cli") -> tuple[Any, str | None]:
    """The tokenizer and, when the folder ships its own code, its `module.Class`."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # silence "PyTorch was not found"
    local = Path(path).expanduser()
    if (path.startswith((".", "/", "~")) or local.exists()) and not local.is_dir():
        raise ConfigError(f"tokenizer directory not found: {path} (give the model's directory or hub id)")
    class_ref = auto_map_class(local) if local.is_dir() else _hub_auto_map_class(path)
    if class_ref and not trust_remote_code:  # before transformers, which would fall back to a built-in class
        raise refuse_without_flag(where if where == path else f"{where} ({path})", class_ref, front_end)
    from transformers import AutoTokenizer

    try:
        source = str(local) if local.is_dir() else path
        with _LOAD_LOCK:  # transformers' remote-code import is not thread-safe (planners may load in threads)
            tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    except ImportError as exc:
        raise import_failure(where, class_ref or "its tokenizer code", exc) from None
    except (AttributeError, SyntaxError, NameError, TypeError) as exc:
        if not class_ref:
            raise
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        raise ConfigError(f"tokenizer {where}: its code ({class_ref}) fails to load: {detail}") from None
    except ValueError as exc:
        if "trust_remote_code" in str(exc):
            raise ConfigError(
                f"tokenizer {path} runs its own code: set {settings.named('trust_remote_code', front_end)} if "
                "you trust its source"
            ) from None
        raise ConfigError(f"cannot load tokenizer {path}: {' '.join(str(exc).split())[:300]}") from None
    except OSError as exc:
        raise ConfigError(
            f"cannot load tokenizer {path}: {' '.join(str(exc).split())[:300]} "
            "(give a local tokenizer directory, or make the hub reachable)"
        ) from None
    if class_ref:
        check_loaded_class(tokenizer, where, class_ref)
    return tokenizer, class_ref


def ids_beyond_vocab(tokenizer: Any, vocab_size: int) -> dict[int, str]:
    """The tokenizer's ids at or above `vocab_size`, with their token text: ids the model cannot read."""
    return {i: text for text, i in tokenizer.get_vocab().items() if i >= vocab_size}


def _describe_ids(ids: dict[int, str]) -> str:
    shown = ", ".join(f"{i} {text!r}" for i, text in sorted(ids.items())[:4])
    return shown + (f", ... ({len(ids) - 4} more)" if len(ids) > 4 else "")


def check_tokenizer(tokenizer: Any, profile: ModelProfile, where: str) -> dict[int, str]:
    """Stop unless the tokenizer's ids and chat template agree with the profile. Returns the ids beyond the
    model's vocabulary (accepted: prompts holding one are rejected when tokenized)."""
    for name, fact in profile.tokens.items():
        actual = tokenizer.convert_tokens_to_ids(fact.text)
        if actual != fact.id:
            raise ConfigError(
                f"tokenizer {where} does not match profile {profile.name}: {fact.text!r} ({name}) is id {actual}, "
                f"expected {fact.id} (wrong --tokenizer or --profile?)"
            )
    beyond = ids_beyond_vocab(tokenizer, profile.vocab_size)
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
    return beyond


def _proven_encoding(tokenizer: Any, rendered: dict[str, str], wanted: bool, spec: str, announce: bool) -> Any:
    """The tokenizer's tiktoken.Encoding where the user opted in to the fast path and it passed its checks
    (tiktoken_path.py), else None: the tokenizer's own call, the default, makes every id."""
    if not wanted:
        if announce:
            log.info("tokenizer %s: every prompt is encoded by the tokenizer's own call (as SGLang calls it)", spec)
        return None
    encoding = tiktoken_path.tiktoken_encoding(tokenizer)
    if encoding is None:
        if announce:
            log.warning(
                "tokenizer %s: the tiktoken fast path was asked for, but the tokenizer holds no tiktoken.Encoding: "
                "every prompt is encoded by its own call",
                spec,
            )
        return None
    why_not = tiktoken_path.prove(tokenizer, encoding, rendered.values())
    if announce and why_not is not None:
        log.warning(
            "tokenizer %s: the tiktoken fast path was asked for but is not used (%s): every prompt is encoded by the "
            "tokenizer's own call",
            spec,
            why_not,
        )
    elif announce:
        log.warning(
            "tokenizer %s: encoding through its tiktoken.Encoding directly, as opted in (tiktoken_fast_path): checked "
            "on sample texts at load and one text in %d as the run goes, not exact by construction; the manifest "
            "records encode_path %s",
            spec,
            tiktoken_path.SPOT_CHECK_EVERY,
            tiktoken_path.FAST_PATH,
        )
    return encoding if why_not is None else None


def load_tokenizer(
    spec: str,
    profile: ModelProfile,
    trust_remote_code: bool = False,
    announce: bool = True,
    tiktoken_fast_path: bool = False,
    front_end: str = "cli",  # its messages name settings as this front end calls them
) -> LoadedTokenizer:
    """Load and check the tokenizer; `announce=False` (worker processes) keeps the log to the parent's lines.
    `tiktoken_fast_path` (an opt-in): encode through the tokenizer's tiktoken.Encoding where it passes its checks."""
    path = resolve_tokenizer_path(spec)
    tokenizer, class_ref = _auto_tokenizer(path, trust_remote_code, spec, front_end)
    beyond = check_tokenizer(tokenizer, profile, spec)
    local = Path(path).expanduser()
    files: dict[str, str] = {}
    if local.is_dir():
        for file in [local / "tiktoken.model", *remote_code_files(local)]:
            if file.is_file():
                files[file.name] = sha256_of(file)
    rendered = render_canaries(tokenizer)
    loaded = LoadedTokenizer(
        tokenizer=tokenizer,
        profile=profile,
        spec=spec,
        path=str(local.resolve()) if local.is_dir() else path,
        chat_template_sha256=template_sha256(tokenizer.chat_template),
        tokenizer_sha256=_hash_files(local) if local.is_dir() else None,
        ids_beyond_vocab=len(beyond),
        tokenizer_class=type(tokenizer).__name__,
        tokenizer_module=type(tokenizer).__module__,
        remote_code=class_ref,
        file_sha256=files,
        rendered_template_sha256=rendered_sha256(rendered),
        tiktoken_encoding=_proven_encoding(tokenizer, rendered, tiktoken_fast_path, spec, announce),
    )
    if not announce:
        return loaded
    if profile.reference_tokenizer == "remote_code" and not class_ref:
        log.warning(
            "tokenizer %s is not remote code, but %s's own tokenizer is (profile %s): its ids may differ from "
            "the model's (use the model's folder with --trust-remote-code)",
            spec,
            profile.model,
            profile.name,
        )
    if beyond:  # normal for Kimi-K2.5 (two reserved ids): said once, at INFO, nothing to fix
        log.info(
            "tokenizer %s has %d id(s) beyond %s's vocabulary of %d (%s): the model can neither read nor emit "
            "them, so a prompt that holds one is rejected as id_beyond_model_vocab",
            spec,
            len(beyond),
            profile.model,
            profile.vocab_size,
            _describe_ids(beyond),
        )
    log.info(
        "tokenizer %s matches profile %s (chat template sha256 %s)",
        spec,
        profile.name,
        loaded.chat_template_sha256[:12],
    )
    return loaded
