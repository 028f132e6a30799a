"""The incident graph: triage -> investigate (loop) -> diagnose -> guard -> approval -> act -> report.

Every tool call, read or write, goes through the guard; the policy only
proposes. Live objects (backend, guard, store, policy) come in as `Deps`, never
in state, so a checkpoint resumes in another process given the same deps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from crashcart.agent.crashpoints import crash_point
from crashcart.agent.guard import Guard
from crashcart.agent.policies.base import Policy
from crashcart.agent.report import incident_summary
from crashcart.agent.state import ActionRecord, Diagnosis, IncidentState, Observation
from crashcart.agent.store import IncidentStore
from crashcart.tools import REGISTRY, Backend, ToolCall, ToolError
from crashcart.tools.backends.base import acting_for

MAX_ROUNDS = 8
OUTPUT_EXCERPT = 2000


@dataclass
class Deps:
    backend: Backend
    guard: Guard
    store: IncidentStore
    policy: Policy
    notifier: Any = None
    """Delivers executed escalate/notify actions to people (agent/notify.Dispatcher); None: nobody."""


def _call_tool(deps: Deps, call: ToolCall) -> tuple[bool, Any, str | None]:
    ok, out, err, _ = _call_backend(deps, call)
    return ok, out, err


def _call_backend(deps: Deps, call: ToolCall) -> tuple[bool, Any, str | None, bool]:
    """(ok, output, error, backend_failed): backend_failed when a well-formed call reached the
    backend and it could not answer (a bad call is the asker's fault, not the cluster's)."""
    try:
        spec = REGISTRY.get(call.tool)
        if deps.backend.kind not in spec.backends:
            raise ToolError(f"{call.tool} is not available on a {deps.backend.kind} cluster")
        args = spec.parse_args(call.args)
    except ToolError as e:
        return False, None, str(e), False
    try:
        return True, deps.backend.run(spec, args), None, False
    except ToolError as e:
        return False, None, str(e), True


def build_graph(checkpointer: Any = None):
    """Compile once; each run brings its own Deps as the LangGraph runtime context."""

    def triage(state: IncidentState, runtime: Runtime[Deps]) -> dict[str, Any]:
        deps = runtime.context
        deps.store.update_incident(state["incident_id"], status="investigating", at=deps.backend.now())
        return {"status": "investigating", "rounds": 0, "observations": [], "actions": []}

    def investigate(state: IncidentState, runtime: Runtime[Deps]) -> dict[str, Any]:
        deps = runtime.context
        if state.get("rounds", 0) >= getattr(deps.policy, "max_rounds", MAX_ROUNDS):
            return {"pending": []}
        step = getattr(deps.policy, "step", None)
        if step is not None:  # a policy that also says what it thought (a model's turns, a handover)
            calls, notes = step(dict(state), deps.backend.now(), deps.backend.kind)
        else:
            calls, notes = deps.policy.next_calls(dict(state), deps.backend.now(), deps.backend.kind), []
        deps.store.record_policy_notes(state["incident_id"], notes, at=deps.backend.now())
        return {"pending": [c.model_dump() for c in calls], "rounds": state.get("rounds", 0) + 1,
                "policy_log": notes}

    def route_investigation(state: IncidentState) -> Literal["run_tools", "diagnose"]:
        return "run_tools" if state.get("pending") else "diagnose"

    def run_tools(state: IncidentState, runtime: Runtime[Deps]) -> dict[str, Any]:
        deps = runtime.context
        return {"observations": _run_reads(deps, state), "pending": []}

    def diagnose(state: IncidentState, runtime: Runtime[Deps]) -> dict[str, Any]:
        deps = runtime.context
        # A cluster that did not answer proves nothing: "could not investigate" is the verdict,
        # and a person hears of it, never "healthy".
        diagnosis, plan = investigation_failure(state) or deps.policy.diagnose(dict(state), deps.backend.now())
        deps.store.update_incident(state["incident_id"], status="diagnosed", diagnosis=diagnosis.model_dump(mode="json"))
        return {"diagnosis": diagnosis.model_dump(mode="json"), "plan": [c.model_dump() for c in plan]}

    def guard(state: IncidentState, runtime: Runtime[Deps]) -> dict[str, Any]:
        deps = runtime.context
        with deps.store.batch():
            records = _check_plan(deps, state)
        waiting = any(r["decision"] == "needs_approval" for r in records)
        if waiting:
            deps.store.update_incident(state["incident_id"], status="awaiting_approval")
        return {"actions": records, "status": "awaiting_approval" if waiting else state.get("status", "investigating")}

    def route_after_act(state: IncidentState) -> Literal["approval", "report"]:
        # What the guard allowed has run; what waits for a person waits here, not the rest.
        return "approval" if any(a["decision"] == "needs_approval" for a in state.get("actions") or []) else "report"

    def approval(state: IncidentState, runtime: Runtime[Deps]) -> dict[str, Any]:
        deps = runtime.context
        pending = [a for a in state["actions"] if a["decision"] == "needs_approval"]
        # Nothing before interrupt() may have side effects: this node re-runs on resume.
        answer = interrupt({
            "incident_id": state["incident_id"],
            "actions": [{"action_id": a["action_id"], "tool": a["tool"], "args": a["args"], "reason": a["reason"]} for a in pending],
        })
        verdicts = _verdicts(answer, pending)
        updated = []
        for a in state["actions"]:
            if a["decision"] == "needs_approval" and a["action_id"] in verdicts:
                approver, approved, os_user, slack_user = verdicts[a["action_id"]]
                try:
                    d = deps.guard.approve(a["action_id"], state["incident_id"], approver, approved, os_user=os_user,
                                           slack_user=slack_user)
                    a = {**a, "decision": d.decision, "reason": d.reason, "rule": d.rule}
                except Exception as e:  # a refused approver keeps the action waiting, with why
                    a = {**a, "reason": f"approval refused: {e}"}
            updated.append(a)
        return {"actions": updated}

    def act(state: IncidentState, runtime: Runtime[Deps]) -> dict[str, Any]:
        deps = runtime.context
        allowed = any(a["decision"] == "allow" for a in state.get("actions") or [])
        # Acting is idempotent: an action journaled as executed (before a crash) is not run again.
        done = deps.store.executed_action_ids(state["incident_id"]) if allowed else set()
        if allowed:
            crash_point("before_act")
        updated = []
        for a in state.get("actions") or []:
            if a["decision"] == "allow" and a["action_id"] not in done and a.get("result") is None:
                args = dict(a["args"])
                if a["tool"] == "resubmit":
                    # If crashcart dies between submitting and journaling, the retry finds the job.
                    args["request_id"] = a["action_id"]
                with acting_for(state["incident_id"]):  # a live backend names the incident on the cluster
                    ok, out, err = _call_tool(deps, ToolCall(tool=a["tool"], args=args))
                crash_point("after_action")
                result = out.model_dump(mode="json") if out is not None else None
                a = {**a, "result": result, "error": err}
                deps.store.record_action(
                    state["cluster"], state["incident_id"], a["action_id"], a["tool"], a["args"],
                    result or {"error": err}, at=deps.backend.now(),
                )
            updated.append(a)
        _deliver(deps, state, updated)
        return {"actions": updated}

    def report(state: IncidentState, runtime: Runtime[Deps]) -> dict[str, Any]:
        deps = runtime.context
        status = _final_status(state)
        summary = incident_summary(dict(state), status)
        deps.store.update_incident(state["incident_id"], status=status, report=summary)
        return {"status": status, "report": summary}

    g = StateGraph(IncidentState, context_schema=Deps)
    for name, fn in [("triage", triage), ("investigate", investigate), ("run_tools", run_tools),
                     ("diagnose", diagnose), ("guard", guard), ("approval", approval), ("act", act), ("report", report)]:
        g.add_node(name, fn)
    g.add_edge(START, "triage")
    g.add_edge("triage", "investigate")
    g.add_conditional_edges("investigate", route_investigation)
    g.add_edge("run_tools", "investigate")
    g.add_edge("diagnose", "guard")
    g.add_edge("guard", "act")
    # After act, an action still waiting (an answer that settled nothing: an approver the
    # policy does not name, a malformed answer) goes back to approval rather than finish pending.
    g.add_edge("approval", "act")
    g.add_conditional_edges("act", route_after_act)
    g.add_edge("report", END)
    return g.compile(checkpointer=checkpointer)


def _deliver(deps: Deps, state: IncidentState, actions: list[dict[str, Any]]) -> None:
    """Every executed escalate/notify reaches people. Run on each pass through act, so one whose
    delivery a crash cut short is sent on resume; the dispatcher skips notifiers already done."""
    if deps.notifier is None:
        return
    for a in actions:
        if a["tool"] in ("escalate", "notify") and a.get("result") and not a.get("error"):
            deps.notifier.deliver(state["cluster"], state["incident_id"], a, deps.backend.now())


def _check_plan(deps: Deps, state: IncidentState) -> list[dict[str, Any]]:
    """The guard's decision on every planned write, journaled; a bad call is denied with why.

    An action the guard denies and routes to a team (a tripped breaker, a spent restart
    budget) becomes an escalation to that team, with the evidence, through the guard too."""
    plan = [ToolCall.model_validate(raw) for raw in state.get("plan") or []]
    records = _decide(deps, state, plan)
    escalated = {c.args.get("team") for c in plan if c.tool == "escalate"}
    routed = []
    for r in records:
        team = r.get("escalate_to")
        if r["decision"] == "deny" and team and r["tool"] != "escalate" and team not in escalated:
            escalated.add(team)
            routed.append(_escalation_for(r, team, state))
    return records + _decide(deps, state, routed)


def _escalation_for(denied: dict[str, Any], team: str, state: IncidentState) -> ToolCall:
    diagnosis = state.get("diagnosis") or {}
    what = f"{denied['tool']} {denied['args'].get('node') or denied['args'].get('job') or ''}".strip()
    return ToolCall(tool="escalate", args={
        "team": team, "severity": "high",
        "summary": f"The guard refused {what}: {denied['reason']} Diagnosis: {diagnosis.get('summary', 'none')}",
        "evidence": list(diagnosis.get("evidence") or [])[:8],
        "reason": f"crashcart: guard denied {what}",
    })


def _decide(deps: Deps, state: IncidentState, calls: list[ToolCall]) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for call in calls:
        record = {"tool": call.tool, "args": call.args, "action_id": call.action_id}
        try:
            spec = REGISTRY.get(call.tool)
            if spec.effect != "write":
                # A read is not a remedy; acting on it would run an action the guard never journaled.
                raise ToolError(f"{call.tool} only reads; a plan holds write actions only")
            spec.parse_args(call.args)
            target = deps.backend.target(call)
        except ToolError as e:
            records.append(ActionRecord(**record, decision="deny", reason=str(e), error=str(e)).model_dump(mode="json"))
            continue
        # A policy may object to its own plan (a model's write the evidence does not back); it only narrows.
        review = getattr(deps.policy, "review", None)
        d = deps.guard.check(call, spec.effect, target, state["incident_id"],
                             review=review(dict(state), call) if review else None)
        records.append(ActionRecord(**record, decision=d.decision, reason=d.reason, rule=d.rule,
                                    escalate_to=d.escalate_to).model_dump(mode="json"))
    return records


def _run_reads(deps: Deps, state: IncidentState) -> list[dict[str, Any]]:
    """Run the pending read calls through the guard; each becomes an observation, journaled."""
    seq = len(state.get("observations") or [])
    new: list[dict[str, Any]] = []
    journal: list[tuple[Observation, str, Any]] = []
    for raw in state.get("pending") or []:
        call = ToolCall.model_validate(raw)
        seq += 1
        try:
            effect = REGISTRY.get(call.tool).effect
        except ToolError as e:
            effect, error = None, str(e)
        else:
            # Investigation only reads; a write can only come through the plan and the guard.
            error = None if effect == "read" else f"{call.tool} is a write tool; it can only be planned as a remedy"
        if error is None:
            decision = deps.guard.check(call, effect, None, state["incident_id"])
            error = None if decision.decision == "allow" else decision.reason
        if error is not None:
            obs = Observation(seq=seq, tool=call.tool, args=call.args, ok=False, error=error)
        else:
            ok, out, err, backend_failed = _call_backend(deps, call)
            data = out.model_dump(mode="json") if out is not None else {}
            obs = Observation(seq=seq, tool=call.tool, args=call.args, ok=ok, text=data.get("text", ""), data=data,
                              error=err, backend_failed=backend_failed)
        journal.append((obs, effect or "unknown", deps.backend.now()))
        new.append(obs.model_dump(mode="json"))
    # Journaled together once the reads are done: the store (which other processes share) is
    # not held while the cluster answers.
    with deps.store.batch():
        for obs, effect, at in journal:
            deps.store.record_tool_call(
                state["incident_id"], obs.tool, obs.args, effect, obs.ok,
                output_excerpt=obs.text[:OUTPUT_EXCERPT], error=obs.error, at=at,
            )
            if obs.ok:  # what the cluster showed is what a write may later name (Contract 4)
                deps.guard.saw(state["incident_id"], ToolCall(tool=obs.tool, args=obs.args), obs.data)
    return new


def _verdicts(answer: Any, pending: list[dict[str, Any]]) -> dict[str, tuple[str, bool, str | None, str | None]]:
    """Accept {"approver": A, "approved": bool, "os_user": U} for all, or {"decisions": {action_id: {...}}}.
    `os_user` is the OS account the interface ran as (the CLI asks the OS, never a flag);
    `slack_user` the Slack user id of a signed click (the Slack app)."""
    if not isinstance(answer, dict):
        return {}

    def one(v: dict[str, Any]) -> tuple[str, bool, str | None, str | None]:
        return (str(v.get("approver", "")), bool(v.get("approved")), v.get("os_user") or answer.get("os_user"),
                v.get("slack_user") or answer.get("slack_user"))

    if "decisions" in answer:
        return {aid: one(v) for aid, v in (answer.get("decisions") or {}).items() if isinstance(v, dict)}
    return {a["action_id"]: one(answer) for a in pending}


INVESTIGATION_FAILED = "investigation_failed"


def investigation_failure(state: IncidentState) -> tuple[Diagnosis, list[ToolCall]] | None:
    """When the backend failed most of the calls the investigation made: that diagnosis, and
    an escalation to infra carrying the errors; None when the cluster answered."""
    ran = [o for o in state.get("observations") or [] if o.get("ok") or o.get("backend_failed")]
    failed = [o for o in ran if o.get("backend_failed")]
    if not failed or len(failed) * 2 <= len(ran):
        return None
    errors = list(dict.fromkeys(f"{o['tool']}: {(o.get('error') or '').strip()[:300]}" for o in failed))[:8]
    summary = (f"Could not investigate: the cluster failed {len(failed)} of the {len(ran)} calls the "
               f"investigation made, so nothing here says whether anything is wrong. First error: {errors[0]}")
    trigger = state.get("trigger") or {}
    entity = f"job:{trigger['job']}" if trigger.get("job") else f"node:{trigger['node']}" if trigger.get("node") else None
    diagnosis = Diagnosis(label=INVESTIGATION_FAILED, family="unknown", root_cause=entity, remedy="escalate_infra",
                          confidence=0.0, evidence=errors, summary=summary, team="infra")
    escalate = ToolCall(tool="escalate", args={
        "team": "infra", "severity": "high", "summary": summary, "evidence": errors,
        "reason": "crashcart could not investigate: the cluster did not answer",
    })
    return diagnosis, [escalate]


def _final_status(state: IncidentState) -> str:
    actions = state.get("actions") or []
    decisions = {a["decision"] for a in actions}
    if "needs_approval" in decisions:
        return "awaiting_approval"
    if (state.get("diagnosis") or {}).get("label") == INVESTIGATION_FAILED:
        return INVESTIGATION_FAILED
    executed = [a for a in actions if a.get("result")]
    if not executed and any(a["decision"] == "dry_run" or a.get("rule") == "mode:observe" for a in actions):
        # Observe and dry-run change nothing: the plan was proposed, not done.
        return "proposed"
    if any(a["tool"] == "escalate" for a in executed) or any(a.get("escalate_to") for a in actions if a["decision"] == "deny"):
        return "escalated"
    if any(a["tool"] in {"resubmit", "node_drain", "cancel_job"} for a in executed):
        return "remediated"
    return "closed"
