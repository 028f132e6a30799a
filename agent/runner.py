"""Run one incident through the graph, from a trigger to a report."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from crashcart.agent.graph import Deps, build_graph
from crashcart.agent.guard import Guard, GuardPolicy
from crashcart.agent.policies.base import Policy
from crashcart.agent.store import IncidentStore
from crashcart.tools import Backend
from crashcart.tools.tape import RecordingBackend, Tape


@dataclass
class IncidentRun:
    incident_id: str
    state: dict[str, Any]
    interrupted: bool
    """True when the run stopped to wait for a person's approval."""


def make_deps(backend: Backend, policy: Policy, guard_policy: GuardPolicy, store: IncidentStore, cluster: str,
              notifiers: list[Any] | None = None, ceiling: GuardPolicy | None = None,
              breaker: str | None = None) -> Deps:
    """`notifiers`: where executed escalations go (the store always, then these); None: no delivery.
    `ceiling`: a live cluster's own guard policy, which no incident acting on it may exceed.
    `breaker`: the key of the breaker record when it is not `cluster` (a recorded scenario's)."""
    guard = Guard(guard_policy, store, cluster=cluster, clock=backend.now, ceiling=ceiling, breaker=breaker)
    notifier = None
    if notifiers is not None:
        from crashcart.agent.notify import Dispatcher

        notifier = Dispatcher(store, notifiers)
    return Deps(backend=backend, guard=guard, store=store, policy=policy, notifier=notifier)


def start_incident(deps: Deps, trigger: dict[str, Any], *, cluster: str, source: str,
                   checkpointer: Any = None, incident_id: str | None = None, record: bool = False,
                   opened: bool = False, on_step: Any = None) -> IncidentRun:
    """Run one incident. With `record`, every tool call and result goes to a tape in the store;
    `opened` means the store already holds the incident (the watch loop claimed it, or a Slack
    thread asks again: the same LangGraph thread goes on from its state). `on_step(state)` sees
    the state after every step (the Slack app updates its message from it)."""
    incident_id = incident_id or f"inc-{uuid.uuid4().hex[:12]}"
    if not opened:
        deps.store.open_incident(cluster, source, trigger, incident_id=incident_id, at=deps.backend.now())
    # The incident owns the policy it starts under; one started before a crash keeps its own.
    policy, _ = deps.guard.bind(incident_id)
    if record:
        meta = {"trigger": trigger, "cluster": cluster, "guard": policy.model_dump(mode="json")}
        deps = replace(deps, backend=RecordingBackend(deps.backend, Tape(backend=deps.backend.kind, meta=meta)))
    durable = checkpointer is not None
    graph = build_graph(checkpointer) if durable else _in_memory_graph()
    config = {"configurable": {"thread_id": incident_id}, "recursion_limit": 100}
    initial = {"incident_id": incident_id, "cluster": cluster, "backend": deps.backend.kind, "trigger": trigger}
    # A durable run checkpoints every step (it must survive a crash); an in-memory one only
    # where it stops, which is all an approval needs and much cheaper.
    durability = "sync" if durable else "exit"
    if on_step is None:
        result = graph.invoke(initial, config, context=deps, durability=durability)
    else:
        for values in graph.stream(initial, config, context=deps, durability=durability, stream_mode="values"):
            on_step(_plain(values))
        snapshot = graph.get_state(config)
        result = {**snapshot.values, **({"__interrupt__": snapshot.interrupts} if snapshot.interrupts else {})}
    return _finish(deps, incident_id, result)


def _finish(deps: Deps, incident_id: str, result: dict[str, Any]) -> IncidentRun:
    """After each stretch of a run (to its end or to an approval): the tape saved, people paged."""
    _save_tape(deps, incident_id)
    run = IncidentRun(incident_id, _plain(result), "__interrupt__" in result)
    if deps.notifier is not None:
        deps.notifier.page(incident_id, run.state, at=deps.backend.now())
    return run


def _save_tape(deps: Deps, incident_id: str) -> None:
    if isinstance(deps.backend, RecordingBackend):
        deps.store.save_tape(incident_id, deps.backend.tape.to_jsonl())


def resume_incident(deps: Deps, incident_id: str, answer: dict[str, Any], checkpointer: Any) -> IncidentRun:
    from langgraph.types import Command

    recorded = deps.store.load_tape(incident_id)
    if recorded is not None:
        # The tape goes on where the first process left it: one incident, one tape.
        deps = replace(deps, backend=RecordingBackend(deps.backend, Tape.from_jsonl(recorded, incident_id)))
    graph = build_graph(checkpointer)
    config = {"configurable": {"thread_id": incident_id}, "recursion_limit": 100}
    result = graph.invoke(Command(resume=answer), config, context=deps)
    return _finish(deps, incident_id, result)


def resume_unfinished(deps: Deps, incident_id: str, checkpointer: Any) -> IncidentRun:
    """Carry on with an incident a crash interrupted: from its last checkpoint, or from the
    start when it was claimed but never began. Executed actions are journaled, so none runs twice."""
    graph = build_graph(checkpointer)
    config = {"configurable": {"thread_id": incident_id}, "recursion_limit": 100}
    if not graph.get_state(config).values:
        detail = deps.store.get_incident(incident_id)
        return start_incident(deps, detail.incident.trigger or {}, cluster=detail.incident.cluster,
                              source="watch", checkpointer=checkpointer, incident_id=incident_id,
                              record=True, opened=True)
    recorded = deps.store.load_tape(incident_id)
    if recorded is not None:
        deps = replace(deps, backend=RecordingBackend(deps.backend, Tape.from_jsonl(recorded, incident_id)))
    result = graph.invoke(None, config, context=deps)
    return _finish(deps, incident_id, result)


def pending_approval(deps: Deps, incident_id: str, checkpointer: Any) -> list[dict[str, Any]]:
    """The actions an interrupted incident waits on (empty when it is not waiting)."""
    graph = build_graph(checkpointer)
    snap = graph.get_state({"configurable": {"thread_id": incident_id}})
    out: list[dict[str, Any]] = []
    for intr in snap.interrupts or ():
        out += list((intr.value or {}).get("actions") or [])
    return out


@lru_cache(maxsize=1)
def _in_memory_graph():
    """One compiled graph for runs that need no durable checkpoints (evals, tests)."""
    from langgraph.checkpoint.memory import InMemorySaver

    return build_graph(InMemorySaver())


def _plain(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "__interrupt__"}
