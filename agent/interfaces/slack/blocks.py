"""Block Kit for an incident: what the Slack app answers in a thread and what a page shows.

Everything that came from outside crashcart's own words (a question, log lines, a diagnosis
summary that quotes them, a reason naming a job) goes out as `plain_text` or as rich-text
`text` elements, which Slack never reads as mrkdwn: a log line holding `<!channel>` or
`*bold*` shows as those characters and pings nobody. Only strings this module writes itself
(labels, counts, user ids Slack gave us) are mrkdwn. Each function renders one thing and
returns a list of blocks; `incident_blocks` puts them together.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from crashcart.agent.report import VERB

APPROVE_ACTION = "crashcart_approve"
REJECT_ACTION = "crashcart_reject"
TEXT_LIMIT = 2900
"""A section's text holds 3000 characters; keep room for the cut marker."""
EVIDENCE_LINES = 8
EVIDENCE_CHARS = 2800
STATUS_EMOJI = {
    "investigating": ":mag:", "awaiting_approval": ":raised_hand:", "remediated": ":white_check_mark:",
    "proposed": ":memo:", "escalated": ":rotating_light:", "investigation_failed": ":warning:", "closed": ":ok:",
}


def escape_mrkdwn(text: str) -> str:
    """The three characters Slack's mrkdwn needs escaped, so text can sit inside our own mrkdwn."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int = TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": _cut(text or " "), "emoji": False}


def plain_section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": plain(text)}


def context(mrkdwn: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": _cut(mrkdwn)}]}


def args_sha256(args: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(args, sort_keys=True, default=str).encode()).hexdigest()


def placeholder_blocks(question: str) -> list[dict[str, Any]]:
    """The first answer in a thread, posted before any investigation."""
    return [context(":mag: Looking into it…"), plain_section(question)]


def progress_blocks(question: str, state: dict[str, Any]) -> list[dict[str, Any]]:
    """The placeholder, updated in place while the investigation reads the cluster."""
    observations = state.get("observations") or []
    recent = ", ".join(dict.fromkeys(o.get("tool", "?") for o in observations[-6:]))
    where = "Diagnosing…" if state.get("diagnosis") else f"Investigating: {len(observations)} tool call(s) so far"
    blocks = [context(f":mag: {where}"), plain_section(question)]
    if recent:
        blocks.append({"type": "context", "elements": [plain(f"latest: {recent}")]})
    return blocks


def header_blocks(incident_id: str, status: str, cluster: str | None = None) -> list[dict[str, Any]]:
    emoji = STATUS_EMOJI.get(status, ":grey_question:")
    where = f" on {cluster}" if cluster else ""
    return [context(f"{emoji} *{escape_mrkdwn(status)}* · incident `{escape_mrkdwn(incident_id)}`{escape_mrkdwn(where)}")]


def diagnosis_blocks(diagnosis: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not diagnosis:
        return [plain_section("No diagnosis yet.")]
    line = (f"{diagnosis.get('label')} [{diagnosis.get('family')}], root cause "
            f"{diagnosis.get('root_cause') or 'unknown'}, confidence {diagnosis.get('confidence')}, "
            f"remedy {diagnosis.get('remedy')}")
    blocks = [plain_section(f"Diagnosis: {line}")]
    if diagnosis.get("summary"):
        blocks.append(plain_section(str(diagnosis["summary"])))
    if diagnosis.get("decided_by"):
        blocks.append({"type": "context", "elements": [plain(f"decided by {diagnosis['decided_by']}")]})
    return blocks


def evidence_blocks(evidence: list[str]) -> list[dict[str, Any]]:
    """Evidence lines as data: preformatted rich text, never parsed as mrkdwn."""
    lines, size = [], 0
    for line in evidence[:EVIDENCE_LINES]:
        line = _cut(str(line), 400)
        if size + len(line) > EVIDENCE_CHARS:
            break
        lines.append(line)
        size += len(line) + 1
    if not lines:
        return []
    more = len(evidence) - len(lines)
    text = "\n".join(lines) + (f"\n… and {more} more line(s)" if more > 0 else "")
    return [context("*Evidence*"),
            {"type": "rich_text", "elements": [{"type": "rich_text_preformatted",
                                                "elements": [{"type": "text", "text": text}]}]}]


def action_line(action: dict[str, Any]) -> str:
    args = action.get("args") or {}
    target = args.get("node") or args.get("job") or args.get("team") or args.get("to") or ""
    line = f"{action['tool']} {target}".strip() + f": {VERB.get(action['decision'], action['decision'])}"
    if action["decision"] in {"deny", "needs_approval"} and action.get("reason"):
        line += f" ({action['reason']})"
    if action.get("error"):
        line += f"; failed: {action['error']}"
    return line


def button_value(incident_id: str, action: dict[str, Any], policy_sha256: str) -> str:
    """What a button carries: exactly one action (tool, args by hash) of one incident under one policy."""
    return json.dumps({"incident": incident_id, "action": action["action_id"], "tool": action["tool"],
                       "args": args_sha256(action.get("args") or {}), "policy": policy_sha256},
                      separators=(",", ":"))


def approval_buttons(incident_id: str, action: dict[str, Any], policy_sha256: str) -> dict[str, Any]:
    value = button_value(incident_id, action, policy_sha256)
    what = action_line({**action, "decision": "needs_approval", "reason": None, "result": None, "error": None})
    return {
        "type": "actions", "block_id": f"approval:{action['action_id']}",
        "elements": [
            {"type": "button", "action_id": APPROVE_ACTION, "style": "primary", "value": value,
             "text": plain("Approve"),
             "confirm": {"title": plain("Approve this action?"), "text": plain(_cut(what, 290)),
                         "confirm": plain("Approve"), "deny": plain("Cancel")}},
            {"type": "button", "action_id": REJECT_ACTION, "style": "danger", "value": value, "text": plain("Reject")},
        ],
    }


def action_blocks(incident_id: str, actions: list[dict[str, Any]], policy_sha256: str | None) -> list[dict[str, Any]]:
    """Each write action with the guard's decision; Approve/Reject under each one that waits
    (only when the incident's policy hash is known: a button binds to it)."""
    if not actions:
        return []
    blocks: list[dict[str, Any]] = [context("*Actions*")]
    for a in actions:
        blocks.append(plain_section(action_line(a)))
        if a["decision"] == "needs_approval" and policy_sha256:
            blocks.append(approval_buttons(incident_id, a, policy_sha256))
    return blocks


def answered_blocks(slack_user: str, approver: str, approved: bool, action: dict[str, Any]) -> list[dict[str, Any]]:
    """Who answered which action from Slack, and what came of it."""
    verb = "Approved" if approved else "Rejected"
    return [context(f"{verb} by <@{escape_mrkdwn(slack_user)}> ({escape_mrkdwn(approver)})"),
            plain_section(action_line(action))]


def incident_blocks(incident_id: str, status: str, diagnosis: dict[str, Any] | None,
                    actions: list[dict[str, Any]], *, policy_sha256: str | None = None,
                    cluster: str | None = None, tool_calls: int | None = None) -> list[dict[str, Any]]:
    """An incident as one message: status, diagnosis, evidence, actions (buttons where one waits)."""
    blocks = header_blocks(incident_id, status, cluster) + diagnosis_blocks(diagnosis)
    blocks += evidence_blocks(list((diagnosis or {}).get("evidence") or []))
    blocks += action_blocks(incident_id, actions, policy_sha256)
    if tool_calls is not None:
        blocks.append(context(f"Investigated with {tool_calls} tool call(s)."))
    return blocks[:50]  # Slack's limit per message


def incident_text(incident_id: str, status: str, diagnosis: dict[str, Any] | None) -> str:
    """The plain fallback Slack shows in notifications and to clients without blocks."""
    label = (diagnosis or {}).get("label") or "no diagnosis yet"
    return _cut(f"crashcart {incident_id}: {status}: {label}", 300)


# --- a page: the message `watch` keeps up to date for an incident (agent/notify/slack.py) -----

def group_mention(group: str | None) -> str:
    """A user group's mention (`<!subteam^S0123>`), which notifies its members; empty without one."""
    return f"<!subteam^{group}>" if group else ""


def answers_blocks(answers: list[str]) -> list[dict[str, Any]]:
    """Who answered what: `node_drain gpu-b07: approved by alice` (names are data: plain text)."""
    return [{"type": "context", "elements": [plain("; ".join(answers))]}] if answers else []


def page_blocks(incident_id: str, status: str, diagnosis: dict[str, Any] | None, actions: list[dict[str, Any]],
                *, cluster: str, mention: str = "", answers: list[str] = (), waits_for: str | None = None,
                policy_sha256: str | None = None) -> list[dict[str, Any]]:
    """An incident `watch` opened, for the channel that is paged: the incident (with Approve/Reject
    on what waits, bound to the incident's policy like in a chat thread), who answered, and who
    is needed."""
    blocks = ([context(f":rotating_light: {mention}")] if mention else [])
    blocks += incident_blocks(incident_id, status, diagnosis, actions, cluster=cluster, policy_sha256=policy_sha256)
    blocks += answers_blocks(list(answers))
    if waits_for:
        blocks.append(context(f"Waiting for {escape_mrkdwn(waits_for)}: `crashcart approve {escape_mrkdwn(incident_id)}`"))
    blocks.append(context(f"`crashcart incidents show {escape_mrkdwn(incident_id)}`"))
    return blocks[:50]


def page_text(incident_id: str, status: str, diagnosis: dict[str, Any] | None, mention: str = "") -> str:
    """The page's fallback text: the incident_text, with the group mention that notifies people."""
    return f"{mention} {escape_mrkdwn(incident_text(incident_id, status, diagnosis))}".strip()


def status_change_text(before: str | None, status: str, actions: list[dict[str, Any]], mention: str = "") -> str:
    """The thread reply when a paged incident moves on: from what to what, and each action now."""
    moved = f"{before} → {status}" if before and before != status else status
    lines = [f"Now {moved}."] + [f"• {action_line(a)}" for a in actions]
    return f"{mention} {escape_mrkdwn(_cut(chr(10).join(lines)))}".strip()


def notification_text(text: str, mention: str = "") -> str:
    """An escalation or notification (agent/notify.Notification.text()) as a message: escaped."""
    return f"{mention} {escape_mrkdwn(_cut(text))}".strip()
