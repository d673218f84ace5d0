"""Whether two deployments' numbers may be compared: the same target (model and weight version), the same draft
settings (steps, tree, draft tokens, thresholds: only the drafter itself may differ) and the same sampling per
category and mode. A difference refuses the comparison in one line before any request, unless
`--allow-comparison-mismatch` accepts it; then the results list it (`comparison.accepted_differences`).
"""

from __future__ import annotations

from typing import Any

from eagle_datagen import settings
from eagle_datagen.errors import ConfigError
from eagle_datagen.evaluation.servers import SPECULATIVE_KEYS
from eagle_datagen.modes import THINKING

# what names the drafter, which is what a comparison compares; every other speculative setting must match
DRAFTER_KEYS = ("speculative_draft_model_path", "speculative_draft_model_revision", "speculative_token_map")
DRAFT_SETTINGS = tuple(k for k in SPECULATIVE_KEYS if k not in DRAFTER_KEYS)


def _one(servers: list[dict[str, Any]], pick: Any) -> Any:
    """The value the deployment's endpoints share (a sorted list when they differ)."""
    values = sorted({repr(pick(s)): pick(s) for s in servers}.items())
    return values[0][1] if len(values) == 1 else [v for _, v in values]


def deployment_facts(deployment: dict[str, Any]) -> dict[str, Any]:
    servers = deployment.get("servers") or []
    return {
        "model": _one(servers, lambda s: s.get("model_path")),
        "weight version": _one(servers, lambda s: s.get("weight_version")),
        "draft settings": _one(servers, lambda s: {k: (s.get("speculative") or {}).get(k) for k in DRAFT_SETTINGS}),
    }


def sampling_by_mode_of(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """category -> mode -> sampling; results written before modes sampled every prompt as thinking."""
    return results.get("sampling_by_mode") or {c: {THINKING: s} for c, s in results["sampling"].items()}


def differences(
    mine: dict[str, Any], theirs: dict[str, Any], sampling: dict[str, Any], their_sampling: dict[str, Any]
) -> list[str]:
    """What differs between deployment A (`mine`) and B (`theirs`), each a line "what: A ... , B ..."."""
    found = []
    a, b = deployment_facts(mine), deployment_facts(theirs)
    for what in a:
        if a[what] != b[what]:
            found.append(f"{what}: A {a[what]}, B {b[what]}")
    for category in sorted(set(sampling) & set(their_sampling)):
        for mode in sorted(set(sampling[category]) & set(their_sampling[category])):
            if sampling[category][mode] != their_sampling[category][mode]:
                found.append(
                    f"sampling of {category} ({mode}): A {sampling[category][mode]}, B {their_sampling[category][mode]}"
                )
    return found


def check_comparable(found: list[str], other: str, allowed: bool, front_end: str) -> list[str]:
    """The differences accepted (to record), or ConfigError naming them and the way out."""
    if found and not allowed:
        raise ConfigError(
            f"{other} was measured otherwise than this evaluation: {'; '.join(found)}: the numbers would not "
            f"compare; measure both alike, or give {settings.named('allow_comparison_mismatch', front_end)} to "
            "compare anyway (the results record the differences)"
        )
    return found
