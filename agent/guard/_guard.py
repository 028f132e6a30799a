"""The guard: every tool call passes it, and it decides before anything runs.

It decides on three things only: the immutable policy, the facts a backend
reports about what a write would touch (ActionTarget), and what the store has
journaled. A call's args are journaled but never read, so nothing a log line or
a model writes into them can change a decision. Deciding is kept apart from
acting: the guard returns a Decision and journals it; someone else executes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter

from crashcart.agent.guard._policy import GuardError, GuardPolicy
from crashcart.agent.store import BreakerState, IncidentStore
from crashcart.tools import REGISTRY, ActionTarget, ToolCall

DecisionKind = Literal["allow", "dry_run", "needs_approval", "deny"]
_target_adapter = TypeAdapter(ActionTarget)


class ApprovalError(GuardError, PermissionError):
    """An approval or a breaker reset was refused: wrong person, nothing pending, already used."""


class Decision(BaseModel):
    """What the guard decided about one call; journaled before it is returned."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    decision: DecisionKind
    reason: str
    """A sentence for the person reading the incident."""
    rule: str
    """Which rule decided: `read`, `mode:observe`, `permissions[0]`, `breaker:max_drains`, ..."""
    escalate_to: str | None = None
    """The team a denied or uncertain action goes to."""
    action_id: str


@dataclasses.dataclass(frozen=True)
class Review:
    """A policy's objection to one of its own planned writes (a model's plan that names an entity
    nobody observed, or that the playbooks contradict). It can only narrow: deny, or ask a person."""

    verdict: Literal["deny", "needs_approval"]
    reason: str
    rule: str
    """`review:...`: which check objected, journaled as the deciding rule."""
    escalate_to: str | None = None


