"""`crashcart eval --html`: one self-contained page (inline CSS and SVG, no scripts, no fetches)."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:1100px;color:#1d2330;padding:0 1rem}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #dde}
.kpis{display:flex;gap:1rem;flex-wrap:wrap}.kpi{background:#f3f5f9;border-radius:8px;padding:.6rem 1rem}
.kpi b{display:block;font-size:1.4rem}table{border-collapse:collapse;margin:.5rem 0}
td,th{border:1px solid #dde;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f3f5f9}.ok{color:#17803d}.bad{color:#b42318}.dim{color:#8a93a6}
details{border:1px solid #dde;border-radius:6px;margin:.5rem 0;padding:.4rem .8rem}
summary{cursor:pointer;font-weight:600}pre{background:#f7f8fa;padding:.5rem;overflow-x:auto;font-size:12px;
white-space:pre-wrap}.allow{color:#17803d}.dry_run{color:#0b6bcb}.needs_approval{color:#a15c00}.deny{color:#b42318}
"""
BAR_W, ROW_H = 360, 22
MAX_TRANSCRIPT_LINES = 14


def _bars(title: str, rows: dict[str, dict[str, int]]) -> str:
    """Horizontal bars, passed over total, one per row: the scorecard as a picture."""
    height = ROW_H * len(rows) + 10
    parts = [f'<svg role="img" aria-label="{escape(title)}" width="{BAR_W + 260}" height="{height}">']
    for i, (name, r) in enumerate(rows.items()):
        y = 5 + i * ROW_H
        share = r["passed"] / r["total"] if r["total"] else 0
        color = "#17803d" if share == 1 else ("#d08700" if share >= 0.8 else "#b42318")
        parts += [
            f'<text x="0" y="{y + 15}" font-size="13">{escape(name)}</text>',
            f'<rect x="120" y="{y + 3}" width="{BAR_W}" height="{ROW_H - 8}" fill="#eceff4"/>',
            f'<rect x="120" y="{y + 3}" width="{BAR_W * share:.1f}" height="{ROW_H - 8}" fill="{color}"/>',
            f'<text x="{BAR_W + 130}" y="{y + 15}" font-size="13">{r["passed"]}/{r["total"]} ({share:.0%})</text>',
        ]
    return f"<h3>{escape(title)}</h3>" + "".join(parts) + "</svg>"


CHART_W, CHART_H = 600, 160
SERIES_COLORS = {"waiting": "#b42318", "running": "#0b6bcb"}


def _hour_chart(chart: dict[str, Any]) -> str:
    """Bars per hour of day, one color per series, and the capacity as a line: a capacity answer's figures."""
    series = chart.get("series") or {}
    hours = chart.get("hours") or list(range(24))
    capacity = chart.get("capacity") or 0
    top = max([capacity] + [v for values in series.values() for v in values] + [1])
    slot = CHART_W / len(hours)
    bar = slot / (len(series) + 1)
    parts = [f'<svg role="img" aria-label="{escape(chart.get("title", "chart"))}" width="{CHART_W + 60}" '
             f'height="{CHART_H + 40}">']
    for i, (name, values) in enumerate(series.items()):
        color = SERIES_COLORS.get(name, "#8a93a6")
        for h, v in zip(hours, values):
            height = CHART_H * v / top
            parts.append(f'<rect x="{40 + h * slot + i * bar:.1f}" y="{10 + CHART_H - height:.1f}" width="{bar:.1f}" '
                         f'height="{height:.1f}" fill="{color}"><title>{h:02d}:00 {escape(name)} {v:g}</title></rect>')
        parts.append(f'<text x="{60 + i * 110}" y="{CHART_H + 36}" font-size="12" fill="{color}">{escape(name)}</text>')
    if capacity:
        y = 10 + CHART_H - CHART_H * capacity / top
        parts.append(f'<line x1="40" x2="{40 + CHART_W}" y1="{y:.1f}" y2="{y:.1f}" stroke="#1d2330" stroke-dasharray="4 3"/>'
                     f'<text x="{44 + CHART_W}" y="{y + 4:.1f}" font-size="11">{capacity:g}</text>')
    for h in hours[::3]:
        parts.append(f'<text x="{40 + h * slot:.1f}" y="{CHART_H + 22}" font-size="11">{h:02d}</text>')
    parts.append(f'<text x="0" y="14" font-size="11">{top:g}</text><text x="0" y="{CHART_H + 10}" font-size="11">0</text>')
    return f"<h3>{escape(chart.get('title', ''))}</h3>" + "".join(parts) + "</svg>"


def _charts(report) -> list[str]:
    charted = [r for r in report.scenarios if r.chart]
    if not charted:
        return []
    html = ["<h2>Capacity answers</h2>"]
    for r in charted:
        html.append(f"<p><b>{escape(r.id)}</b>: {escape(r.summary or '')}</p>")
        html.append(_hour_chart(r.chart))
    return html


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _trim(text: str) -> str:
    lines = text.rstrip().splitlines()
    if len(lines) > MAX_TRANSCRIPT_LINES:
        lines = lines[:6] + [f"... {len(lines) - 12} more lines ..."] + lines[-6:]
    return escape("\n".join(lines))


