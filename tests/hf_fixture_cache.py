"""A Hugging Face `datasets` cache that holds local fixture rows under real dataset ids, as `load_dataset(OWNER/NAME)`
would have left it: with HF_HOME pointing at it and the hub offline, a recipe that names `hf://datasets/OWNER/NAME`
sources reads the fixtures, unedited (the hub cannot be reached from here).

`tests/data/kimi_k25_recipe/datasets.json` lists the fixtures of include/recipes/kimi-k2.5.yaml: each dataset id,
its split and config where the recipe names one, and the JSONL file of rows of the dataset's shape (written for
the project)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import datasets
from datasets.naming import camelcase_to_snakecase

from conftest import REPO

KIMI_RECIPE = REPO / "include" / "recipes" / "kimi-k2.5.yaml"
KIMI_FIXTURES = REPO / "tests" / "data" / "kimi_k25_recipe"


def as_if_downloaded(
    cache: Path, dataset: str, rows: list[dict], split: str = "train", config: str = "default"
) -> None:
    """The prepared split `load_dataset(dataset, config, split=split)` leaves under `cache` (HF_DATASETS_CACHE)."""
    owner, repo = dataset.split("/")
    name = camelcase_to_snakecase(repo)  # the datasets library's own folder and file names
    staging = cache.parent / f"staging-{owner}-{name}-{config}-{split}"
    datasets.Dataset.from_list(rows).save_to_disk(str(staging))
    target = cache / f"{owner}___{name}" / config / "0.0.0" / "0123456789abcdef"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(staging / "data-00000-of-00001.arrow", target / f"{name}-{split}.arrow")
    info = json.loads((staging / "dataset_info.json").read_text())
    info.update(builder_name="parquet", config_name=config, dataset_name=name, version={"version_str": "0.0.0"})
    known = target / "dataset_info.json"
    splits = json.loads(known.read_text())["splits"] if known.exists() else {}
    splits[split] = {"name": split, "num_examples": len(rows), "dataset_name": name}
    info["splits"] = splits
    (target / "dataset_info.json").write_text(json.dumps(info))
    shutil.rmtree(staging)


def kimi_recipe_cache(home: Path) -> dict[str, str]:
    """An HF_HOME holding every fixture of the Kimi-K2.5 recipe; returns the environment that reads it offline."""
    cache = home / "datasets"
    for entry in json.loads((KIMI_FIXTURES / "datasets.json").read_text()):
        lines = (KIMI_FIXTURES / entry["file"]).read_text(encoding="utf-8").splitlines()
        rows = [json.loads(line) for line in lines if line.strip()]
        as_if_downloaded(cache, entry["dataset"], rows, entry.get("split", "train"), entry.get("config", "default"))
    return dict(os.environ, HF_HOME=str(home), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
