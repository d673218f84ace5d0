"""The report's per-endpoint table: what each SGLang endpoint answered over the whole run, and whether the
content breaker took it out (generation/endpoint_journal.py gathers the counts)."""

from __future__ import annotations

import html
from typing import Any


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _counts(counts: dict[str, int]) -> str:
    if not counts:
        return '<span class="muted">none</span>'
    return "<br>".join(f"{_e(k)}&nbsp;<span class='muted'>×{v:,}</span>" for k, v in sorted(counts.items()))


def _ejections(ejections: list[dict[str, Any]]) -> str:
    if not ejections:
        return '<span class="muted">no</span>'
    return "<br>".join(
        f"<span class='bad'>ejected</span> at answer {int(e['answers']):,} ({_e(e.get('by') or '?')}, {_e(e['at'])}): "
        f"{_e(e['reason'])}, {_e(e['evidence'])}"
        for e in ejections
    )


def _watched(endpoint: dict[str, Any]) -> str:
    ways = endpoint.get("watched_by")
    if ways is None:  # a report from before the liveness monitor said
        return ""
    return f"<br><span class='muted'>watched by {_e(', '.join(ways)) if ways else 'nothing'}</span>"


def endpoint_table(report: dict[str, Any]) -> str:
    """HTML: one row per endpoint (answers, valid, quarantined and retried reasons, ejections), then the
    run's early stops."""
    endpoints = report.get("endpoints") or {}
    left_out = "".join(
        f"<p class='bad'>Left out in preflight: {_e(x['url'])} ({_e(x.get('by') or '?')}): {_e(x['reason'])}</p>"
        for x in report.get("left_out", [])
    )
    if not endpoints:
        return '<p class="muted">No per-endpoint counts were recorded.</p>' + left_out
    head = (
        "<thead><tr><th>endpoint</th><th class='n'>answers</th><th class='n'>valid</th><th>quarantined</th>"
        "<th>server faults (sent again, not stored)</th><th>lost requests (found, hedged)</th><th>ejected</th>"
        "</tr></thead>"
    )
    rows = [
        f"<tr><td>{_e(url)}</td><td class='n'>{e['answers']:,}</td><td class='n'>{e['valid']:,}</td>"
        f"<td>{_counts(e['quarantined'])}</td><td>{_counts(e['server_faults'])}</td>"
        f"<td>{_counts({k: v for k, v in (e.get('liveness') or {}).items() if v})}{_watched(e)}</td>"
        f"<td>{_ejections(e['ejections'])}</td></tr>"
        for url, e in endpoints.items()
    ]
    stops = "".join(f"<p class='bad'>Stopped early: {_e(s['message'])}</p>" for s in report.get("stops", []))
    note = (
        "<p class='muted'>Answers are counted per invocation (a run, a rerun, a shard task); a server-fault "
        "answer was sent again to another endpoint and never became a row (examples in the endpoints file of "
        "the manifest).</p>"
    )
    return f"<div class='scroll'><table>{head}<tbody>{''.join(rows)}</tbody></table></div>{left_out}{stops}{note}"
