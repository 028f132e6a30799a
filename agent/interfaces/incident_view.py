"""One incident as the store remembers it, for a person: `incidents show` and `watch`'s lines.

Everything printed here came from outside (logs, chat, ids, paths): it goes to Rich as Text,
never as markup, so `[rank0]` shows and `[/red]` in a chat message is only text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from crashcart.agent.interfaces.transcript import DECISION_STYLE, args_text

WRITE_DONE = {"resubmit", "node_drain", "node_resume", "cancel_job", "escalate", "notify"}
# What each end state means to someone reading it later.
STATUS_MEANING = {
    "proposed": "proposed, not done: observe/dry-run mode; nothing was changed on the cluster",
    "investigation_failed": "could not investigate: the cluster failed the calls it needed; nothing is known",
    "awaiting_approval": "waiting for a person to approve",
    "remediated": "remediated: the actions below ran",
    "escalated": "escalated to a team",
    "closed": "closed: nothing to do",
}


@dataclass
class ActionView:
    action_id: str
    tool: str
    args: dict[str, Any]
    decision: str
    reason: str
    rule: str | None
    approvals: list[str] = field(default_factory=list)
    """'alice approved' / 'bob rejected', in order."""
    answered_as: list[str] = field(default_factory=list)
    """Beside each of `approvals`, the account it came from: 'Slack U0ALICE01', 'OS user alice' or ''."""
    result: str | None = None
    deliveries: list[str] = field(default_factory=list)

    @property
    def what(self) -> str:
        a = self.args
        return f"{self.tool} {a.get('node') or a.get('job') or a.get('team') or a.get('to') or ''}".strip()


def action_views(detail: Any, deliveries: list[Any] = ()) -> list[ActionView]:
    """Each write action once, with its latest decision, who answered it and what running it did."""
    views: dict[str, ActionView] = {}
    for d in detail.decisions:
        views[d.action_id] = ActionView(d.action_id, d.tool, d.args, d.decision, d.reason, d.rule)
    for ap in detail.approvals:
        if ap.action_id in views:
            views[ap.action_id].approvals.append(f"{ap.approver} {'approved' if ap.approved else 'rejected'}")
            views[ap.action_id].answered_as.append(_account(ap, detail.approval_attempts))
    for act in detail.actions:
        if act.action_id in views:
            r = act.result or {}
            views[act.action_id].result = r.get("error") and f"failed: {r['error']}" or r.get("message") or "done"
    tries: dict[tuple[str, str], list[Any]] = {}
    for dl in deliveries:
        if dl.action_id in views:
            tries.setdefault((dl.action_id, dl.notifier), []).append(dl)
    for (action_id, notifier), rows in tries.items():
        views[action_id].deliveries.append(f"{notifier}: {_delivery(rows)}")
    return list(views.values())


def _delivery(rows: list[Any]) -> str:
    """One notifier's tries at one action (watch retries a dead letter at every poll), as one line."""
    failed = [r for r in rows if r.status != "delivered"]
    if len(failed) < len(rows):
        return f"delivered (after {len(failed)} failed {'try' if len(failed) == 1 else 'tries'})" if failed else "delivered"
    attempts = sum(r.attempts for r in rows)
    over = f" over {len(rows)} tries" if len(rows) > 1 else ""
    return f"NOT delivered after {attempts} attempt(s){over}: {rows[-1].error}"


def _account(approval: Any, attempts: list[Any]) -> str:
    """Where an answer came from. The guard journals the accepted attempt (with the Slack user id of
    a signed click) at the same instant as the approval it records."""
    slack = next((t.slack_user for t in attempts if t.outcome == "accepted" and t.slack_user
                  and (t.action_id, t.approver, t.at) == (approval.action_id, approval.approver, approval.at)), None)
    return f"Slack {slack}" if slack else f"OS user {approval.os_user}" if approval.os_user else ""


def approvers_for(view: ActionView, policy: Any = None) -> str:
    """Who may approve a waiting action: the incident's policy tier its decision named."""
    m = re.fullmatch(r"approval\[(\d+)\]", view.rule or "")
    if policy is not None and m and int(m.group(1)) < len(policy.approval):
        names = policy.approvers_of(policy.approval[int(m.group(1))])
        return ", ".join(names) if names else "nobody (the policy names no approver)"
    found = re.search(r"approval from (.+?)[.;]", view.reason)
    return found.group(1) if found else "a person the policy names"


def watch_lines(incident: Any, views: list[ActionView], approve_command: str, policy: Any = None) -> list[Text]:
    """What `watch` prints for one incident: what it did, what it proposed, what waits for whom."""
    label = (incident.diagnosis or {}).get("label", "") if isinstance(incident.diagnosis, dict) else ""
    lines = [Text.assemble((incident.id, "bold"), f"  {incident.status:20} ", (label, "magenta"))]
    for v in views:
        if v.decision == "allow" and v.result:
            lines.append(Text(f"    did: {v.what}: {v.result}", style="green"))
        elif v.decision == "needs_approval":
            lines.append(Text(f"    waits for {approvers_for(v, policy)} to approve {v.what}", style="yellow"))
        elif v.decision == "dry_run":
            lines.append(Text(f"    proposed, not done: {v.what}", style="cyan"))
        elif v.decision == "deny":
            lines.append(Text(f"    denied: {v.what} ({v.reason})", style="red"))
        for d in v.deliveries:
            if "NOT delivered" in d:
                lines.append(Text(f"    {d}", style="red"))
    if any(v.decision == "needs_approval" for v in views):
        lines.append(Text(f"    approve: {approve_command}", style="bold"))
    return lines


