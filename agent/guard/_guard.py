"""The guard: every tool call passes it, and it decides before anything runs.

It decides on three things only: the incident's own immutable policy (the one
it started under, stored with it), the facts a backend reports about what a
write would touch (ActionTarget), and what the store has journaled (including
the jobs and nodes the investigation saw). A call's args are read only for what
the action itself names (its job and nodes, the config keys a resubmit sets),
never for scope, mode or permission, so nothing a log line or a model writes
into them can widen a decision. Deciding is kept apart from acting: the guard
returns a Decision and journals it; someone else executes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter

from crashcart.agent.guard._observed import entities_in_result, entities_named, trigger_entities
from crashcart.agent.guard._policy import (
    Approver, GuardError, GuardPolicy, canonical_policy, policy_from_dict, policy_sha256, within,
)
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
        ceiling: GuardPolicy | None = None, breaker: str | None = None,
    ):
        self.policy = policy
        """The policy for incidents that do not have one yet; an incident keeps the one it began under."""
        self.ceiling = ceiling
        """A live cluster's own policy (cluster.yaml): an incident acts on that cluster only when the
        policy it stored is this one, or this one with a stricter mode (`within`). Another process's
        incident in a shared store (a scenario's, run with --guard and a matching name) acts on nothing."""
        self.store = store
        self.cluster = cluster
        self.breaker = breaker or cluster
        """The key of this cluster's breaker record: a recorded scenario's is `scenario_breaker(id)`, so
        a scenario run under a live cluster's name in a shared store never trips (or resets) that one's."""
        self.clock = clock
        self.sha256 = policy_sha256(policy)
        self._bound: dict[str, tuple[GuardPolicy, str]] = {}

    # --- the incident's policy -------------------------------------------------

    def bind(self, incident_id: str) -> tuple[GuardPolicy, str]:
        """Give the incident this guard's policy unless it already has one; return the one it has."""
        if incident_id not in self._bound:
            stored = self.store.save_incident_policy(
                incident_id, self.policy.mode, canonical_policy(self.policy), self.sha256, self.clock())
            self._bound[incident_id] = self._loaded(incident_id, stored.policy, stored.sha256)
        return self._bound[incident_id]

    def policy_for(self, incident_id: str) -> tuple[GuardPolicy, str] | None:
        """The policy the incident runs under and its hash; None when it has none stored."""
        if incident_id not in self._bound:
            stored = self.store.incident_policy(incident_id)
            if stored is None:
                return None
            self._bound[incident_id] = self._loaded(incident_id, stored.policy, stored.sha256)
        return self._bound[incident_id]

    def _loaded(self, incident_id: str, data: dict, sha: str) -> tuple[GuardPolicy, str]:
        if sha == self.sha256:
            return self.policy, sha
        return policy_from_dict(data, source=f"incident {incident_id}: its stored guard policy"), sha

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
            policy, sha = self.bind(incident_id)
            verdict = (self._above_ceiling(incident_id, policy, sha)
                       or self._decide(policy, call, target, now, incident_id))
            if review is not None:
                verdict = self._narrow(policy, verdict, review, call.tool, target)
            if verdict.trip:
                self.store.trip_breaker(self.breaker, verdict.trip, now, incident_id=incident_id)
            return self._journal(call.action_id, call.tool, call.args, verdict, incident_id, target, now)

    def saw(self, incident_id: str, call: ToolCall, result: dict | None) -> None:
        """A read succeeded: the jobs and nodes it asked about and returned are now observed."""
        jobs, nodes = entities_in_result(call, result)
        self.store.record_observed(incident_id, jobs=jobs, nodes=nodes)

    def _decide(
        self, p: GuardPolicy, call: ToolCall, target: ActionTarget | None, now: datetime, incident_id: str,
    ) -> _Verdict:
        tool = call.tool
        if p.mode == "observe":
            return _Verdict("deny", "Observe mode: read tools only.", "mode:observe")
        # A write with no facts gets empty ones: only unscoped rules can match it.
        target = target or ActionTarget(tool=tool)
        if target.tool != tool:
            return _Verdict(
                "deny", f"The facts given are about {target.tool}, not {tool}; refusing to guess.",
                "target", p.escalation.default_team,
            )
        unseen = self._unobserved(call, incident_id)
        if unseen:
            return _Verdict(
                "deny", f"{tool} names {', '.join(unseen)}, which this investigation never observed; "
                "a write may only touch what the cluster itself showed.",
                "observed", p.escalation.default_team,
            )
        changes = _change_keys(call)
        permission = p.permission_for(tool, target, changes)
        if permission is None:
            scope = ", ".join(
                f"{k} {v}" for k, v in (("partition", target.partition), ("user", target.user),
                                        ("changes", ", ".join(changes))) if v
            )
            return _Verdict(
                "deny", f"No permission rule allows {tool}{f' ({scope})' if scope else ''}.",
                "permissions:none", p.escalation.default_team,
            )
        blocked = self._blast_radius(p, tool, target, now)
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

    def _above_ceiling(self, incident_id: str, policy: GuardPolicy, sha: str) -> _Verdict | None:
        why = self.ceiling_refusal(incident_id, policy, sha)
        return _Verdict("deny", why, "ceiling", policy.escalation.default_team) if why else None

    def ceiling_refusal(self, incident_id: str, policy: GuardPolicy, sha: str) -> str | None:
        """Why this live cluster's guard refuses to act for the incident, or None when it may."""
        if self.ceiling is None or within(policy, self.ceiling):
            return None
        return (f"Incident {incident_id} runs under a guard policy (mode {policy.mode}, sha256 {sha[:12]}) that is not "
                f"{self.cluster}'s own (mode {self.ceiling.mode}, sha256 {policy_sha256(self.ceiling)[:12]}) nor it with "
                "a stricter mode; nothing it asks for runs on this cluster.")

    def _unobserved(self, call: ToolCall, incident_id: str) -> list[str]:
        named = entities_named(call)
        if not named:
            return []
        seen = self.store.observed(incident_id) | trigger_entities(self.store.trigger_of(incident_id))
        return [f"{kind} {name}" for kind, name in named if (kind, name) not in seen]

    def _narrow(self, policy: GuardPolicy, verdict: _Verdict, review: Review, tool: str,
                target: ActionTarget | None) -> _Verdict:
        # The review's own refusal is the one journaled (and routed), even where the guard refuses too:
        # a write the plan never should have held must not page a team as if it had been fair.
        if review.verdict == "deny":
            return _Verdict("deny", review.reason, review.rule, review.escalate_to)
        if verdict.decision == "deny":
            return verdict
        tier = policy.tier_for(tool, target or ActionTarget(tool=tool))
        who = ", ".join(policy.approvers_of(tier[1]) if tier else (a.name for a in policy.approvers))
        if verdict.decision == "needs_approval" and who:
            return dataclasses.replace(verdict, reason=f"{verdict.reason} Also: {review.reason}")
        if not who:
            return _Verdict("deny", f"{review.reason} This needs a person's approval and the policy names "
                            "nobody who may give it.", review.rule, review.escalate_to)
        if verdict.decision == "dry_run":
            return _Verdict("dry_run", f"Dry run: would need approval from {who}: {review.reason}", review.rule)
        return _Verdict("needs_approval", f"Needs approval from {who}: {review.reason}", review.rule)

    def _blast_radius(self, p: GuardPolicy, tool: str, target: ActionTarget, now: datetime) -> _Verdict | None:
        if tool == "node_drain":
            return self._breaker(p, target, now)
        if tool == "resubmit":
            return self._restart_budget(p, target)
        return None

    def _breaker(self, p: GuardPolicy, target: ActionTarget, now: datetime) -> _Verdict | None:
        b, node = p.breaker, target.node
        state = self.store.breaker_state(self.breaker)
        if state.tripped:
            return _Verdict(
                "deny",
                f"The circuit breaker for {self.cluster} tripped at {state.tripped_at:%Y-%m-%d %H:%M} UTC "
                f"({state.reason}); no node is drained until a person resets it.",
                "breaker:tripped", p.escalation.breaker_team,
            )
        since = now - timedelta(minutes=b.window_minutes)
        # A person's reset accepts the drains before it; otherwise the next drain re-trips at once.
        if state.reset_at is not None and state.reset_at > since:
            since = state.reset_at
        drains = self.store.drains_since(self.cluster, since) + 1
        if drains > b.max_drains:
            why = (f"draining {node} would make {drains} node drains in {self.cluster} within "
                   f"{b.window_minutes:g} minutes (limit {b.max_drains})")
            return self._trip(p, why, "breaker:max_drains")
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
            return self._trip(p, why, "breaker:partition_fraction")
        return None

    def _trip(self, p: GuardPolicy, why: str, rule: str) -> _Verdict:
        return _Verdict(
            "deny",
            f"Circuit breaker tripped: {why}. Escalated instead; it stays tripped until a person resets it.",
            rule, p.escalation.breaker_team, trip=why,
        )

    def _restart_budget(self, p: GuardPolicy, target: ActionTarget) -> _Verdict | None:
        limit = p.restart_budget.max_restarts
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

    def approve(
        self, action_id: str, incident_id: str, approver: str, approved: bool, *, os_user: str | None = None,
        slack_user: str | None = None,
    ) -> Decision:
        """A person's answer to a needs_approval decision, judged by the incident's own policy:
        single-use, bound to this action under that policy, only from someone its tier names
        (from their own OS account when the policy says so, or, given `slack_user`, from a Slack
        user id their entry lists), and only while the request is fresh.
        A refused answer is journaled with who, what and why before ApprovalError is raised."""
        now = self.clock()
        with self.store.lock:
            pending = self.store.last_decision(self.cluster, incident_id, action_id)
            bound = self.policy_for(incident_id)
            attempt = dict(action_id=action_id, tool=pending.tool if pending else None, approver=approver,
                           os_user=os_user, approved=approved, policy_sha256=bound[1] if bound else None,
                           slack_user=slack_user)
            try:
                policy, sha, target = self._may_answer(pending, bound, action_id, incident_id, approver, os_user, now,
                                                       slack_user)
            except ApprovalError as e:
                self.store.record_approval_attempt(incident_id, outcome="refused", reason=str(e), at=now, **attempt)
                raise
            self.store.record_approval(
                action_id, incident_id, approver, approved, now, tool=pending.tool, args=pending.args,
                policy_sha256=sha, os_user=os_user,
                expires_at=now + timedelta(minutes=policy.approval_settings.expires_minutes),
            )
            if self.store.take_approval(action_id, incident_id, tool=pending.tool, args=pending.args,
                                        policy_sha256=sha, now=now) is None:
                raise ApprovalError(f"The approval of {action_id} in incident {incident_id} could not be taken.")
            self.store.record_approval_attempt(incident_id, outcome="accepted", reason=None, at=now, **attempt)
            verdict = self._answer(policy, pending.tool, target, now, approver, approved, pending.rule)
            if verdict.trip:
                self.store.trip_breaker(self.breaker, verdict.trip, now, incident_id=incident_id)
            return self._journal(action_id, pending.tool, pending.args, verdict, incident_id, target, now)

    def _may_answer(self, pending, bound, action_id: str, incident_id: str, approver: str,
                    os_user: str | None, now: datetime, slack_user: str | None = None,
                    ) -> tuple[GuardPolicy, str, ActionTarget]:
        if pending is None or pending.decision != "needs_approval":
            state = (f"its last decision was {pending.decision!r} ({pending.rule})"
                     if pending else "no such action")
            raise ApprovalError(
                f"Action {action_id} in incident {incident_id} is not awaiting approval ({state}); "
                "an approval answers one request once."
            )
        if bound is None:
            raise ApprovalError(
                f"Incident {incident_id} has no stored guard policy (it began before incidents kept "
                "theirs), so nobody can say who may approve it; investigate it again."
            )
        policy, sha = bound
        above = self.ceiling_refusal(incident_id, policy, sha)
        if above:
            raise ApprovalError(above)
        expires = pending.at + timedelta(minutes=policy.approval_settings.expires_minutes)
        if now >= expires:
            raise ApprovalError(
                f"The request to approve {pending.tool} in incident {incident_id} (asked at "
                f"{pending.at:%Y-%m-%d %H:%M} UTC) expired after {policy.approval_settings.expires_minutes:g} "
                "minutes; the cluster may have changed since, so investigate again."
            )
        target = _target_adapter.validate_python(pending.target or {"tool": pending.tool})
        tier = policy.tier_for(pending.tool, target)
        # A request the model review raised (rule review:*) outside any tier goes to the policy's approvers.
        allowed = (policy.approver_entries(tier[1]) if tier
                   else policy.approvers if pending.rule.startswith("review:") else ())
        _identify(policy, allowed, approver, os_user, f"approve {pending.tool} ({pending.rule})", slack_user)
        return policy, sha, target

    def _answer(
        self, p: GuardPolicy, tool: str, target: ActionTarget, now: datetime, approver: str, approved: bool,
        rule: str,
    ) -> _Verdict:
        if not approved:
            return _Verdict("deny", f"Rejected by {approver}.", rule, p.escalation.default_team)
        # The incident's mode still holds (a needs_approval asked under it; it cannot have changed,
        # but a policy that says observe or dry_run never runs anything, approved or not).
        if p.mode == "observe":
            return _Verdict(
                "deny", f"Approved by {approver}, but observe mode: read tools only.", "mode:observe"
            )
        if p.mode == "dry_run":
            return _Verdict("dry_run", f"Approved by {approver}; dry run: nothing runs.", "mode:dry_run")
        # Drains and restarts may have happened while the request waited: count again.
        blocked = self._blast_radius(p, tool, target, now)
        return blocked or _Verdict("allow", f"Approved by {approver}.", rule)

    def breaker_state(self) -> BreakerState:
        return self.store.breaker_state(self.breaker)

    def reset_breaker(self, person: str, *, os_user: str | None = None) -> BreakerState:
        """Close a tripped breaker: only a person the policy names as an approver may; no approvers,
        nobody may. On a live cluster the policy is its own (the ceiling), whatever policy the incident
        that tripped it stored: that incident may be a scenario's, run under a wider --guard. Elsewhere
        (a recorded scenario) it is the tripping incident's policy, when the store knows it."""
        now = self.clock()
        state = self.store.breaker_state(self.breaker)
        if self.ceiling is not None:
            policy, sha = self.ceiling, policy_sha256(self.ceiling)
        else:
            bound = self.policy_for(state.incident_id) if state.incident_id else None
            policy, sha = bound or (self.policy, self.sha256)
        try:
            if not person or not person.strip():
                raise ApprovalError("Resetting the circuit breaker needs the name of the person doing it.")
            if not policy.approvers:
                raise ApprovalError(
                    f"nobody may reset the circuit breaker of {self.cluster}: its guard policy names no approvers."
                )
            _identify(policy, policy.approvers, person, os_user, "reset the circuit breaker")
        except ApprovalError as e:
            self.store.record_approval_attempt(
                state.incident_id or f"cluster:{self.breaker}", outcome="refused", reason=str(e), at=now,
                tool="breaker_reset", approver=person, os_user=os_user, policy_sha256=sha)
            raise
        return self.store.reset_breaker(self.breaker, person, now)


def scenario_breaker(scenario_id: str) -> str:
    """The breaker key of a recorded scenario's runs: apart from every live cluster's (its bare name)."""
    return f"{SCENARIO_BREAKER_PREFIX}{scenario_id}"


SCENARIO_BREAKER_PREFIX = "scenario:"


def _identify(policy: GuardPolicy, allowed: tuple[Approver, ...], person: str, os_user: str | None,
              what: str, slack_user: str | None = None) -> Approver:
    """The entry that lets `person` do `what`, checked against the account they act from: a
    Slack user id (Slack signed the request) or else the OS account."""
    entry = next((a for a in allowed if a.name == person), None)
    if entry is None:
        raise ApprovalError(
            f"{person} may not {what}; allowed: {', '.join(a.name for a in allowed) or 'nobody'}."
        )
    if slack_user is not None:
        # An entry without Slack ids cannot act from Slack at all: nobody vouches for the name.
        if slack_user not in entry.slack_ids:
            raise ApprovalError(
                f"{person} may {what.split()[0]} from Slack only as user {', '.join(entry.slack_ids) or '(none listed)'}; "
                f"this came from Slack user {slack_user}."
            )
        return entry
    accounts = entry.bound_os_users(policy.approval_settings.require_os_user)
    if accounts and os_user not in accounts:
        raise ApprovalError(
            f"{person} may {what.split()[0]} only as OS user {', '.join(accounts)}; "
            f"this came from {os_user or 'an unknown OS user'}."
        )
    return entry


def _change_keys(call: ToolCall) -> tuple[str, ...]:
    changes = call.args.get("changes") if call.tool == "resubmit" else None
    return tuple(sorted(str(k) for k in changes)) if isinstance(changes, dict) else ()
