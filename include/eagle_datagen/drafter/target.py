"""What a drafter conversion needs to know of its target: read from the target's config.json alone (no weights).

A multimodal target such as Kimi-K2.5 (`KimiK25ForConditionalGeneration`) keeps its language model's sizes in
`text_config`; SGLang reads the dtype there too (`ModelConfig.hf_text_config`), so the text config wins where both
have a field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle_datagen.errors import ConfigError

DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class TargetModel:
    path: Path  # the config.json read
    architecture: str
    num_layers: int
    vocab_size: int
    hidden_size: int
    dtype: str | None  # as its config names it; None when it names none (SGLang then reads float32)
    max_position_embeddings: int | None

    @property
    def served_dtype(self) -> str:
        """The dtype SGLang 0.5.23 serves it in with `--dtype auto` (configs/model_config.py,
        `_get_and_verify_dtype`): its config's, except that float32 (or none) is served as float16."""
        return "float16" if self.dtype in (None, "float32") else self.dtype


def _field(configs: list[dict[str, Any]], *names: str) -> Any:
    for config in configs:
        for name in names:
            if config.get(name) is not None:
                return config[name]
    return None


def read_target(path: str | Path) -> TargetModel:
    """The target of `--target-config` (a model folder or its config.json); one line naming what is missing."""
    config_path = Path(path)
    if config_path.is_dir():
        config_path = config_path / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--target-config {path}: cannot read the target's config.json ({exc})") from exc
    if not isinstance(config, dict):
        raise ConfigError(f"--target-config {path}: {config_path} is not a model config (not a JSON object)")
    text = config.get("text_config")
    configs = [text, config] if isinstance(text, dict) else [config]
    architectures = config.get("architectures") or []
    missing = [name for name in ("num_hidden_layers", "vocab_size", "hidden_size") if _field(configs, name) is None]
    if not architectures or missing:
        what = ", ".join((["architectures"] if not architectures else []) + missing)
        raise ConfigError(f"--target-config {path}: {config_path} lacks {what}: give the target model's own config")
    dtype = _field(configs, "dtype", "torch_dtype")
    if dtype is not None and str(dtype).removeprefix("torch.") not in DTYPES:
        raise ConfigError(f"--target-config {path}: dtype {dtype!r} is none of {', '.join(DTYPES)}")
    return TargetModel(
        path=config_path,
        architecture=str(architectures[0]),
        num_layers=int(_field(configs, "num_hidden_layers")),
        vocab_size=int(_field(configs, "vocab_size")),
        hidden_size=int(_field(configs, "hidden_size")),
        dtype=None if dtype is None else str(dtype).removeprefix("torch."),
        max_position_embeddings=_field(configs, "max_position_embeddings"),
    )
