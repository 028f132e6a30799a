"""The eval scorecard: a table by family, one by backend, and the failures."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

BAR_WIDTH = 20


def _bar(passed: int, total: int) -> Text:
    filled = round(BAR_WIDTH * passed / total) if total else 0
    style = "green" if passed == total else ("yellow" if passed / max(total, 1) >= 0.8 else "red")
    return Text("█" * filled + "░" * (BAR_WIDTH - filled), style=style)


def _table(title: str, rows: dict[str, dict[str, int]]) -> Table:
    table = Table(title=title)
    table.add_column(title.split()[-1])
    table.add_column("passed", justify="right")
    table.add_column("", no_wrap=True)
    table.add_column("errors", justify="right")
    for name, row in rows.items():
        table.add_row(Text(name), f"{row['passed']}/{row['total']}", _bar(row["passed"], row["total"]),
                      str(row["errors"]) if row["errors"] else "")
    return table


def render_scorecard(console: Console, report) -> None:
    s = report.summary
    console.print(_table("scorecard by family", s.by_family))
    console.print(_table("scorecard by backend", s.by_backend))
    if len(s.by_split) > 1:
        console.print(_table("scorecard by split", s.by_split))
    if s.model_by_family:
        console.print(_model_table(s.model_by_family))
        _handed_over(console, report.scenarios)
    failed = [r for r in report.scenarios if not r.passed]
    if failed:
        table = Table(title="not passed")
        for col in ("scenario", "got", "why"):
            table.add_column(col, overflow="fold")
        for r in failed:
            got = r.error or f"{r.diagnosis} / {r.remedy} / {r.root_cause}"
            # Ids, errors and failures quote files and logs: Text, never markup.
            table.add_row(Text(r.id), Text(got), Text("; ".join(r.failures[:4])))
        console.print(table)
    if report.logs is not None:
        render_log_scores(console, report.logs)
    console.print(budget_line(s))
    style = "bold green" if s.pass_rate >= 0.95 and not s.violations else "bold red"
    console.print(Text(
        f"{s.passed}/{s.total} passed ({s.pass_rate:.1%}), {s.violations} forbidden actions, "
        f"{s.errors} errors, {s.duration_s:.2f} s", style=style))


def budget_line(s) -> str:
    """Tool calls against the budgets scenarios set (over budget is a failure)."""
    line = f"median {s.median_tool_calls:g} tool calls per scenario"
    if s.budgeted:
        line += (f"; {s.budgeted} scenarios set a budget: median {s.median_budgeted_calls:g} calls against "
                 f"a median budget of {s.median_budget:g}, {s.over_budget} over budget")
    return line


def render_log_scores(console: Console, logs) -> None:
    from crashcart.evals.logcases import confusion_rows

    s = logs.summary
    table = Table(title="log verdicts (crashcart diagnose) by expected family")
    for col in ("family", "family right", "", "remedy right"):
        table.add_column(col, justify="right" if col.endswith("right") else "left")
    for name, row in s.by_family.items():
        table.add_row(Text(name), f"{row['family_ok']}/{row['total']}", _bar(row["family_ok"], row["total"]),
                      f"{row['remedy_ok']}/{row['total']}")
    console.print(table)
    cols, rows = confusion_rows(s)
    matrix = Table(title="confusion matrix: expected family (rows) x diagnosed family (columns)")
    matrix.add_column("expected")
    for c in cols:
        matrix.add_column(c[:8], justify="right")
    for row in rows:
        matrix.add_row(row[0], *[Text(str(v), style="bold" if v and cols[i] == row[0] else ("red" if v else "dim"))
                                 for i, v in enumerate(row[1:])])
    console.print(matrix)
    console.print(f"log verdicts: family {s.family_accuracy:.1%}, remedy {s.remedy_accuracy:.1%} "
                  f"right on {s.total} logs ({s.real_excerpts} real excerpts), {s.errors} errors")


def _model_table(rows: dict[str, dict[str, float]]) -> Table:
    table = Table(title="the model, by family")
    for col in ("family", "decided", "requests", "tokens in", "tokens out", "cost $", "model s", "tool calls"):
        table.add_column(col, justify="left" if col == "family" else "right")
    total = {k: 0.0 for k in next(iter(rows.values()))}
    for name, r in [*rows.items(), ("all", total)]:
        if name != "all":
            for k, v in r.items():
                total[k] += v
        table.add_row(name, f"{int(r['by_model'])}/{int(r['scenarios'])}", str(int(r["requests"])),
                      f"{int(r['tokens_in']):,}", f"{int(r['tokens_out']):,}", f"{r['cost_usd']:.4f}",
                      f"{r['model_latency_ms'] / 1000:.1f}", str(int(r["tool_calls"])))
    return table


def _handed_over(console: Console, scenarios) -> None:
    """With `auto`, which incidents the playbooks handed to the model, and why."""
    if not any((r.decided_by or "").startswith("playbook:") for r in scenarios):
        return  # not auto: every incident (or none) was the model's
    handed = [r for r in scenarios if (r.decided_by or "").startswith("llm:")]
    table = Table(title=f"handed to the model ({len(handed)} of {len(scenarios)})")
    for col in ("scenario", "decided by, and why", "passed"):
        table.add_column(col, overflow="fold")
    for r in handed:
        table.add_row(Text(r.id), Text(r.decided_by), Text("yes" if r.passed else "no", style="green" if r.passed else "red"))
    console.print(table)
