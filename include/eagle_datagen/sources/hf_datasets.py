"""Hugging Face datasets as prompt sources, read with the `datasets` library and streamed.

Three kinds (each one source, rows in the dataset's order):
- `saved`: a folder written by `Dataset.save_to_disk` or `DatasetDict.save_to_disk` (`state.json`,
  `dataset_dict.json`); its Arrow files are memory-mapped, never loaded whole.
- `folder`: Parquet or Arrow files in a dataset's layout (`data/train-00000-of-00004.parquet`,
  `train/0000.parquet`, a dataset card's `configs:`), read with `load_dataset(folder, streaming=True)`.
  A folder is taken as one when it holds Arrow files, when its Parquet files are named by split, or when the
  source names a split or config; other folders stay folders of prompt files.
- `hub`: `hf://datasets/OWNER/NAME` (`?config=C&split=S`, or `split:`, `config:` in the recipe), streamed.
  Offline (`HF_HUB_OFFLINE=1` or `HF_DATASETS_OFFLINE=1`) it is read from the local `datasets` cache; a
  dataset that is neither cached nor reachable is a one-line `SourceError`.
The split is `train` unless the source names one (or the saved dataset has a single split).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eagle_datagen.errors import SourceError
from eagle_datagen.sources.hub_paths import HUB_PATTERN
from eagle_datagen.sources.locations import SourceFile

# File names datasets' layout inference reads as splits (data/train-00000-of-00001.parquet, test/0000.parquet).
_SPLIT_NAMED = re.compile(r"(^|[/_.-])(train|test|validation|valid|dev|eval)([/_.-]|$)", re.IGNORECASE)
DEFAULT_SPLIT = "train"


def hub_source(spec: str, split: str | None, config: str | None) -> SourceFile:
    if not HUB_PATTERN.match(spec):
        raise SourceError(
            f"bad Hugging Face dataset {spec}: write hf://datasets/OWNER/NAME (split and config as "
            "?config=C&split=S or in the recipe)"
        )
    source = SourceFile(spec.rstrip("/"), "hub", split, config)
    _open(source)  # neither cached nor reachable: fail now, before any GPU time is spent
    return source


def local_source(path: Path, split: str | None, config: str | None) -> SourceFile | None:
    """The dataset `path` holds, or None when it is no Hugging Face dataset (a plain file or folder)."""
    kind = _local_kind(path, split, config)
    if kind is None:
        return None
    source = SourceFile(str(path), kind, split, config)
    _open(source)  # a split or config it does not have fails now
    return source


def _local_kind(path: Path, split: str | None, config: str | None) -> str | None:
    if not path.is_dir():
        return None
    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        return "saved"
    files = [p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")]
    data = [f for f in files if f.endswith((".parquet", ".arrow"))]
    if not data:
        return None
    arrow_or_named = any(f.endswith(".arrow") for f in data) or any(_SPLIT_NAMED.search(f) for f in data)
    return "folder" if split is not None or config is not None or arrow_or_named else None


def _quiet(datasets: Any) -> None:
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()


def _describe(source: SourceFile) -> str:
    parts = [f"config {source.config}"] if source.config else []
    parts.append(f"split {source.split or DEFAULT_SPLIT}")
    return f"{source.uri} ({', '.join(parts)})"


def _open(source: SourceFile) -> Any:
    """An iterable over the rows of the source's split, streamed (Arrow files memory-mapped)."""
    try:  # an extra of the package: an Airflow environment may not have it
        import datasets
    except ImportError:
        raise SourceError(
            f"Hugging Face dataset {source.uri} needs the datasets package: pip install 'eagle-datagen[datasets]'"
        ) from None

    _quiet(datasets)
    if source.hf_kind == "saved":
        return _open_saved(datasets, source)
    name = source.uri
    if source.hf_kind == "hub":
        owner, repo = HUB_PATTERN.match(source.uri).groups()  # type: ignore[union-attr]
        name = f"{owner}/{repo}"
    try:
        return datasets.load_dataset(name, source.config, split=source.split or DEFAULT_SPLIT, streaming=True)
    except (ConnectionError, datasets.exceptions.DatasetNotFoundError) as exc:
        if source.hf_kind == "hub":
            mode = "offline mode is on" if datasets.config.HF_DATASETS_OFFLINE else "the hub did not answer"
            raise SourceError(
                f"Hugging Face dataset {_describe(source)} is neither in the local cache "
                f"({datasets.config.HF_DATASETS_CACHE}) nor reachable ({mode}): load it once where the hub is "
                "reachable (HF_HUB_OFFLINE unset), or point the source at its Parquet files"
            ) from None
        raise SourceError(f"cannot read Hugging Face dataset {_describe(source)}: {_first_line(exc)}") from None
    except (ValueError, FileNotFoundError, OSError) as exc:  # a split or config it does not have, bad files
        raise SourceError(f"cannot read Hugging Face dataset {_describe(source)}: {_first_line(exc)}") from None


def _open_saved(datasets: Any, source: SourceFile) -> Any:
    if source.config is not None:
        raise SourceError(f"saved dataset {source.uri} has no configs: drop config: from the source")
    try:
        saved = datasets.load_from_disk(source.uri)
    except (FileNotFoundError, OSError, ValueError) as exc:
        raise SourceError(f"cannot read saved dataset {source.uri}: {_first_line(exc)}") from None
    if isinstance(saved, datasets.DatasetDict):
        splits = list(saved)
        split = source.split or (splits[0] if len(splits) == 1 else DEFAULT_SPLIT)
        if split not in saved:
            raise SourceError(f"saved dataset {source.uri} has no split {split!r}; it has {splits} (set split:)")
        saved = saved[split]
    elif source.split is not None:
        raise SourceError(f"saved dataset {source.uri} is a single split: drop split: from the source")
    return saved.to_iterable_dataset()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def hf_rows(source: SourceFile) -> Iterator[tuple[str, dict[str, Any]]]:
    """(origin, row) per row of the dataset, as it holds them; sources/readers.py decodes them as tabular rows."""
    dataset = _open(source)
    try:
        for number, row in enumerate(dataset, start=1):
            yield f"{source.uri}:row{number}", row
    except (ValueError, OSError) as exc:  # a corrupt shard in the middle of the dataset
        raise SourceError(f"cannot read Hugging Face dataset {_describe(source)}: {_first_line(exc)}") from None