def render_incident_detail(console: Console, detail: Any, history: list[tuple[str, Any]],
                           deliveries: list[Any] = (), policy_notes: list[dict[str, Any]] = ()) -> None:
    inc = detail.incident
    console.rule(Text(f"{inc.id}  ({inc.cluster})", style="bold"))
    console.print(Text.assemble(("status ", "bold"), (inc.status, "bold"), f"  {STATUS_MEANING.get(inc.status, '')}"))
    console.print(Text(f"opened {inc.opened_at:%Y-%m-%d %H:%M:%S}, last change {inc.updated_at:%Y-%m-%d %H:%M:%S}, "
                       f"source {inc.source}", style="dim"))
    t = inc.trigger or {}
    console.print(Text.assemble(("trigger ", "bold"), str(t.get("kind")),
                                *[f"  {k}={t[k]!r}" for k in ("job", "node", "text") if t.get(k)]))
    d = inc.diagnosis or {}
    if d:
        console.print(Text.assemble(("diagnosis ", "bold"), (str(d.get("label")), "magenta"),
                                    f"  family={d.get('family')}  root cause={d.get('root_cause')}  "
                                    f"remedy={d.get('remedy')}  confidence={d.get('confidence')}"))
        if d.get("summary"):
            console.print(Text(f"  {d['summary']}"))
        if d.get("evidence"):
            console.print(Text("evidence", style="bold"))
            for e in d["evidence"][:12]:
                console.print(Text(f"  | {e}", style="yellow"))
    if any(n.get("kind") == "turn" for n in policy_notes):
        _model_investigation(console, detail, list(policy_notes))
    failed = [c for c in detail.tool_calls if not c.ok]
    console.print(Text(f"tool calls: {len(detail.tool_calls)}, {len(failed)} failed"))
    for c in failed[:8]:
        console.print(Text(f"  #{c.seq} {c.tool}({args_text(c.args)}): {c.error}", style="red"))
    views = action_views(detail, deliveries)
    if views:
        table = Table(title="write actions")
        for col in ("tool", "args", "decision", "why", "approver", "result"):
            table.add_column(col, overflow="fold")
        for v in views:
            result = v.result or ("proposed, not done" if v.decision == "dry_run" else "not run")
            result = "\n".join([result, *v.deliveries])
            table.add_row(Text(v.tool), Text(args_text(v.args)), Text(v.decision, style=DECISION_STYLE.get(v.decision, "")),
                          Text(v.reason), Text(_answers(v) or "-"), Text(result))
        console.print(table)
    else:
        console.print(Text("no write actions"))
    _refused_attempts(console, detail)
    console.print(Text("life: " + " -> ".join(f"{status} ({at:%H:%M:%S})" for status, at in history), style="dim"))


def _answers(view: ActionView) -> str:
    return "; ".join(f"{a} ({who})" if who else a for a, who in zip(view.approvals, view.answered_as))


def _refused_attempts(console: Console, detail: Any) -> None:
    """Every answer the guard or the Slack app turned away: nothing it changed, all of it journaled."""
    refused = [t for t in detail.approval_attempts if t.outcome == "refused"]
    if not refused:
        return
    table = Table(title="refused approval attempts")
    for col in ("when", "answer", "approver", "Slack user", "OS user", "why refused"):
        table.add_column(col, overflow="fold")
    for t in refused:
        answer = "approve" if t.approved else "reject" if t.approved is not None else "-"
        action = " ".join(x for x in (t.tool, t.action_id) if x) or "-"
        table.add_row(Text(f"{t.at:%Y-%m-%d %H:%M:%S}"), Text(f"{answer} {action}"), Text(t.approver or "-"),
                      Text(t.slack_user or "-"), Text(t.os_user or "-"), Text(t.reason or "-"))
    console.print(table)


def _model_investigation(console: Console, detail: Any, notes: list[dict[str, Any]]) -> None:
    """The model's turns as the store kept them, each tool call beside the excerpt of its result."""
    from crashcart.agent.interfaces.model_turns import render_model_turns
    from crashcart.agent.interfaces.transcript import _trim

    # The journal holds one row per observation, in order: the turns' indexes point into it.
    observations = [{"seq": c.seq, "tool": c.tool, "args": c.args, "ok": c.ok, "text": c.output_excerpt or "",
                     "error": c.error} for c in detail.tool_calls]
    console.print(Text("the model's investigation", style="bold"))
    render_model_turns(console, {"policy_log": notes, "observations": observations}, _trim)
