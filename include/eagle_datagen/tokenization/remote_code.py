"""Tokenizers that ship their own code: the folder's code decides, or the run stops.

A tokenizer folder whose `tokenizer_config.json` has an `auto_map` (Kimi-K2.5: `tokenization_kimi.TikTokenTokenizer`,
a slow tokenizer over `tiktoken`) is the model's reference: SGLang serves it with `--trust-remote-code`, through that
code. Without `trust_remote_code`, transformers 5.x does not refuse such a folder when it knows its `model_type`
(`kimi_k25`): it silently loads its own built-in class, whose split pattern, tool rendering and vocabulary differ,
and about one prompt in five gets other ids. So the project reads `auto_map` itself, before transformers, and
refuses without the flag; with it, it checks that the class it got is the folder's own.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from eagle_datagen import settings
from eagle_datagen.errors import ConfigError

_MISSING_PACKAGES = re.compile(r"packages that were not found in your environment: ([\w\-., ]+?)\. Run")
_MISSING_NAME = re.compile(r"cannot import name '([^']+)' from '([\w.]+)'")


def auto_map_class(folder: Path) -> str | None:
    """`module.Class` that the folder's tokenizer_config.json maps `AutoTokenizer` to, or None."""
    config_file = folder / "tokenizer_config.json"
    if not config_file.is_file():
        return None
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return None  # transformers will say what is wrong with it
    auto_map = config.get("auto_map") if isinstance(config, dict) else None
    if not isinstance(auto_map, dict) or "AutoTokenizer" not in auto_map:
        return None
    entry = auto_map["AutoTokenizer"]
    names = [e for e in entry if e] if isinstance(entry, list) else [entry]
    return str(names[0]) if names else None


def refuse_without_flag(where: str, class_ref: str, front_end: str = "cli") -> ConfigError:
    """The refusal, naming the setting as the running front end calls it (a flag, or the connection's extra)."""
    setting = settings.named("trust_remote_code", front_end)
    how = f"pass {setting}" if front_end == "cli" else f"set {setting} to true"
    return ConfigError(
        f"tokenizer {where} ships its own code ({class_ref}): {how} to tokenize with it; it is never replaced by "
        "a built-in class"
    )


def _installed_version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "(version unknown)"


def import_failure(where: str, class_ref: str, exc: ImportError) -> ConfigError:
    """One line: the package the remote code could not import, or the name an installed module lacks (code written
    for another version of it: Moonshot's K2-era file imports bytes_to_unicode from transformers' gpt2 module,
    which transformers 5 no longer has there)."""
    text = " ".join(str(exc).split())
    missing_name = _MISSING_NAME.search(text)
    if missing_name:
        symbol, module = missing_name.groups()
        package = module.split(".")[0]
        installed = _installed_version(package)
        return ConfigError(
            f"tokenizer {where}: its code ({class_ref}) imports {symbol} from {module}, which the installed "
            f"{package} {installed} does not have: the code was written for another {package} version; use the "
            f"model's tokenizer code for {package} {installed} (its repository's current revision), or run with the "
            f"{package} version the code was written for"
        )
    found = _MISSING_PACKAGES.search(text)
    package = found.group(1) if found else (exc.name or "").split(".")[0] or text[:120]
    return ConfigError(
        f"tokenizer {where}: its code ({class_ref}) cannot import {package}: pip install {package} "
        "(the project pins the packages the Kimi-K2.5 tokenizer needs in requirements.txt)"
    )


def check_loaded_class(tokenizer: Any, where: str, class_ref: str) -> None:
    """The tokenizer transformers returned must be the folder's class, not a look-alike."""
    wanted = class_ref.rsplit(".", 1)[-1]
    got = type(tokenizer).__name__
    if got != wanted:
        raise ConfigError(
            f"tokenizer {where} maps AutoTokenizer to {class_ref}, but transformers loaded {got}: "
            "the folder's own code must tokenize (check its auto_map)"
        )


def remote_code_files(folder: Path) -> list[Path]:
    """The folder's Python files (the auto_map module and what it imports relatively)."""
    return sorted(path for path in folder.glob("*.py") if path.is_file())


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
