"""The evaluation's HTML report: one self-contained page (the dataset report's style and plotting, stats/report.py)
drawn from the results JSON alone. It leads with the answer: the headline accept length (output tokens / verify
steps) per category with its 95% interval, and with a comparison A against B with the paired difference and a
verdict per category, the chart beside it; then the details (every figure per category and mode, the paired
differences, the accepted-drafts histogram); the settings last, as compact tables (report_settings.py).
"""

from __future__ import annotations

from typing import Any

from eagle_datagen.evaluation.aggregate import HEADLINE
from eagle_datagen.evaluation.intervals import MIN_PROMPTS
from eagle_datagen.evaluation.report_settings import deployments_table, prompts_table, sampling_table
from eagle_datagen.stats.report import CSS, _colors, _e, _figure, _png, _text

A_COLOR, B_COLOR = "#0969da", "#bf8700"
DIFF = f"{HEADLINE}_diff"
PAGE_CSS = CSS + (
    "h3{margin-top:16px}"
    ".verdict{font-size:16px;margin:6px 0 10px}.warn{color:#9a6700}td.ahead{color:#1a7f37;font-weight:600}"
    ".iv{white-space:nowrap}"
    ".charts{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}.charts figure{flex:1 1 480px;margin:8px 0}"
)


def _value(stat: dict[str, Any] | None) -> float | None:
    return None if not stat else stat.get("value", stat.get("mean"))


def _headline(block: dict[str, Any]) -> dict[str, Any] | None:
    """A block's headline figure (results written before it had only the mean over prompts)."""
    return block.get(HEADLINE) or block.get("accept_length")


def _diff(block: dict[str, Any]) -> dict[str, Any] | None:
    return block.get(DIFF) or block.get("accept_length_diff")


def _number(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _interval(stat: dict[str, Any] | None, digits: int = 3, signed: bool = False) -> str:
    if _value(stat) is None:
        return "–"
    ci = stat.get("ci95")
    text = f"{_value(stat):+.{digits}f}" if signed else _number(_value(stat), digits)
    bounds = f" <span class='muted'>[{_number(ci[0], digits)}, {_number(ci[1], digits)}]</span>" if ci else ""
    return f"<span class='iv'>{text}{bounds}</span>"


def _errors(stat: dict[str, Any]) -> tuple[float, float]:
    """(below, above) the mean: the error bar of a 95% interval (none for a single prompt)."""
    if _value(stat) is None or not stat.get("ci95"):
        return 0.0, 0.0
    return _value(stat) - stat["ci95"][0], stat["ci95"][1] - _value(stat)


def _accept_length_plot(results: dict[str, Any]) -> str | None:
    from matplotlib.figure import Figure

    categories = [c for c, block in results["categories"].items() if _value(_headline(block)) is not None]
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
            stat = _headline(blocks.get(category) or {})
            if _value(stat) is None:
                continue
            below, above = _errors(stat)
            xs.append(i + (offset - (len(sides) - 1) / 2) * width)
            means.append(_value(stat))
            low.append(below)
            high.append(above)
        ax.bar(xs, means, width * 0.9, color=color, alpha=0.85, label=_text(label))
        ax.errorbar(xs, means, yerr=[low, high], fmt="none", ecolor="#1f2328", capsize=3, linewidth=1)
    ax.set_xticks(range(len(categories)), [_text(c) for c in categories], rotation=20, ha="right")
    ax.set_ylabel("accept length\n(output tokens / verify steps)")
    ax.set_ylim(bottom=1.0)  # one token per verify step: a drafter that never helps
    ax.grid(axis="y", alpha=0.3)
    if len(sides) > 1:
        ax.legend(loc="lower right", fontsize=8)
    return _png(fig)


def _difference_plot(comparison: dict[str, Any]) -> str | None:
    from matplotlib.figure import Figure

    rows = [(c, _diff(b)) for c, b in comparison["categories"].items()]
    rows = [(c, stat) for c, stat in rows if _value(stat) is not None]
    if not rows:
        return None
    rows.append(("all categories", _diff(comparison["overall"])))
    fig = Figure(figsize=(6.0, max(3.6, 0.45 * len(rows) + 1.2)), layout="constrained")
    ax = fig.subplots()
    ys = list(range(len(rows)))[::-1]
    colors = _colors(len(rows))
    for y, (_, stat), color in zip(ys, rows, colors, strict=True):
        below, above = _errors(stat)
        ax.errorbar([_value(stat)], [y], xerr=[[below], [above]], fmt="o", color=color, capsize=4)
    ax.axvline(0.0, color="#57606a", linewidth=1)
    ax.set_yticks(ys, [_text(c) for c, _ in rows])
    ax.set_xlabel("accept length A - B, paired by prompt (95% interval)")
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
        "<th class='n'>unmeasured</th><th class='n'>output tokens</th><th class='n'>verify steps</th>"
        "<th>accept length [95%]</th><th>without prefill [95%]</th><th>mean over prompts [95%]</th>"
        "<th>accept rate [95%]</th><th class='n'>output tok/s</th><th class='n'>latency p50 / p90 (s)</th>"
        "<th>failures</th></tr></thead>"
    )
    rows = []
    for name, block in [*categories.items(), ("all categories", overall)]:
        failures = ", ".join(f"{_e(k)} ×{n}" for k, n in block["failures"].items()) or "<span class='muted'>none</span>"
        latency = block["latency_s"]
        rows.append(
            f"<tr{' class=total' if name == 'all categories' else ''}><td>{_e(name)}</td>"
            f"<td class='n'>{block['prompts']:,}</td><td class='n'>{block['requests']:,}</td>"
            f"<td class='n'>{block['failed']:,}</td><td class='n'>{block['unmeasured']:,}</td>"
            f"<td class='n'>{block['output_tokens']:,}</td><td class='n'>{block['verify_steps']['total']:,}</td>"
            f"<td>{_interval(block.get(HEADLINE))}</td><td>{_interval(block.get('accept_length_no_prefill'))}</td>"
            f"<td>{_interval(block['accept_length'])}</td><td>{_interval(block['accept_rate'])}</td>"
            f"<td class='n'>{_number(block['output_tokens_per_s']['mean'], 1)}</td>"
            f"<td class='n'>{_number(latency['p50'], 2)} / {_number(latency['p90'], 2)}</td><td>{failures}</td></tr>"
        )
    return f"<div class='scroll'><table>{head}<tbody>{''.join(rows)}</tbody></table></div>"


