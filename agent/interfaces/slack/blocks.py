"""Block Kit for an incident, in one place for the Slack app and the `slack` notifier.

Everything that came from outside (log lines, summaries, job and node names, chat text) goes
into `plain_text` objects or rich-text `text` elements, which Slack never parses: `*bold*`,
`<!channel>` or `<@U123>` in a log line stays text. Only crashcart's own labels use mrkdwn, and
the fallback `text` (which Slack does parse) is escaped as Slack's docs ask (& < >).
"""

from __future__ import annotations

from typing import Any, Iterable

# Block Kit's limits: a plain_text field holds 2000 characters, section text 3000, a message 50 blocks.
FIELD_CHARS = 2000
SECTION_CHARS = 3000
EVIDENCE_LINES = 12
EVIDENCE_LINE_CHARS = 300

STATUS_EMOJI = {
    "detected": ":large_yellow_circle:", "investigating": ":mag:", "awaiting_approval": ":hourglass_flowing_sand:",
    "remediated": ":white_check_mark:", "proposed": ":memo:", "escalated": ":rotating_light:",
    "investigation_failed": ":warning:", "closed": ":white_circle:",
}


def escape(text: Any) -> str:
    """Text for a place Slack parses as mrkdwn, shown as typed (Slack's three escapes)."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def clip(text: Any, limit: int) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plain(text: Any, limit: int = FIELD_CHARS) -> dict[str, Any]:
    return {"type": "plain_text", "text": clip(text, limit) or " ", "emoji": False}


def group_mention(group: str | None) -> str:
    """A user group's mention (`<!subteam^S0123>`), which pages its members; empty without one."""
    return f"<!subteam^{group}>" if group else ""


def status_line(incident: Any) -> str:
    """`:rotating_light: *escalated* · inc-… on gpu-prod` (mrkdwn: ids escaped)."""
    emoji = STATUS_EMOJI.get(incident.status, ":grey_question:")
    return f"{emoji} *{escape(incident.status.replace('_', ' '))}* · `{escape(incident.id)}` on `{escape(incident.cluster)}`"


def trigger_text(trigger: dict[str, Any] | None) -> str:
    t = trigger or {}
    what = " ".join(f"{k} {t[k]}" for k in ("job", "node") if t.get(k))
    return f"{t.get('kind') or 'unknown trigger'}{': ' + what if what else ''}"


def diagnosis_fields(diagnosis: dict[str, Any] | None) -> list[dict[str, Any]]:
    d = diagnosis or {}
    if not d:
        return [plain("Diagnosis: none yet")]
    return [plain(f"Diagnosis: {d.get('label')} [{d.get('family')}]"),
            plain(f"Root cause: {d.get('root_cause') or 'unknown'}"),
            plain(f"Remedy: {d.get('remedy') or 'none'}"),
            plain(f"Confidence: {d.get('confidence')}")]


def evidence_block(lines: Iterable[Any]) -> dict[str, Any] | None:
    """The evidence as preformatted rich text: each line verbatim, never parsed."""
    lines = [clip(str(line).rstrip(), EVIDENCE_LINE_CHARS) for line in lines][:EVIDENCE_LINES]
    if not lines:
        return None
    return {"type": "rich_text", "elements": [
        {"type": "rich_text_preformatted", "elements": [{"type": "text", "text": "\n".join(lines)}]}]}


def action_line(view: Any, approvers: str | None = None) -> str:
    """One write action as a person reads it: what, and what became of it."""
    what = view.what
    if view.decision == "allow":
        who = f" (approved by {', '.join(a.removesuffix(' approved') for a in view.approvals)})" if any(
            a.endswith(" approved") for a in view.approvals) else ""
        return f"done: {what}: {view.result}{who}" if view.result else f"allowed, not run yet: {what}"
    if view.decision == "needs_approval":
        return f"waits for {approvers or 'a person the policy names'} to approve: {what}"
    if view.decision == "dry_run":
        return f"proposed, not done (dry run): {what}"
    rejected = [a for a in view.approvals if a.endswith(" rejected")]
    return f"rejected by {rejected[-1].removesuffix(' rejected')}: {what}" if rejected else f"refused: {what} ({view.reason})"


def actions_section(title: str, lines: list[str]) -> dict[str, Any] | None:
    if not lines:
        return None
    return {"type": "section", "text": plain(f"{title}\n" + "\n".join(f"• {line}" for line in lines), SECTION_CHARS)}


def incident_blocks(incident: Any, views: list[Any], *, mention: str = "",
                    approvers: Any = None, footer: str | None = None) -> list[dict[str, Any]]:
    """The incident as one message: status, summary, diagnosis, evidence, what it did, what waits.
    `views`: agent/interfaces/incident_view.ActionView; `approvers(view)`: who may approve one."""
    d = incident.diagnosis or {}
    head = status_line(incident) + (f" {mention}" if mention else "")
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": head}},
        {"type": "section", "text": plain(d.get("summary") or f"Investigating {trigger_text(incident.trigger)}", SECTION_CHARS),
         "fields": [plain(f"Trigger: {trigger_text(incident.trigger)}"), *diagnosis_fields(d)]},
    ]
    evidence = evidence_block(d.get("evidence") or [])
    if evidence:
        blocks.append(evidence)
    waiting = [v for v in views if v.decision == "needs_approval"]
    did = [action_line(v) for v in views if v not in waiting]
    waits = [action_line(v, approvers(v) if approvers else None) for v in waiting]
    blocks += [b for b in (actions_section("What it did", did), actions_section("What waits", waits)) if b]
    blocks.append({"type": "context", "elements": [
        plain(footer or f"crashcart incidents show {incident.id}", FIELD_CHARS)]})
    return blocks


def incident_text(incident: Any, *, mention: str = "") -> str:
    """The message's fallback text (notifications, screen readers): escaped, mention kept."""
    summary = (incident.diagnosis or {}).get("summary") or trigger_text(incident.trigger)
    prefix = f"{mention} " if mention else ""
    return prefix + escape(clip(f"[crashcart] {incident.status}: {incident.id} on {incident.cluster}: {summary}", 3000))


def status_change_text(before: str | None, incident: Any, views: list[Any], approvers: Any = None) -> str:
    """The thread reply when an incident moves on: from what to what, and the actions now."""
    moved = f"{before} → {incident.status}" if before and before != incident.status else incident.status
    lines = [f"Now {moved}."] + [f"• {action_line(v, approvers(v) if approvers else None)}" for v in views]
    return escape(clip("\n".join(lines), 3000))


def notification_text(n: Any, *, mention: str = "") -> str:
    """An escalate/notify action (agent/notify.Notification) as a Slack message: escaped text."""
    body = escape(clip(n.text(), 3000))
    return f"{mention} {body}" if mention else body