def _failure(r) -> str:
    actions = "".join(
        f'<li><code>{escape(a.tool)}</code> {escape(str({k: v for k, v in a.args.items() if k not in ("reason", "evidence", "summary")}))}'
        f' <span class="{a.decision}">{a.decision}</span></li>' for a in r.actions
    ) or "<li class=dim>none</li>"
    calls = "".join(
        f"<p><b>#{o['seq']} {escape(o['tool'])}</b>({escape(', '.join(f'{k}={v!r}' for k, v in o['args'].items()))})</p>"
        f"<pre>{_trim(o.get('text') or '') if o.get('ok') else escape('error: ' + str(o.get('error')))}</pre>"
        for o in r.transcript
    )
    evidence = "".join(f"<li><code>{escape(e)}</code></li>" for e in r.evidence[:8])
    return (
        f"<details><summary>{escape(r.id)} <span class=dim>({escape(r.family or '?')}, {escape(r.backend or '?')})</span></summary>"
        f"<p class=bad>{'<br>'.join(escape(f) for f in r.failures)}</p>"
        + (f"<p class=bad>{escape(r.error)}</p>" if r.error else "")
        + f"<p>Diagnosis <b>{escape(str(r.diagnosis))}</b> / {escape(str(r.remedy))} / {escape(str(r.root_cause))}"
        f" (confidence {r.confidence})</p><ul>{evidence}</ul><p>Actions:</p><ul>{actions}</ul>{calls}</details>"
    )


def render_html(report) -> str:
    s = report.summary
    holdout = s.by_split.get("holdout")
    kpis = [
        ("scenarios passed", f"{s.passed}/{s.total} ({s.pass_rate:.1%})"),
        ("forbidden actions", str(s.violations)),
        ("errors", str(s.errors)),
        ("suite time", f"{s.duration_s:.1f} s"),
        ("median tool calls", f"{s.median_tool_calls:g}"),
    ]
    if s.budgeted:
        kpis.append(("over budget", f"{s.over_budget}/{s.budgeted} (median {s.median_budgeted_calls:g} of {s.median_budget:g})"))
    if holdout:
        kpis.append(("holdout", f"{holdout['passed']}/{holdout['total']}"))
    if report.logs is not None:
        kpis.append(("log verdicts (family)", f"{report.logs.summary.family_accuracy:.1%}"))
    html = [
        "<!doctype html><html><head><meta charset=utf-8><title>crashcart eval</title>",
        f"<style>{CSS}</style></head><body><h1>crashcart eval</h1><div class=kpis>",
        *(f"<div class=kpi>{escape(k)}<b>{escape(v)}</b></div>" for k, v in kpis),
        "</div><h2>Scorecard</h2>",
        _bars("by family", s.by_family), _bars("by backend", s.by_backend),
    ]
    if len(s.by_split) > 1:
        html.append(_bars("by split (the holdout was written blind, before its rules; its failures are fixed only by more general rules)", s.by_split))
    if report.logs is not None:
        from crashcart.evals.logcases import confusion_rows

        ls = report.logs.summary
        html.append(f"<h2>Log verdicts</h2><p>{ls.total} logs, {ls.real_excerpts} real excerpts from public "
                    f"reports: family right {ls.family_accuracy:.1%}, remedy right {ls.remedy_accuracy:.1%}.</p>")
        html.append(_table(["family", "family right", "remedy right"],
                           [[escape(f), f"{r['family_ok']}/{r['total']}", f"{r['remedy_ok']}/{r['total']}"]
                            for f, r in ls.by_family.items()]))
        cols, rows = confusion_rows(ls)
        html.append("<h3>Confusion matrix (expected down, diagnosed across)</h3>")
        html.append(_table(["expected"] + cols, [[escape(r[0])] + [
            f"<b>{v}</b>" if cols[i] == r[0] and v else (f"<span class=bad>{v}</span>" if v else "<span class=dim>0</span>")
            for i, v in enumerate(r[1:])] for r in rows]))
        wrong = [c for c in report.logs.cases if not c.family_ok]
        if wrong:
            html.append("<h3>Logs read wrong</h3>" + _table(
                ["log", "expected", "got", "source"],
                [[escape(c.path), escape("/".join(c.expected_family)), escape(f"{c.family} / {c.diagnosis}" if not c.error else c.error),
                  escape(c.source or "")] for c in wrong]))
    html += _charts(report)
    failed = [r for r in report.scenarios if not r.passed]
    html.append(f"<h2>Scenarios not passed ({len(failed)})</h2>")
    html += [_failure(r) for r in failed] or ["<p class=ok>Every scenario passed.</p>"]
    html.append("</body></html>")
    return "\n".join(html)


def write_html(report, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(report), encoding="utf-8")