def _verdict(diff: dict[str, Any] | None) -> str:
    """A or B ahead when the paired interval is clear of 0; flagged when too few prompts paired to trust it."""
    if _value(diff) is None:
        return "<span class='bad'>nothing paired</span>"
    ci, n = diff.get("ci95"), diff.get("n", 0)
    ahead = "A ahead" if ci and ci[0] > 0 else "B ahead" if ci and ci[1] < 0 else None
    if n < MIN_PROMPTS:
        shown = f"{ahead} on " if ahead else "not separated: "
        return f"<span class='warn'>{shown}{n} prompts, too few to trust (at least {MIN_PROMPTS})</span>"
    return ahead or "<span class='warn'>not separated (the interval holds 0)</span>"


def _verdict_table(results: dict[str, Any]) -> str:
    """The answer: per category the headline with its interval, and with a comparison B's, A - B and the verdict."""
    comparison = results.get("comparison")
    if not comparison:
        head = (
            "<thead><tr><th>category</th><th class='n'>prompts</th><th>accept length [95%]</th>"
            "<th>note</th></tr></thead>"
        )
        rows = []
        for name, block in [*results["categories"].items(), ("all categories", results["overall"])]:
            stat = _headline(block)
            note = f"<span class='warn'>{_e(stat['warning'])}</span>" if stat and stat.get("warning") else ""
            rows.append(
                f"<tr{' class=total' if name == 'all categories' else ''}><td>{_e(name)}</td>"
                f"<td class='n'>{block['prompts']:,}</td><td><b>{_interval(stat)}</b></td><td>{note}</td></tr>"
            )
        return f"<div class='scroll'><table>{head}<tbody>{''.join(rows)}</tbody></table></div>"
    theirs = comparison["results"]
    head = (
        f"<thead><tr><th>category</th><th class='n'>paired prompts</th><th>A: {_e(results['label'])}</th>"
        f"<th>B: {_e(comparison['label'])}</th><th>A - B [95%]</th><th>verdict</th></tr></thead>"
    )
    rows = []
    for name, block in [*comparison["categories"].items(), ("all categories", comparison["overall"])]:
        total = name == "all categories"
        mine = results["overall"] if total else results["categories"].get(name, {})
        other = theirs["overall"] if total else theirs["categories"].get(name, {})
        verdict = _verdict(_diff(block))
        rows.append(
            f"<tr{' class=total' if total else ''}><td>{_e(name)}</td><td class='n'>{block['paired_prompts']:,}</td>"
            f"<td>{_interval(_headline(mine))}</td><td>{_interval(_headline(other))}</td>"
            f"<td><b>{_interval(_diff(block), signed=True)}</b></td>"
            f"<td{' class=ahead' if verdict.endswith('ahead') else ''}>{verdict}</td></tr>"
        )
    return f"<div class='scroll'><table>{head}<tbody>{''.join(rows)}</tbody></table></div>"


