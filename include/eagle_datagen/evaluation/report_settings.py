"""The report's settings, as compact tables after the numbers: the deployments side by side (a value both share
said once, across both columns), the sampling per category and mode (rows that share every value merged), and the
prompt set and method in one table.
"""

from __future__ import annotations

from typing import Any

from eagle_datagen.evaluation.comparable import DRAFT_SETTINGS, deployment_facts
from eagle_datagen.stats.report import _e


def _value(value: Any) -> str:
    if value is None:
        return "<span class='muted'>–</span>"
    if isinstance(value, list):
        return "<br>".join(_e(v) for v in value) or "<span class='muted'>none</span>"
    return _e(value)


def _deployment_rows(deployment: dict[str, Any]) -> dict[str, Any]:
    servers = deployment.get("servers") or []
    facts = deployment_facts(deployment)
    draft = facts["draft settings"] if isinstance(facts["draft settings"], dict) else {}
    rows = {
        "label": deployment.get("label"),
        "endpoints": deployment.get("urls") or [s["url"] for s in servers],
        "draft model": sorted({str((s.get("speculative") or {}).get("speculative_draft_model_path")) for s in servers}),
        "target model": facts["model"],
        "weight version": facts["weight version"],
        "SGLang": sorted({str(s.get("sglang_version")) for s in servers}),
    }
    rows |= {key.removeprefix("speculative_").replace("_", " "): draft.get(key) for key in DRAFT_SETTINGS}
    return {k: (v[0] if isinstance(v, list) and len(v) == 1 and k != "endpoints" else v) for k, v in rows.items()}


def deployments_table(results: dict[str, Any]) -> str:
    a = _deployment_rows(results["deployment"])
    comparison = results.get("comparison")
    b = _deployment_rows(comparison["deployment"]) if comparison else None
    head = "<thead><tr><th></th><th>A</th>" + ("<th>B</th>" if b else "") + "</tr></thead>"
    rows = []
    for key, value in a.items():
        if b is None:
            cells = f"<td>{_value(value)}</td>"
        elif b.get(key) == value:  # the same on both sides: said once
            cells = f"<td colspan=2>{_value(value)}</td>"
        else:
            cells = f"<td>{_value(value)}</td><td>{_value(b.get(key))}</td>"
        rows.append(f"<tr><th>{_e(key)}</th>{cells}</tr>")
    return f"<table class='meta'>{head}<tbody>{''.join(rows)}</tbody></table>"


def sampling_table(results: dict[str, Any]) -> str:
    """One row per distinct sampling, naming the categories and modes that share it."""
    by_mode = results.get("sampling_by_mode") or {c: {"thinking": s} for c, s in results["sampling"].items()}
    groups: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for category, modes in by_mode.items():
        for mode, sampling in modes.items():
            shown = {k: v for k, v in sampling.items() if v is not None}
            key = repr(sorted(shown.items()))
            groups.setdefault(key, (shown, []))[1].append(f"{category} · {mode}")
    columns = sorted({k for shown, _ in groups.values() for k in shown})
    head = "<thead><tr><th>categories · modes</th>" + "".join(f"<th>{_e(c)}</th>" for c in columns) + "</tr></thead>"
    rows = []
    for shown, names in groups.values():
        label = "every category and mode" if len(groups) == 1 else ", ".join(names)
        cells = "".join(f"<td class='n'>{_value(shown.get(c))}</td>" for c in columns)
        rows.append(f"<tr><td>{_e(label)}</td>{cells}</tr>")
    return f"<div class='scroll'><table>{head}<tbody>{''.join(rows)}</tbody></table></div>"


def prompts_table(results: dict[str, Any]) -> str:
    prompts = results["prompts"]
    if prompts.get("source") == "heldout":
        source = f"held-out prompts of {prompts.get('output')} (runs {', '.join(prompts.get('runs') or []) or '–'})"
    else:
        source = "--prompts " + ", ".join(prompts.get("sources") or [])
    intervals = results.get("intervals") or {}
    rows = {
        "prompts": source,
        "per category": ", ".join(f"{c} {n:,}" for c, n in (prompts.get("per_category") or {}).items()),
        "requests per prompt": prompts.get("requests_per_prompt"),
        "seed": results.get("seed"),
        "intervals": (
            f"{intervals['method']}, {intervals['resamples']:,} resamples, seed {intervals['seed']}"
            if intervals
            else "Student's t over prompts"
        ),
        "records": results["records"]["key"],
    }
    if results.get("comparison", {}).get("baseline"):
        baseline = results["comparison"]["baseline"]
        rows["baseline"] = f"{baseline['eval_id']} ({baseline['location']})"
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_value(v)}</td></tr>" for k, v in rows.items())
    return f"<table class='meta'><tbody>{body}</tbody></table>"
