"""An evaluation's results as JSON (schema eagle-datagen/evaluation/v1, docs/internals/evaluation.md) and an earlier
evaluation read back as a baseline: its JSON, then its records file (checked against the sha256 the JSON lists),
whose deployment-A rows pair with this evaluation's prompt for prompt.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from eagle_datagen import settings
from eagle_datagen.errors import ConfigError, DataGenError
from eagle_datagen.evaluation.options import SCHEMA
from eagle_datagen.evaluation.place import split_location
from eagle_datagen.evaluation.records import read_records
from eagle_datagen.storage.objects import sha256_hex


@dataclass(frozen=True)
class Baseline:
    location: str
    results: dict[str, Any]  # its JSON
    rows: list[dict[str, Any]]  # its deployment-A records


def read_evaluation(location: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """An evaluation's JSON and its records (every side), from a path or s3:// URI of the JSON."""
    root, name = split_location(location)
    try:
        results = json.loads(root.read_bytes(name))
    except FileNotFoundError:
        raise ConfigError(f"no evaluation at {location}: give the path of an eval=<id>.json") from None
    except ValueError as exc:
        raise ConfigError(f"{location} is not an evaluation's JSON ({exc})") from None
    if not isinstance(results, dict) or results.get("schema") != SCHEMA:
        raise ConfigError(f"{location} is not an eagle-datagen evaluation ({SCHEMA})")
    entry = results["records"]
    data = root.read_bytes(entry["key"])
    if sha256_hex(data) != entry["sha256"]:
        raise DataGenError(f"{root.location(entry['key'])} differs from the records {location} lists: restore it")
    return results, read_records(data).to_pylist()


def load_baseline(location: str) -> Baseline:
    results, rows = read_evaluation(location)
    return Baseline(location, results, [row for row in rows if row["side"] == "A"])


def check_pairs_with(
    baseline: Baseline, seed: int, requests_per_prompt: int, prompt_keys: set[str], front_end: str
) -> None:
    """A baseline pairs only when its requests were this evaluation's: the same seed and requests per prompt (then
    a prompt's requests carry the same sampling seeds), and at least one prompt in common (comparable.py checks
    what they were measured with)."""
    theirs = baseline.results
    problems = []
    if theirs["seed"] != seed:
        problems.append(f"seed {theirs['seed']} (this one {seed}: {settings.named('eval_seed', front_end)})")
    if theirs["prompts"]["requests_per_prompt"] != requests_per_prompt:
        problems.append(
            f"{theirs['prompts']['requests_per_prompt']} requests per prompt (this one {requests_per_prompt})"
        )
    if problems:
        raise ConfigError(
            f"baseline {baseline.location} sent other requests: {'; '.join(problems)}: evaluate with its seed and "
            "requests per prompt, or compare with --compare-url instead"
        )
    shared = {r["prompt_key"] for r in baseline.rows} & prompt_keys
    if not shared:
        raise ConfigError(
            f"baseline {baseline.location} shares no prompt with this evaluation's {len(prompt_keys)}: nothing would "
            "pair; evaluate the prompts it was measured on (its --output and --run-id, or its --prompts)"
        )


def deployment_json(label: str, servers: list[dict[str, Any]]) -> dict[str, Any]:
    """A deployment as the results name it: its label, its URLs, and each endpoint's /server_info facts."""
    return {"label": label, "urls": [s["url"] for s in servers], "servers": servers}