@dataclasses.dataclass(frozen=True)
class _Verdict:
    decision: DecisionKind
    reason: str
    rule: str
    escalate_to: str | None = None
    trip: str | None = None
    """Set when this verdict trips the circuit breaker: why, for the breaker's record."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _is_write(tool: str, effect: str) -> bool:
    # The registry's word wins over the caller's, so a write cannot be passed off as a read.
    spec = REGISTRY.specs.get(tool)
    return effect != "read" or (spec is not None and spec.effect == "write")


class Guard:
    def __init__(
        self, policy: GuardPolicy, store: IncidentStore, cluster: str,
        clock: Callable[[], datetime] = _utcnow,
    ):
        self.policy = policy
        self.store = store
        self.cluster = cluster
        self.clock = clock

    # --- deciding -------------------------------------------------------------

    def check(
        self, call: ToolCall, effect: str, target: ActionTarget | None, incident_id: str,
        review: Review | None = None,
    ) -> Decision:
        now = self.clock()
        if not _is_write(call.tool, effect):
            # Reads change nothing; the graph journals each one as a tool call with its output.
            return Decision(decision="allow", reason=f"{call.tool} only reads.", rule="read",
                            escalate_to=None, action_id=call.action_id)
        # One lock across count, decide and journal: two checks must not both fit in the last slot.
        with self.store.lock:
            verdict = self._decide(call.tool, effect, target, now)
            if review is not None:
                verdict = self._narrow(verdict, review, call.tool, target)
            if verdict.trip:
                self.store.trip_breaker(self.cluster, verdict.trip, now)
            return self._journal(call.action_id, call.tool, call.args, verdict, incident_id, target, now)

    def _decide(
        self, tool: str, effect: str, target: ActionTarget | None, now: datetime
    ) -> _Verdict:
        p = self.policy
        if not _is_write(tool, effect):
            return _Verdict("allow", f"{tool} only reads.", "read")
        if p.mode == "observe":
            return _Verdict("deny", "Observe mode: read tools only.", "mode:observe")
        # A write with no facts gets empty ones: only unscoped rules can match it.
        target = target or ActionTarget(tool=tool)
        if target.tool != tool:
            return _Verdict(
                "deny", f"The facts given are about {target.tool}, not {tool}; refusing to guess.",
                "target", p.escalation.default_team,
            )
        permission = p.permission_for(tool, target)
        if permission is None:
            scope = ", ".join(
                f"{k} {v}" for k, v in (("partition", target.partition), ("user", target.user)) if v
            )
            return _Verdict(
                "deny", f"No permission rule allows {tool}{f' ({scope})' if scope else ''}.",
                "permissions:none", p.escalation.default_team,
            )
        blocked = self._blast_radius(tool, target, now)
        if blocked is not None:
            return blocked
        tier = p.tier_for(tool, target)
        if tier is not None:
            i, t = tier
            who = ", ".join(p.approvers_of(t)) or "nobody (no approvers are configured)"
            if p.mode == "dry_run":
                return _Verdict(
                    "dry_run", f"Dry run: {tool} would need approval from {who}; nothing runs.",
                    f"approval[{i}]",
                )
            return _Verdict("needs_approval", f"{tool} needs approval from {who}.", f"approval[{i}]")
        if p.mode == "autonomous":
            return _Verdict("allow", f"{tool} is permitted.", f"permissions[{permission[0]}]")
        return _Verdict("dry_run", f"Dry run: {tool} is proposed, nothing runs.", "mode:dry_run")

    def _narrow(self, verdict: _Verdict, review: Review, tool: str, target: ActionTarget | None) -> _Verdict:
        # The review's own refusal is the one journaled (and routed), even where the guard refuses too:
        # a write the plan never should have held must not page a team as if it had been fair.
        if review.verdict == "deny":
            return _Verdict("deny", review.reason, review.rule, review.escalate_to)
        if verdict.decision == "deny":
            return verdict
        tier = self.policy.tier_for(tool, target or ActionTarget(tool=tool))
        who = ", ".join(self.policy.approvers_of(tier[1]) if tier else self.policy.approvers)
        if verdict.decision == "needs_approval" and who:
            return dataclasses.replace(verdict, reason=f"{verdict.reason} Also: {review.reason}")
        if not who:
            return _Verdict("deny", f"{review.reason} This needs a person's approval and the policy names "
                            "nobody who may give it.", review.rule, review.escalate_to)
        if verdict.decision == "dry_run":
            return _Verdict("dry_run", f"Dry run: would need approval from {who}: {review.reason}", review.rule)
        return _Verdict("needs_approval", f"Needs approval from {who}: {review.reason}", review.rule)

    def _blast_radius(self, tool: str, target: ActionTarget, now: datetime) -> _Verdict | None:
        if tool == "node_drain":
            return self._breaker(target, now)
        if tool == "resubmit":
            return self._restart_budget(target)
        return None

    def _breaker(self, target: ActionTarget, now: datetime) -> _Verdict | None:
        b, node = self.policy.breaker, target.node
        state = self.store.breaker_state(self.cluster)
        if state.tripped:
            return _Verdict(
                "deny",
                f"The circuit breaker for {self.cluster} tripped at {state.tripped_at:%Y-%m-%d %H:%M} UTC "
                f"({state.reason}); no node is drained until a person resets it.",
                "breaker:tripped", self.policy.escalation.breaker_team,
            )
        since = now - timedelta(minutes=b.window_minutes)
        # A person's reset accepts the drains before it; otherwise the next drain re-trips at once.
        if state.reset_at is not None and state.reset_at > since:
            since = state.reset_at
        drains = self.store.drains_since(self.cluster, since) + 1
        if drains > b.max_drains:
            why = (f"draining {node} would make {drains} node drains in {self.cluster} within "
                   f"{b.window_minutes:g} minutes (limit {b.max_drains})")
            return self._trip(why, "breaker:max_drains")
        # A node that is already down costs no capacity when drained; count it once.
        out = target.partition_unavailable + (0 if target.node_unavailable else 1)
        size = target.partition_nodes
        # Taking out the only unavailable node is always within the limit, or a small
        # partition could never lose a broken node.
        if out > 1 and (size <= 0 or out / size > b.max_partition_fraction):
            share = (f"{out} of {size} nodes ({out / size:.0%})" if size > 0
                     else f"{out} nodes of a partition of unknown size")
            why = (f"draining {node} would leave {share} of partition {target.partition} out of "
                   f"service (limit {b.max_partition_fraction:.0%})")
            return self._trip(why, "breaker:partition_fraction")
        return None

    def _trip(self, why: str, rule: str) -> _Verdict:
        return _Verdict(
            "deny",
            f"Circuit breaker tripped: {why}. Escalated instead; it stays tripped until a person resets it.",
            rule, self.policy.escalation.breaker_team, trip=why,
        )

    def _restart_budget(self, target: ActionTarget) -> _Verdict | None:
        limit = self.policy.restart_budget.max_restarts
        journaled = (
            self.store.restarts_of(self.cluster, target.job, since=target.last_checkpoint)
            if target.job else 0
        )
        restarts = target.restarts_without_progress + journaled
        if restarts >= limit:
            return _Verdict(
                "deny",
                f"Job {target.job} was restarted {restarts} times without a new checkpoint "
                f"(limit {limit}); its owner should look before another restart.",
                "restart_budget", "user",
            )
        return None

    def _journal(
        self, action_id: str, tool: str, args: dict, verdict: _Verdict, incident_id: str,
        target: ActionTarget | None, now: datetime,
    ) -> Decision:
        decision = Decision(
            decision=verdict.decision, reason=verdict.reason, rule=verdict.rule,
            escalate_to=verdict.escalate_to, action_id=action_id,
        )
        self.store.record_decision(
            self.cluster, incident_id, action_id, tool, args, decision.decision, decision.reason,
            decision.rule, at=now, escalate_to=decision.escalate_to,
            job=target.job if target else None, node=target.node if target else None,
            target=dataclasses.asdict(target) if target else None,
        )
        return decision

    # --- people ---------------------------------------------------------------

    def approve(self, action_id: str, incident_id: str, approver: str, approved: bool) -> Decision:
        """A person's answer to a needs_approval decision: single-use, bound to this action
        in this incident, and only from someone the tier names."""
        now = self.clock()
        with self.store.lock:
            pending = self.store.last_decision(self.cluster, incident_id, action_id)
            if pending is None or pending.decision != "needs_approval":
                state = (f"its last decision was {pending.decision!r} ({pending.rule})"
                         if pending else "no such action")
                raise ApprovalError(
                    f"Action {action_id} in incident {incident_id} is not awaiting approval ({state}); "
                    "an approval answers one request once."
                )
            target = _target_adapter.validate_python(pending.target or {"tool": pending.tool})
            tier = self.policy.tier_for(pending.tool, target)
            allowed = (self.policy.approvers_of(tier[1]) if tier
                       else self.policy.approvers if pending.rule.startswith("review:") else ())
            if approver not in allowed:
                raise ApprovalError(
                    f"{approver} may not approve {pending.tool} ({pending.rule}); "
                    f"allowed: {', '.join(allowed) or 'nobody'}."
                )
            self.store.record_approval(action_id, incident_id, approver, approved, now)
            self.store.take_approval(action_id, incident_id)
            verdict = self._answer(pending.tool, target, now, approver, approved, pending.rule)
            if verdict.trip:
                self.store.trip_breaker(self.cluster, verdict.trip, now)
            return self._journal(action_id, pending.tool, pending.args, verdict, incident_id, target, now)

    def _answer(
        self, tool: str, target: ActionTarget, now: datetime, approver: str, approved: bool, rule: str
    ) -> _Verdict:
        if not approved:
            return _Verdict("deny", f"Rejected by {approver}.", rule, self.policy.escalation.default_team)
        # The guard answering may not be the one that asked: its own mode still holds.
        if self.policy.mode == "observe":
            return _Verdict(
                "deny", f"Approved by {approver}, but observe mode: read tools only.", "mode:observe"
            )
        if self.policy.mode == "dry_run":
            return _Verdict("dry_run", f"Approved by {approver}; dry run: nothing runs.", "mode:dry_run")
        # Drains and restarts may have happened while the request waited: count again.
        blocked = self._blast_radius(tool, target, now)
        return blocked or _Verdict("allow", f"Approved by {approver}.", rule)

    def breaker_state(self) -> BreakerState:
        return self.store.breaker_state(self.cluster)

    def reset_breaker(self, person: str) -> BreakerState:
        """Close a tripped breaker: only a person the policy names as an approver may."""
        if not person or not person.strip():
            raise ApprovalError("Resetting the circuit breaker needs the name of the person doing it.")
        if self.policy.approvers and person not in self.policy.approvers:
            raise ApprovalError(
                f"{person} may not reset the circuit breaker; allowed: {', '.join(self.policy.approvers)}."
            )
        return self.store.reset_breaker(self.cluster, person, self.clock())