def _differences_table(comparison: dict[str, Any]) -> str:
    """Every paired figure, A - B."""
    head = (
        "<thead><tr><th>category</th><th class='n'>paired prompts</th><th class='n'>only A</th>"
        "<th class='n'>only B</th><th>accept length [95%]</th><th>without prefill [95%]</th>"
        "<th>mean over prompts [95%]</th><th>accept rate [95%]</th></tr></thead>"
    )
    rows = []
    for name, block in [*comparison["categories"].items(), ("all categories", comparison["overall"])]:
        rows.append(
            f"<tr><td>{_e(name)}</td><td class='n'>{block['paired_prompts']:,}</td>"
            f"<td class='n'>{block['only_a']:,}</td><td class='n'>{block['only_b']:,}</td>"
            f"<td>{_interval(block.get(DIFF), signed=True)}</td>"
            f"<td>{_interval(block.get('accept_length_no_prefill_diff'), signed=True)}</td>"
            f"<td>{_interval(block['accept_length_diff'], signed=True)}</td>"
            f"<td>{_interval(block['accept_rate_diff'], signed=True)}</td></tr>"
        )
    return f"<div class='scroll'><table>{head}<tbody>{''.join(rows)}</tbody></table></div>"


def _warnings(results: dict[str, Any]) -> list[str]:
    """The differences a comparison accepted (the tables note a figure's own warnings)."""
    accepted = (results.get("comparison") or {}).get("accepted_differences") or []
    return [f"compared although measured otherwise (--allow-comparison-mismatch): {d}" for d in accepted]


def _summary_line(results: dict[str, Any]) -> str:
    overall = results["overall"]
    comparison = results.get("comparison")
    text = (
        f"{'A: ' if comparison else ''}<b>{_e(results['label'])}</b>, accept length "
        f"<b>{_interval(_headline(overall))}</b> over {overall['prompts']:,} prompts"
    )
    if comparison:
        diff = _diff(comparison["overall"])
        text += (
            f"; B: <b>{_e(comparison['label'])}</b> ({_e(comparison['source'])}), "
            f"{_interval(_headline(comparison['results']['overall']))}; A - B <b>{_interval(diff, signed=True)}</b> "
            f"over {comparison['overall']['paired_prompts']:,} paired prompts: {_verdict(diff)}"
        )
    return f"<p class='verdict'>{text}.</p>"


def render_evaluation(results: dict[str, Any]) -> str:
    from matplotlib import rc_context

    title = f"Evaluation {results['eval_id']}: {results['label']}"
    comparison = results.get("comparison")
    if comparison:
        title += f" vs {comparison['label']}"
    with rc_context({"font.size": 9, "axes.titlesize": 10}):
        length_png = _accept_length_plot(results)
        difference_png = _difference_plot(comparison) if comparison else None
        histogram_png = _histogram_plot(results)
    overall = results["overall"]
    warnings = "".join(f"<li class='warn'>{_e(w)}</li>" for w in _warnings(results))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{PAGE_CSS}</style></head><body><main>",
        f"<h1>{_e(title)}</h1>",
        _summary_line(results),
        _verdict_table(results),
        f"<ul>{warnings}</ul>" if warnings else "",
        "<div class='charts'>",
        _figure(
            length_png,
            "accept length per category",
            "Accept length per category: total output tokens / total verify steps (as SGLang's and SpecForge's "
            "benchmark scripts and drafter cards give it), with its 95% interval (a bootstrap over prompts).",
        ),
    ]
    if comparison:
        parts.append(
            _figure(
                difference_png,
                "paired differences",
                "Accept length of A minus B over the prompts measured on both, with the 95% interval of a bootstrap "
                "that resamples those prompts jointly; an interval clear of 0 is a difference the prompts show.",
            )
        )
    parts += [
        "</div>",
        "<h2>Per category</h2>",
        _category_table(results["categories"], overall),
        "<p class='muted'>Accept length: total output tokens / total verify steps over the category's measured "
        "requests (the headline, what published drafter cards print). Without prefill: 1 + drafts accepted / verify "
        "steps (each answer's first token comes from the prefill, not a verify step). Mean over prompts: the mean of "
        "SGLang's per-request spec_accept_length (high on short answers). Intervals: a percentile bootstrap over "
        "prompts. Failed requests and answers without speculative metrics (unmeasured) are counted, never averaged "
        "in. docs/internals/evaluation.md says what each figure means.</p>",
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
        parts += ["<h2>Paired differences, A - B</h2>", _differences_table(comparison)]
    parts += [
        "<h2>Draft tokens accepted per verify step</h2>",
        _figure(
            histogram_png,
            "accepted drafts histogram",
            "Share of verify steps that accepted k draft tokens (spec_correct_drafts_histogram, summed over requests).",
        ),
        "<h2>Settings</h2>",
        "<h3>Deployments</h3>",
        deployments_table(results),
        "<h3>Sampling</h3>",
        sampling_table(results),
        "<h3>Prompts and method</h3>",
        prompts_table(results),
        "</main></body></html>",
    ]
    return "\n".join(parts)
