"""Render an incident for a person: each tool call, what it returned, the guard, the verdict."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

DECISION_STYLE = {"allow": "green", "dry_run": "cyan", "needs_approval": "yellow", "deny": "red"}
MAX_OUTPUT_LINES = 12


def args_text(args: dict[str, Any]) -> str:
    shown = {k: v for k, v in args.items() if k not in {"reason", "evidence", "summary"}}
    return ", ".join(f"{k}={v!r}" for k, v in shown.items())


def _trim(text: str, limit: int = MAX_OUTPUT_LINES) -> str:
    lines = text.rstrip().splitlines()
    if len(lines) <= limit:
        return "\n".join(lines)
    head = lines[: limit // 2]
    tail = lines[-(limit - len(head)):]
    return "\n".join(head + [f"   ... {len(lines) - len(head) - len(tail)} more lines ..."] + tail)


def render_header(console: Console, trigger: dict[str, Any], title: str) -> None:
    # Titles, chat text, logs and ids come from outside: Text, never markup.
    console.rule(Text(title, style="bold"))
    console.print(Text.assemble(("trigger", "bold"), f" {trigger.get('kind')}",
                                *[f"  {k}={trigger[k]!r}" for k in ("job", "node", "text") if trigger.get(k)]))


def render_incident(console: Console, state: dict[str, Any], title: str = "", shown_live: bool = False) -> None:
    """`shown_live`: the header and the investigation were printed as they happened (LiveTurns)."""
    if not shown_live:
        render_header(console, state.get("trigger") or {}, title or state.get("incident_id", "incident"))
    if not shown_live and any(n.get("kind") in {"turn", "decided"} for n in state.get("policy_log") or []):
        from crashcart.agent.interfaces.model_turns import render_model_turns

        render_model_turns(console, state, _trim)
    for obs in [] if state.get("policy_log") or shown_live else state.get("observations") or []:
        head = Text(f"#{obs['seq']:>2} {obs['tool']}({args_text(obs.get('args') or {})})", style="bold blue")
        body = Text(_trim(obs.get("text") or "") if obs.get("ok") else f"error: {obs.get('error')}",
                    style="" if obs.get("ok") else "red")
        console.print(head)
        if body.plain:
            console.print(body, style="dim" if obs.get("ok") else None, highlight=False)
    d = state.get("diagnosis") or {}
    if d:
        lines = [
            Text.assemble(("diagnosis ", "bold"), (f"{d.get('label')}", "bold magenta"),
                          f"  family={d.get('family')}  root cause={d.get('root_cause')}  "
                          f"remedy={d.get('remedy')}  confidence={d.get('confidence')}"),
            Text(d.get("summary") or ""),
        ]
        if d.get("decided_by"):
            lines.append(Text(f"decided by {d['decided_by']}", style="cyan"))
        if d.get("evidence"):
            lines.append(Text("evidence:", style="bold"))
            lines += [Text(f"  {e}", style="yellow") for e in d["evidence"][:8]]
        if d.get("ruled_out"):
            lines.append(Text(f"ruled out: {'; '.join(d['ruled_out'])}", style="dim"))
        if d.get("candidates"):
            lines.append(Text(f"also considered: {', '.join(d['candidates'])}", style="dim"))
        console.print(Panel(Group(*lines), title="diagnosis", border_style="magenta"))
    actions = state.get("actions") or []
    if actions:
        table = Table(title="write actions through the guard", show_lines=False)
        for col in ("tool", "args", "decision", "why"):
            table.add_column(col, overflow="fold")
        for a in actions:
            style = DECISION_STYLE.get(a["decision"], "")
            why = a.get("error") or a.get("reason") or ""
            if (a.get("result") or {}).get("message"):
                # What acting did, so a person sees the action ran (not only that it was allowed).
                why += f"\nexecuted: {a['result']['message']}"
            table.add_row(Text(a["tool"]), Text(args_text(a.get("args") or {})), Text(a["decision"], style=style), Text(why))
        console.print(table)
    status = state.get("status") or ""
    meaning = {"proposed": "  (proposed, not done: nothing was changed)",
               "investigation_failed": "  (could not investigate: nothing is known; escalated)"}.get(status, "")
    console.print(Text.assemble(("status", "bold"), f" {status}{meaning}"))
