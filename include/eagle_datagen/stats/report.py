"""The dataset report: one self-contained HTML page (inline CSS, plots as base64 PNG, no scripts, no external
assets) drawn from the statistics JSON and the token counts, and the JSON summary uploaded beside it.

matplotlib is imported only when a report is rendered, and only through its object API with the Agg canvas,
so rendering never touches pyplot's global state or needs a display.
"""

from __future__ import annotations

import base64
import html
import io
import json
from typing import Any

import numpy as np

from eagle_datagen.stats.draft_vocab import DraftVocab
from eagle_datagen.stats.endpoint_table import endpoint_table
from eagle_datagen.stats.modes import modes_section
from eagle_datagen.stats.prompt_rejects import prompt_rejects_table
from eagle_datagen.stats.statistics import ALL, LENGTH_KINDS, token_frequency_summary

SUMMARY_SCHEMA = "eagle-datagen/report-summary/v1"
PLOTTED_LENGTHS = ("prompt", "reasoning", "answer")
MARKER_KS = (8000, 16000, 32000, 64000)
VALID_COLOR, QUARANTINE_COLOR = "#2da44e", "#cf222e"

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;margin:0;
  color:#1f2328;background:#f6f8fa}
main{max-width:1240px;margin:0 auto;padding:20px 24px 40px}
h1{font-size:24px;margin:0 0 12px}
h2{font-size:18px;margin:28px 0 10px;padding-bottom:4px;border-bottom:1px solid #d0d7de}
h3{font-size:15px;margin:0 0 8px}
table{border-collapse:collapse;background:#fff;font-size:13px}
th,td{border:1px solid #d0d7de;padding:3px 7px;text-align:left;vertical-align:top}
thead th.n{white-space:normal}
thead th{background:#f0f3f6}
.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.total td{font-weight:600;background:#f6f8fa}
table.meta th{background:#f0f3f6;width:170px;font-weight:600}
table.meta td{max-width:1000px}
code{font:12px/1.35 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;white-space:pre-wrap;word-break:break-all}
.kpis{display:flex;gap:12px;flex-wrap:wrap;margin:4px 0 14px}
.kpi{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:6px 14px;min-width:120px}
.kpi b{display:block;font-size:20px;font-variant-numeric:tabular-nums}
.kpi span{color:#57606a;font-size:12px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:14px}
.card table{width:100%}
.scroll{overflow-x:auto}
.card{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:10px 12px}
.card p{margin:4px 0}
.muted{color:#57606a}
.bad{color:#cf222e}
figure{margin:12px 0;background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:8px}
figure img{max-width:100%;height:auto;display:block}
figcaption{color:#57606a;font-size:12px;margin-top:4px}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _int(value: Any) -> str:
    return "–" if value is None else f"{int(value):,}"


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "–"


def _cache_share(group: dict[str, Any]) -> str:
    """The share of prompt tokens served from the prefix cache ("–" when no sample reported it)."""
    cache = group.get("prompt_cache") or {}  # statistics written before the field existed have none
    share = cache.get("cached_share")
    return "–" if share is None else f"{100 * share:.1f}%"


def _reasons(counts: dict[str, int]) -> str:
    if not counts:
        return '<span class="muted">none</span>'
    return "<br>".join(f"{_e(name)}&nbsp;<span class='muted'>×{n:,}</span>" for name, n in counts.items())


def _meta_value(value: Any) -> str:
    if isinstance(value, dict | list | tuple):
        return f"<code>{_e(json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False, default=str))}</code>"
    return _e(value)


def _groups(stats: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return list(stats.get("categories", {}).items())


# --- plots -------------------------------------------------------------------------------------------------


def _colors(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _text(value: Any) -> str:
    """A label drawn as written: `$` would start matplotlib's math mode."""
    return str(value).replace("$", r"\$")


def _png(fig) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _length_plot(stats: dict[str, Any]) -> str | None:
    """One panel per length kind, a line per category: share of samples per doubling of length."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator

    groups = [(name, g) for name, g in _groups(stats) if g["valid"]]
    if not groups:
        return None
    fig = Figure(figsize=(12, 3.6), layout="constrained")
    axes = fig.subplots(1, len(PLOTTED_LENGTHS))
    colors = _colors(len(groups))
    for ax, kind in zip(axes, PLOTTED_LENGTHS, strict=True):
        low, high = np.inf, 0.0
        for (name, group), color in zip(groups, colors, strict=True):
            hist = group["lengths"][kind]["histogram"]
            counts, edges = np.asarray(hist["counts"], dtype=float), np.asarray(hist["edges"], dtype=float)
            if counts.sum() == 0:
                continue
            # Bin 0 holds the zero lengths, which a log axis cannot show; the rest are divided by their width
            # in doublings, so the uneven integer bins at small lengths do not bend the curve.
            density = 100 * counts[1:] / counts.sum() / np.log2(edges[2:] / edges[1:-1])
            ax.stairs(density, edges[1:], color=color, linewidth=1.5, label=_text(name))
            nonzero = np.flatnonzero(counts[1:])
            if len(nonzero):
                low, high = min(low, edges[1 + nonzero[0]]), max(high, edges[2 + nonzero[-1]])
        ax.set_xscale("log")
        ax.xaxis.set_minor_locator(NullLocator())
        if high > 0:
            ax.set_xlim(low, high)
        ax.set_ylim(bottom=0)
        ax.set_title(f"{kind} tokens")
        ax.set_xlabel("tokens (log scale)")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("% of samples per doubling")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", frameon=False, fontsize=9)
    return _png(fig)


def _outcome_plot(stats: dict[str, Any]) -> str | None:
    from matplotlib.figure import Figure

    groups = _groups(stats)
    if not groups:
        return None
    names = [_text(name) for name, _ in groups]
    y = np.arange(len(groups))
    fig = Figure(figsize=(12, 1.2 + 0.32 * len(groups)), layout="constrained")
    left, right = fig.subplots(1, 2)
    valid = np.array([g["valid"] for _, g in groups])
    quarantined = np.array([g["quarantined"] for _, g in groups])
    left.barh(y, valid, color=VALID_COLOR, label="valid")
    left.barh(y, quarantined, left=valid, color=QUARANTINE_COLOR, label="quarantined")
    for i, (v, q) in enumerate(zip(valid, quarantined, strict=True)):
        if v + q:
            left.text(v + q, i, f" {100 * q / (v + q):.1f}%", va="center", fontsize=8, color="#57606a")
    left.set_xlim(0, max(1, (valid + quarantined).max()) * 1.12)
    left.set_title("samples by outcome (label: quarantined share)")
    left.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)

    totals: dict[str, int] = {}
    for _, group in groups:
        for reason, n in group["reject_reasons"].items():
            totals[reason] = totals.get(reason, 0) + n
    reasons = sorted(totals, key=lambda r: (-totals[r], r))
    offset = np.zeros(len(groups))
    for reason, color in zip(reasons, _colors(len(reasons)), strict=True):
        counts = np.array([g["reject_reasons"].get(reason, 0) for _, g in groups])
        right.barh(y, counts, left=offset, color=color, label=_text(reason))
        offset += counts
    if reasons:
        right.set_xlim(0, max(1, offset.max()) * 1.05)
        right.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    else:
        right.text(0.5, 0.5, "no quarantined samples", ha="center", va="center", transform=right.transAxes)
    right.set_title("quarantined samples by reject reason")
    for ax in (left, right):
        ax.set_yticks(y, names)
        ax.set_ylim(len(groups) - 0.5, -0.5)
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_xlabel("samples")
    return _png(fig)


def _token_plot(counts: np.ndarray) -> str | None:
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator

    ordered = np.sort(counts[counts > 0])[::-1].astype(float)
    n = len(ordered)
    if n == 0:
        return None
    ranks = np.arange(1, n + 1)
    idx = np.unique(np.geomspace(1, n, min(n, 800)).astype(np.int64)) - 1
    coverage = np.cumsum(ordered) / ordered.sum()
    fig = Figure(figsize=(12, 3.6), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.loglog(ranks[idx], ordered[idx], color="#0969da", linewidth=1.5)
    right.set_xscale("log")
    for axis in (left.xaxis, left.yaxis, right.xaxis):
        axis.set_minor_locator(NullLocator())
    left.set_title("token frequency by rank")
    left.set_xlabel("rank")
    left.set_ylabel("occurrences")
    left.grid(True, which="major", alpha=0.3)

    right.plot(ranks[idx], 100 * coverage[idx], color="#0969da", linewidth=1.5)
    for k in MARKER_KS:
        share = coverage[min(k, n) - 1]
        right.axvline(k, color="#bf3989", linewidth=0.8, linestyle=":")
        right.plot([k], [100 * share], "o", color="#bf3989", markersize=5)
        right.text(k, 4, f" {k // 1000}k: {100 * share:.1f}%", rotation=90, va="bottom", ha="right", fontsize=8)
    right.set_xlim(1, max(n, MARKER_KS[-1]) * 1.5)
    right.set_ylim(0, 102)
    right.set_title("share of trained tokens covered by the K most frequent ids")
    right.set_xlabel("draft vocabulary size K")
    right.set_ylabel("coverage (%)")
    right.grid(True, which="major", alpha=0.3)
    return _png(fig)


def _figure(png: str | None, alt: str, caption: str) -> str:
    if png is None:
        return f'<p class="muted">{_e(alt)}: no data.</p>'
    image = f'<img src="data:image/png;base64,{png}" alt="{_e(alt)}">'
    return f"<figure>{image}<figcaption>{_e(caption)}</figcaption></figure>"


# --- tables ------------------------------------------------------------------------------------------------


def _overview_table(stats: dict[str, Any]) -> str:
    head = (
        "<thead><tr><th>category</th><th class='n'>samples</th><th class='n'>valid</th><th class='n'>quarantined</th>"
        "<th>reject reasons</th><th>finish reasons</th><th class='n'>no think end</th>"
        "<th class='n'>prompt p50</th><th class='n'>reasoning p50</th><th class='n'>answer p50</th>"
        "<th class='n'>output p50 / p99</th><th class='n'>trained tokens</th>"
        "<th class='n'>cached prompt tokens</th></tr></thead>"
    )
    rows = []
    for name, group, css in [*((n, g, "") for n, g in _groups(stats)), (ALL, stats[ALL], "total")]:
        lengths = group["lengths"]
        rows.append(
            f"<tr class='{css}'><td>{_e(name)}</td><td class='n'>{_int(group['samples'])}</td>"
            f"<td class='n'>{_int(group['valid'])}</td>"
            f"<td class='n'>{_int(group['quarantined'])} ({_pct(group['quarantined'], group['samples'])})</td>"
            f"<td>{_reasons(group['reject_reasons'])}</td><td>{_reasons(group['finish_reasons'])}</td>"
            f"<td class='n'>{_int(group['without_think_end'])}</td>"
            + "".join(f"<td class='n'>{_int(lengths[k]['p50'])}</td>" for k in PLOTTED_LENGTHS)
            + f"<td class='n'>{_int(lengths['output']['p50'])} / {_int(lengths['output']['p99'])}</td>"
            f"<td class='n'>{_int(group['tokens']['output'])}</td>"
            f"<td class='n'>{_cache_share(group)}</td></tr>"
        )
    return f"<div class='scroll'><table>{head}<tbody>{''.join(rows)}</tbody></table></div>"


def _prefill_table(stats: dict[str, Any]) -> str:
    """Prompt tokens sent, found in the servers' prefix caches, and computed (GPU prefill work), per category."""
    head = (
        "<thead><tr><th>category</th><th class='n'>prompt tokens sent</th><th class='n'>cached</th>"
        "<th class='n'>computed</th><th class='n'>cached share</th></tr></thead>"
    )
    rows = []
    for name, group, css in [*((n, g, "") for n, g in _groups(stats)), (ALL, stats[ALL], "total")]:
        prefill = group.get("prefill")  # statistics written before the field existed have none
        if not prefill:
            continue
        reported = prefill["cached_share"] is not None
        cells = [
            _int(prefill[k]) if reported else "–" for k in ("prompt_tokens_sent", "cached_tokens", "computed_tokens")
        ]
        rows.append(
            f"<tr class='{css}'><td>{_e(name)}</td>"
            + "".join(f"<td class='n'>{c}</td>" for c in cells)
            + f"<td class='n'>{_pct(prefill['cached_tokens'], prefill['prompt_tokens_sent'])}</td></tr>"
        )
    if not rows:
        return ""
    return (
        "<h2>Prefill</h2>"
        f"<div class='scroll'><table>{head}<tbody>{''.join(rows)}</tbody></table></div>"
        "<p class='muted'>Over every sample whose server reported <code>cached_tokens</code>, valid or "
        "quarantined: computed = sent - cached is the prompt the replicas prefilled, the part of a run's GPU "
        "time that placement decides (docs/internals/prefix_cache.md).</p>"
    )


def _lengths_table(group: dict[str, Any]) -> str:
    fields = ("count", "mean", "p50", "p90", "p99", "max")
    head = "<thead><tr><th>tokens</th>" + "".join(f"<th class='n'>{f}</th>" for f in fields) + "</tr></thead>"
    rows = []
    for kind in LENGTH_KINDS:
        dist = group["lengths"][kind]
        cells = []
        for f in fields:
            value = dist[f]
            text = "–" if value is None else (f"{value:,.1f}" if f == "mean" else _int(value))
            cells.append(f"<td class='n'>{text}</td>")
        rows.append(f"<tr><td>{kind}</td>{''.join(cells)}</tr>")
    return f"<table>{head}<tbody>{''.join(rows)}</tbody></table>"


def _category_card(name: str, group: dict[str, Any]) -> str:
    quarantined = group["quarantined"]
    css = " class='bad'" if quarantined else ""
    return (
        f"<div class='card'><h3>{_e(name)}</h3>"
        f"<p>{_int(group['samples'])} samples: {_int(group['valid'])} valid, "
        f"<span{css}>{_int(quarantined)} quarantined ({_pct(quarantined, group['samples'])})</span>; "
        f"{_int(group['without_think_end'])} valid without think end; "
        f"{_cache_share(group)} of prompt tokens cached</p>"
        f"<p><b>reject reasons:</b> {_reasons(group['reject_reasons']).replace('<br>', ', ')}</p>"
        f"<p><b>finish reasons:</b> {_reasons(group['finish_reasons']).replace('<br>', ', ')}</p>"
        f"{_lengths_table(group)}</div>"
    )


def _coverage_table(summary: dict[str, Any]) -> str:
    ks = summary["coverage_top_k"]
    head = "<thead><tr><th>K</th>" + "".join(f"<th class='n'>{int(k):,}</th>" for k in ks) + "</tr></thead>"
    row = "<tr><td>coverage</td>" + "".join(f"<td class='n'>{100 * v:.2f}%</td>" for v in ks.values()) + "</tr>"
    needed = summary["tokens_for_coverage"]
    notes = ", ".join(f"{float(s):.0%} needs K = {_int(k)}" for s, k in needed.items() if k is not None)
    return f"<table>{head}<tbody>{row}</tbody></table><p class='muted'>{_e(notes)}</p>"


def _conversations_section(stats: dict[str, Any]) -> list[str]:
    """Multi-turn runs only: steps, trajectory ends and prompt drift by step kind (stats/conversations.py)."""
    multi = stats.get("conversations")
    if not multi:
        return []
    drift_rows = "".join(
        f"<tr><td>{_e(kind)}</td><td>{_reasons(counts)}</td></tr>" for kind, counts in multi["prompt_drift"].items()
    )
    return [
        "<h2>Conversations</h2>",
        f"<p>{_int(multi['conversations'])} conversations in {_int(sum(multi['steps'].values()))} steps "
        f"({_reasons(multi['steps'])}); trajectory ends: {_reasons(multi['trajectory_end'])}.</p>",
        "<div class='scroll'><table><thead><tr><th>step kind</th><th>prompt drift (re-rendered prompt vs the "
        f"parent's prompt + output)</th></tr></thead><tbody>{drift_rows}</tbody></table></div>",
        "<p class='muted'>none: the prompt extends the parent's ids token for token (what a tool loop must "
        "give); reasoning_dropped: the template rendered the parent's turn with an empty think block (K2.5 does "
        "so for turns before the last plain answer); reencoded: decoded text re-encoded to other ids; "
        "history_changed: the parent's prompt is no longer a prefix.</p>",
    ]


def render_report(
    stats: dict[str, Any],
    counts: np.ndarray | None,
    title: str,
    meta: dict[str, Any],
    endpoints: dict[str, Any] | None = None,
) -> str:
    """A self-contained HTML page of a run's statistics (and token frequencies when `counts` is given; the
    per-endpoint table when `endpoints`, an endpoint_journal.endpoint_report, is given)."""
    from matplotlib import rc_context

    everything = stats[ALL]
    quarantined = everything["quarantined"]
    token_summary = token_frequency_summary(counts) if counts is not None else None
    with rc_context({"font.size": 9, "axes.titlesize": 10}):
        length_png = _length_plot(stats)
        outcome_png = _outcome_plot(stats)
        token_png = _token_plot(np.asarray(counts)) if counts is not None else None

    kpis = [
        ("samples", _int(everything["samples"])),
        ("valid", _int(everything["valid"])),
        ("quarantined", f"{_int(quarantined)} ({_pct(quarantined, everything['samples'])})"),
        ("categories", _int(len(stats.get("categories", {})))),
        ("trained tokens", _int(everything["tokens"]["output"])),
        ("prompt tokens cached", _cache_share(everything)),
    ]
    if token_summary:
        kpis.append(("distinct tokens", _int(token_summary["distinct_tokens"])))
    meta_rows = "".join(f"<tr><th>{_e(k)}</th><td>{_meta_value(v)}</td></tr>" for k, v in meta.items())
    profile = stats.get("profile", {})
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body><main>",
        f"<h1>{_e(title)}</h1>",
        f"<table class='meta'><tbody>{meta_rows}</tbody></table>" if meta_rows else "",
        "<h2>Overview</h2>",
        "<div class='kpis'>"
        + "".join(f"<div class='kpi'><b>{v}</b><span>{_e(k)}</span></div>" for k, v in kpis)
        + "</div>",
        _overview_table(stats),
        f"<p class='muted'>Lengths and token counts cover {_e(stats.get('lengths_cover', ''))}. "
        f"Think end is id {_e(profile.get('think_end_id'))}, "
        f"EOS is id {_e(profile.get('eos_id'))}; reasoning is what precedes the first think end, the answer what "
        "follows it up to the final EOS. Cached prompt tokens: the share of prompt tokens the server "
        "found in its prefix cache (meta_info.cached_tokens), over every sample that reported it.</p>",
        _prefill_table(stats),
        "<h2>Length distributions</h2>",
        _figure(
            length_png,
            "length histograms",
            "Share of each category's valid samples per doubling of length, on fixed log-spaced bins "
            "(4 per doubling); zero lengths are not drawn on the log axis.",
        ),
        "<h2>Outcomes</h2>",
        _figure(
            outcome_png,
            "outcomes and reject reasons",
            "Valid and quarantined samples per category, and why the quarantined ones were rejected.",
        ),
        "<h2>Token frequency and draft vocabulary size</h2>",
    ]
    if token_summary:
        parts += [
            _coverage_table(token_summary),
            _figure(
                token_png,
                "token frequency",
                "Left: occurrences of each trained token id by rank. Right: share "
                "of all trained tokens that a draft vocabulary of the K most frequent ids covers.",
            ),
        ]
    else:
        parts.append("<p class='muted'>No token counts were given.</p>")
    parts += modes_section(stats)
    parts += _conversations_section(stats)
    if endpoints is not None:
        parts += ["<h2>Endpoints</h2>", endpoint_table(endpoints)]
    parts += [
        "<h2>Prompt rejects by source</h2>",
        prompt_rejects_table(stats.get("prompt_rejects")),
        "<p class='muted'>Prompt records left out before generation: broken records (read, validate, tokenize) "
        "and, with reason benchmark_overlap or near_duplicate, good ones the recipe filters out.</p>",
        "<h2>Categories</h2>",
        "<div class='cards'>" + "".join(_category_card(n, g) for n, g in _groups(stats)) + "</div>",
        "</main></body></html>",
    ]
    return "\n".join(p for p in parts if p)


def _compact(group: dict[str, Any]) -> dict[str, Any]:
    return {
        "samples": group["samples"],
        "valid": group["valid"],
        "quarantined": group["quarantined"],
        "reject_reasons": group["reject_reasons"],
        "finish_reasons": group["finish_reasons"],
        "without_think_end": group["without_think_end"],
        "tokens": group["tokens"],
        "lengths": {k: {f: v for f, v in d.items() if f != "histogram"} for k, d in group["lengths"].items()},
        "prompt_cache": group.get("prompt_cache"),
        "prefill": group.get("prefill"),
    }


def report_summary(stats: dict[str, Any], counts: np.ndarray | None, draft: DraftVocab | None) -> dict[str, Any]:
    """The JSON summary uploaded beside the report: totals, per-category counts and lengths (no histograms),
    token coverage and the chosen draft vocabulary."""
    return {
        "schema": SUMMARY_SCHEMA,
        "profile": stats.get("profile"),
        **_compact(stats[ALL]),
        "categories": {name: _compact(group) for name, group in _groups(stats)},
        "prompt_rejects": stats.get("prompt_rejects"),
        "modes": stats.get("modes"),
        "token_frequency": token_frequency_summary(counts) if counts is not None else None,
        "draft_vocab": None
        if draft is None
        else {
            "k": draft.k,
            "vocab_size": draft.vocab_size,
            "coverage": None if np.isnan(draft.coverage) else round(float(draft.coverage), 6),
        },
    }
