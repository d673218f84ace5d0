"""The evaluation's HTML report: one self-contained page (the dataset report's style and plotting, stats/report.py)
drawn from the results JSON alone: accept length per category with its 95% interval (both deployments side by side
when there is a comparison), the paired difference A - B per category with its interval, the share of verify steps
that accepted k drafts, and the tables of every figure.
"""

from __future__ import annotations

from typing import Any

from eagle_datagen.stats.report import CSS, _colors, _e, _figure, _meta_value, _png, _text

A_COLOR, B_COLOR = "#0969da", "#bf8700"


def _number(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _interval(stat: dict[str, Any] | None, digits: int = 3) -> str:
    if not stat or stat.get("mean") is None:
        return "–"
    ci = stat.get("ci95")
    text = _number(stat["mean"], digits)
    return text + (f" <span class='muted'>[{_number(ci[0], digits)}, {_number(ci[1], digits)}]</span>" if ci else "")


def _errors(stat: dict[str, Any]) -> tuple[float, float]:
    """(below, above) the mean: the error bar of a 95% interval (none for a single prompt)."""
    if stat.get("mean") is None or not stat.get("ci95"):
        return 0.0, 0.0
    return stat["mean"] - stat["ci95"][0], stat["ci95"][1] - stat["mean"]


def _accept_length_plot(results: dict[str, Any]) -> str | None:
    from matplotlib.figure import Figure

    categories = [c for c, block in results["categories"].items() if block["accept_length"]["mean"] is not None]
    if not categories:
        return None
    comparison = (results.get("comparison") or {}).get("results", {}).get("categories", {})
    sides = [(results["label"], results["categories"], A_COLOR)]
    if comparison:
        sides.append((results["comparison"]["label"], comparison, B_COLOR))
    fig = Figure(figsize=(max(6.0, 1.1 * len(categories) + 2), 3.6), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / len(sides)
    for offset, (label, blocks, color) in enumerate(sides):
        xs, means, low, high = [], [], [], []
        for i, category in enumerate(categories):
            stat = (blocks.get(category) or {}).get("accept_length") or {}
            if stat.get("mean") is None:
                continue
            below, above = _errors(stat)
            xs.append(i + (offset - (len(sides) - 1) / 2) * width)
            means.append(stat["mean"])
            low.append(below)
            high.append(above)
        ax.bar(xs, means, width * 0.9, color=color, alpha=0.85, label=_text(label))
        ax.errorbar(xs, means, yerr=[low, high], fmt="none", ecolor="#1f2328", capsize=3, linewidth=1)
    ax.set_xticks(range(len(categories)), [_text(c) for c in categories], rotation=20, ha="right")
    ax.set_ylabel("accept length (tokens per verify step)")
    ax.set_ylim(bottom=0.0)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return _png(fig)


def _difference_plot(comparison: dict[str, Any]) -> str | None:
    from matplotlib.figure import Figure

    rows = [(c, b["accept_length_diff"]) for c, b in comparison["categories"].items()]
    rows = [(c, stat) for c, stat in rows if stat["mean"] is not None]
    if not rows:
        return None
    rows.append(("all categories", comparison["overall"]["accept_length_diff"]))
    fig = Figure(figsize=(7.5, 0.45 * len(rows) + 1.2), layout="constrained")
    ax = fig.subplots()
    ys = list(range(len(rows)))[::-1]
    colors = _colors(len(rows))
    for y, (_, stat), color in zip(ys, rows, colors, strict=True):
        below, above = _errors(stat)
        ax.errorbar([stat["mean"]], [y], xerr=[[below], [above]], fmt="o", color=color, capsize=4)
    ax.axvline(0.0, color="#57606a", linewidth=1)
    ax.set_yticks(ys, [_text(c) for c, _ in rows])
    ax.set_xlabel("accept length, A - B, paired by prompt (95% interval)")
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def _histogram_plot(results: dict[str, Any]) -> str | None:
    from matplotlib.figure import Figure

    shares = {
        c: b["correct_drafts_histogram"]["share"]
        for c, b in results["categories"].items()
        if b["correct_drafts_histogram"]
    }
    if not shares:
        return None
    width = max(len(s) for s in shares.values())
    fig = Figure(figsize=(7.5, 0.4 * len(shares) + 1.3), layout="constrained")
    ax = fig.subplots()
    colors = _colors(width)
    names = list(shares)
    left = [0.0] * len(names)
    for k in range(width):
        values = [shares[c][k] if k < len(shares[c]) else 0.0 for c in names]
        ax.barh(range(len(names)), values, left=left, color=colors[k], label=f"{k} accepted")
        left = [a + b for a, b in zip(left, values, strict=True)]
    ax.set_yticks(range(len(names)), [_text(c) for c in names])
    ax.invert_yaxis()
    ax.set_xlabel("share of verify steps that accepted k draft tokens")
    ax.set_xlim(0, 1)
    ax.legend(ncols=min(width, 6), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    return _png(fig)


def _category_table(categories: dict[str, Any], overall: dict[str, Any]) -> str:
    head = (
        "<thead><tr><th>category</th><th class='n'>prompts</th><th class='n'>requests</th><th class='n'>failed</th>"
        "<th class='n'>unmeasured</th><th class='n'>output tokens</th><th>accept length [95%]</th>"
        "<th>accept rate [95%]</th><th class='n'>verify steps / request</th><th class='n'>output tok/s</th>"
        "<th class='n'>latency p50 / p90 (s)</th><th>failures</th></tr></thead>"
    )
    rows = []
    for name, block in [*categories.items(), ("all categories", overall)]:
        failures = ", ".join(f"{_e(k)} ×{n}" for k, n in block["failures"].items()) or "<span class='muted'>none</span>"
        latency = block["latency_s"]
        rows.append(
            f"<tr{' class=total' if name == 'all categories' else ''}><td>{_e(name)}</td>"
            f"<td class='n'>{block['prompts']:,}</td><td class='n'>{block['requests']:,}</td>"
            f"<td class='n'>{block['failed']:,}</td><td class='n'>{block['unmeasured']:,}</td>"
            f"<td class='n'>{block['output_tokens']:,}</td><td>{_interval(block['accept_length'])}</td>"
            f"<td>{_interval(block['accept_rate'])}</td>"
            f"<td class='n'>{_number(block['verify_steps']['per_request'], 1)}</td>"
            f"<td class='n'>{_number(block['output_tokens_per_s']['mean'], 1)}</td>"
            f"<td class='n'>{_number(latency['p50'], 2)} / {_number(latency['p90'], 2)}</td><td>{failures}</td></tr>"
        )
    return f"<div class='scroll'><table>{head}<tbody>{''.join(rows)}</tbody></table></div>"


def _comparison_table(results: dict[str, Any]) -> str:
    comparison = results["comparison"]
    theirs = comparison["results"]["categories"]
    head = (
        f"<thead><tr><th>category</th><th class='n'>paired prompts</th><th>A: {_e(results['label'])}</th>"
        f"<th>B: {_e(comparison['label'])}</th><th>A - B accept length [95%]</th>"
        "<th>A - B accept rate [95%]</th></tr></thead>"
    )
    rows = []
    for name, block in [*comparison["categories"].items(), ("all categories", comparison["overall"])]:
        mine = results["overall"] if name == "all categories" else results["categories"].get(name, {})
        other = comparison["results"]["overall"] if name == "all categories" else theirs.get(name, {})
        rows.append(
            f"<tr><td>{_e(name)}</td><td class='n'>{block['paired_prompts']:,}</td>"
            f"<td>{_interval(mine.get('accept_length'))}</td><td>{_interval(other.get('accept_length'))}</td>"
            f"<td>{_interval(block['accept_length_diff'])}</td><td>{_interval(block['accept_rate_diff'])}</td></tr>"
        )
    return f"<div class='scroll'><table>{head}<tbody>{''.join(rows)}</tbody></table></div>"


def _meta(results: dict[str, Any]) -> dict[str, Any]:
    servers = results["deployment"]["servers"]
    meta = {
        "deployment A": f"{results['label']}: {', '.join(results['deployment']['urls'])}",
        "speculative settings": servers[0]["speculative"] if servers else None,
        "target": f"{results['model']} (weights {servers[0]['weight_version'] if servers else '?'})",
        "prompts": results["prompts"],
        "sampling": results["sampling"],
        "seed": results["seed"],
        "records": results["records"]["key"],
    }
    if results.get("comparison"):
        comparison = results["comparison"]
        b_servers = comparison["deployment"].get("servers") or []
        meta["deployment B"] = f"{comparison['label']} ({comparison['source']}): " + ", ".join(
            comparison["deployment"].get("urls") or []
        )
        meta["B speculative settings"] = b_servers[0]["speculative"] if b_servers else None
    return meta


def render_evaluation(results: dict[str, Any]) -> str:
    from matplotlib import rc_context

    title = f"Evaluation {results['eval_id']}: {results['label']}"
    comparison = results.get("comparison")
    with rc_context({"font.size": 9, "axes.titlesize": 10}):
        length_png = _accept_length_plot(results)
        difference_png = _difference_plot(comparison) if comparison else None
        histogram_png = _histogram_plot(results)
    overall = results["overall"]
    kpis = [
        ("accept length", _interval(overall["accept_length"])),
        ("accept rate", _interval(overall["accept_rate"])),
        ("prompts", f"{overall['prompts']:,}"),
        ("requests", f"{overall['requests']:,}"),
        ("failed", f"{overall['failed']:,}"),
    ]
    meta_rows = "".join(f"<tr><th>{_e(k)}</th><td>{_meta_value(v)}</td></tr>" for k, v in _meta(results).items())
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body><main>",
        f"<h1>{_e(title)}</h1>",
        f"<table class='meta'><tbody>{meta_rows}</tbody></table>",
        "<h2>Acceptance</h2>",
        "<div class='kpis'>"
        + "".join(f"<div class='kpi'><b>{v}</b><span>{_e(k)}</span></div>" for k, v in kpis)
        + "</div>",
        _figure(
            length_png,
            "accept length per category",
            "Mean accept length per category (SGLang's spec_accept_length: output tokens per verify step, the bonus "
            "token included), over prompts, with its 95% interval.",
        ),
        _category_table(results["categories"], overall),
        "<p class='muted'>A prompt's value is the mean of its measured requests; intervals are Student's t over "
        "prompts. Failed requests (retries exhausted or refused) and answers without speculative metrics "
        "(unmeasured: no verify step) are counted, never averaged in. docs/evaluation.md says what each metric "
        "means.</p>",
    ]
    by_mode = results.get("categories_by_mode") or {}
    if len(results.get("modes") or {}) > 1:  # thinking and instant prompts: each mode's own acceptance
        rows = {f"{c} · {m}": block for c, modes in by_mode.items() for m, block in modes.items()}
        parts += [
            "<h2>Per mode</h2>",
            _category_table(rows | {f"all · {m}": b for m, b in results["modes"].items()}, overall),
            "<p class='muted'>Each prompt is evaluated in the mode it was rendered in (thinking: the prompt ends in "
            "&lt;think&gt;; instant: in &lt;think&gt;&lt;/think&gt;), sampled as the profile recommends for that "
            "mode.</p>",
        ]
    if comparison:
        parts += [
            "<h2>Comparison</h2>",
            _figure(
                difference_png,
                "paired differences",
                "Accept length of A minus B, per prompt measured on both, with the 95% interval of the mean "
                "difference; an interval clear of 0 is a difference the prompts show.",
            ),
            _comparison_table(results),
        ]
    parts += [
        "<h2>Draft tokens accepted per verify step</h2>",
        _figure(
            histogram_png,
            "accepted drafts histogram",
            "Share of verify steps that accepted k draft tokens (spec_correct_drafts_histogram, summed over requests).",
        ),
        "</main></body></html>",
    ]
    return "\n".join(parts)
