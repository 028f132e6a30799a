"""One way to answer an approval, whoever asks (`crashcart approve`, a button in Slack).

The incident's own stored policy decides: an answer that comes with another policy or mode is
refused and journaled; the answer resumes the incident's LangGraph interrupt from the shared
checkpoint, in whatever process calls this, and the guard judges the person there (Guard.approve).
"""

from __future__ import annotations

from typing import Any

from crashcart.agent.runner import IncidentRun, pending_approval, resume_incident


class ApprovalRefused(Exception):
    """The answer was not put to the incident at all; the message says why (journaled when someone
    could have meant it as an approval)."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.message = message
        self.code = code


def answer_approval(
    deps: Any, incident: str, checkpointer: Any, *, approver: str, approved: bool,
    os_user: str | None = None, slack_user: str | None = None, action_ids: list[str] | None = None,
    given_policy: Any = None, mode: str | None = None,
) -> IncidentRun:
    """Answer the actions `incident` waits on (all, or only `action_ids`) and let it go on.
    The guard may still refuse the person: such an action stays `needs_approval` with why."""
    from crashcart.agent.guard import other_policy_flags

    store = deps.store
    own = deps.guard.policy_for(incident)
    if own is None:
        raise ApprovalRefused(
            f"incident {incident} is not in the store" if store.get_incident(incident) is None else
            f"incident {incident} has no stored guard policy (it began before incidents kept theirs); "
            "investigate it again")
    policy, sha = own

    def refuse(why: str, code: int, action_id: str | None = None) -> ApprovalRefused:
        store.record_approval_attempt(incident, outcome="refused", reason=why, at=deps.guard.clock(),
                                      action_id=action_id, approver=approver, os_user=os_user,
                                      slack_user=slack_user, approved=approved, policy_sha256=sha)
        return ApprovalRefused(why, code)

    # A live cluster acts only within its own guard: an incident another target started under a
    # wider policy (a scenario run with --guard, in a shared store) is not answered here.
    above = deps.guard.ceiling_refusal(incident, policy, sha)
    if above:
        raise refuse(above, 1)
    differences = other_policy_flags(policy, given_policy, mode)
    if differences:
        raise refuse(f"incident {incident} runs under its own guard policy (mode {policy.mode}, sha256 {sha[:12]}): "
                     f"{'; '.join(differences)}. Approve without --guard and --mode; the incident's own policy "
                     "decides.", 1)
    waiting = {a["action_id"] for a in pending_approval(deps, incident, checkpointer)}
    if not waiting:
        raise refuse(f"incident {incident} is not waiting for an approval", 2,
                     action_ids[0] if action_ids and len(action_ids) == 1 else None)
    unknown = [a for a in action_ids or () if a not in waiting]
    if unknown:
        raise refuse(f"incident {incident} is not waiting for an approval of {', '.join(unknown)}", 2, unknown[0])
    one: dict[str, Any] = {"approver": approver, "approved": approved, "os_user": os_user, "slack_user": slack_user}
    answer = {"decisions": {a: one for a in action_ids}} if action_ids else one
    return resume_incident(deps, incident, answer, checkpointer)


def still_waiting(run: IncidentRun, action_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """The answered actions the guard left waiting: it refused the answer for them (the reason says why)."""
    return [a for a in run.state.get("actions") or []
            if a["decision"] == "needs_approval" and (action_ids is None or a["action_id"] in action_ids)]
