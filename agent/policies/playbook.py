"""The offline, deterministic policy: it executes the playbooks.

It investigates in rounds. Each round it matches every label's signals against
what it has seen, and asks for the steps the candidate labels name to confirm
or rule themselves out (the kernel logs of the job's nodes, GPU telemetry,
earlier attempts, the jobs upstream). When a round asks for nothing new it
concludes, preferring the cause over the symptom by playbook priority.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from crashcart.agent.policies import fanout
from crashcart.agent.policies.capacity import demand_forecast, idle_gpus
from crashcart.agent.policies.constraint import autoscaler_at_max, binding_constraint, priority_factors
from crashcart.agent.policies.conditions import CONDITIONS, idle_gpu_nodes, partition_peers
from crashcart.agent.policies.evidence import SUSPICIOUS, Evidence, RUNNING_STATES, build_evidence, call_key, mounted_claims
from crashcart.agent.policies.matching import FINISHED_STATES, LabelMatch, match_label, near_miss, waits_for_config
from crashcart.agent.policies.no_fault import Standing, load_table, standing, unexplained
from crashcart.agent.policies.remedy import ESCALATION_TEAM, captured_values, compute_changes, fallback_team, plan_actions
from crashcart.agent.policies.scope import one_node
from crashcart.agent.policies.topology import rack_peers
from crashcart.agent.state import Diagnosis
from crashcart.playbooks import KnowledgeBase, load_playbooks
from crashcart.tools._spec import REGISTRY, ToolCall

MAX_NODES_PER_STEP = 16
MAX_PEER_JOBS = 6
MAX_RUNNING_PEERS = 2
MAX_ATTEMPT_LOGS = 2
# Rack peers read to tell a switch from a cable: a few more nodes showing the same fault is enough.
MAX_RACK_PEERS = 4

# What a pod shows when the node under it stopped answering (the kubelet can no longer report it).
LOST_POD_STATES = {"UNKNOWN", "NODELOST"}
# What a node's loss alone calls for (node_failure: drain it and rerun elsewhere; a reclaimed spot
# node: rerun), which a job change computed for the same loss (a cut save) rides on.
NODE_LOSS_REMEDIES = {"exclude_node", "resubmit"}
HEALTHY = "healthy"
# What a Kubernetes object's name can be (RFC 1123 subdomain): a string outside it names none.
KUBE_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
# Each answers a capacity question: (the answer, its evidence lines, a chart or None).
ANALYSES = {
    "demand_forecast": lambda ev: (*demand_forecast(ev), None),
    "idle_gpus": lambda ev: (*idle_gpus(ev), None),
    "binding_constraint": binding_constraint,
    "autoscaler_at_max": autoscaler_at_max,
    "priority_factors": priority_factors,
}


def _finished_first(attempts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Earlier attempts with a number, the ones that finished first, then the newest: one log is
    read, the run most likely to have reported the value."""
    numbered = [a for a in attempts if a.get("attempt")]
    done = [a for a in reversed(numbered) if str(a.get("state", "")).upper() in FINISHED_STATES]
    return done + [a for a in reversed(numbered) if a not in done]


class PlaybookPolicy:
    name = "playbook"

    def __init__(self, kb: KnowledgeBase | None = None, max_tool_calls: int = 40):
        self.kb = kb or load_playbooks()
        self.max_tool_calls = max_tool_calls

    # --- investigate ------------------------------------------------------

    def next_calls(self, state: dict[str, Any], now: datetime | None, backend: str) -> list[ToolCall]:
        observations = state.get("observations") or []
        ev = build_evidence(observations, state["trigger"], now)
        budget = self.max_tool_calls - len(observations)
        if budget <= 0:
            return []
        candidates = self._candidates(ev) if observations else []
        wanted = self._baseline_calls(ev, backend, first=not observations, leader=candidates[0] if candidates else None)
        if observations:
            for match in candidates:
                wanted += fanout.worth_taking(match, candidates, self._steps(match, ev, backend))
            if (candidates and candidates[0].entry.label.remedy.kind == "exclude_node"
                    and not self._rack_reads_pending(candidates[0], ev, backend)):
                # One cause, every victim: the leading suspect node's other jobs (any user or
                # namespace) are rerun too, so list them (once its rack peers said it is the node's).
                wanted += [ToolCall(tool="list_jobs", args={"node": e[5:]}) for e in candidates[0].entities("node")[:2]]
            if not candidates and self._failed_focus(ev) and not self._unread(wanted, ev):
                # The sweep waits for the reads about the job itself still going out (the events
                # of its workload, found by name in the first round): they often say why at once.
                wanted += self._sweep(ev, backend)
            if any(waits_for_config(entry, ev) for entry in self.kb):
                wanted += [ToolCall(tool="job_config", args={"job": j}) for j in ev.focus_jobs()[:2]]
        fresh: list[ToolCall] = []
        for call in wanted:
            key = call_key(call.tool, call.args)
            if key in ev.calls or any(call_key(c.tool, c.args) == key for c in fresh):
                continue
            if backend not in REGISTRY.get(call.tool).backends:
                continue
            fresh.append(call)
        if not fresh and observations and not candidates and not self._failed_focus(ev):
            # About to conclude with nothing recognised: before saying "could not tell" about a job
            # that waits or stalls, look once where a person would next (never before a round asks
            # for nothing else, so a job whose progress shows is not swept).
            fresh = [c for c in self._unexplained_sweep(ev, backend)
                     if call_key(c.tool, c.args) not in ev.calls and backend in REGISTRY.get(c.tool).backends]
        return fanout.bound(fresh, ev, candidates, self.kb)[:budget]

    def _baseline_calls(self, ev: Evidence, backend: str, first: bool, leader: LabelMatch | None = None) -> list[ToolCall]:
        """What any on-call engineer looks at first for this kind of trigger (`leader`: the label
        leading so far, if any)."""
        t = ev.trigger
        calls: list[ToolCall] = []
        if t["kind"] == "capacity_review":
            calls.append(ToolCall(tool="job_history", args={"days": 30}))
            calls.append(self._node_listing(backend, {}))
            return calls
        if t["kind"] == "chat" or (t["kind"] == "node_alert" and not t.get("job")):
            calls.append(ToolCall(tool="list_jobs", args={}))
        if t["kind"] == "chat" and not first and ev.unmatched_names():
            # The question names something no job is called ("is gpu-b07 healthy?"): is it a node?
            calls.append(self._node_listing(backend, {}))
        for node in ev.focus_nodes():
            calls += [
                ToolCall(tool="kernel_log", args={"node": node}),
                ToolCall(tool="nvidia_smi_query", args={"node": node}),
                self._node_listing(backend, {"node": node}),
            ]
            if backend == "kubernetes":
                # A node that stopped reporting says so only in its events (NodeNotReady).
                calls.append(ToolCall(tool="kubectl_events", args={"object": f"node/{node}"}))
        for job in ev.focus_jobs():
            calls += self._job_calls(job, ev, backend, leader=leader)
        if any(r.state.upper() in LOST_POD_STATES for j in ev.focus_jobs() for r in ev.replicas(j)):
            # A peer pod whose node stopped answering: are its nodes down, one or several together?
            calls.append(self._node_listing(backend, {}))
        for job in ev.upstream_jobs():
            calls += self._job_calls(job, ev, backend, upstream=True)
        if t["kind"] == "job_stalled":
            # A slow or silent job: the first suspect is a GPU dragging every rank.
            calls += [ToolCall(tool="nvidia_smi_query", args={"node": n}) for n in ev.relevant_nodes()[:MAX_NODES_PER_STEP]]
        return calls

    def _job_calls(self, job: str, ev: Evidence, backend: str, upstream: bool = False,
                   leader: LabelMatch | None = None) -> list[ToolCall]:
        pending = ev.trigger["kind"] == "job_pending" and not upstream
        if backend == "slurm":
            calls = [ToolCall(tool="sacct", args={"job": job})]
        elif backend == "kubernetes":
            calls = [ToolCall(tool="kubectl_describe", args={"kind": "pod", "name": job})]
        else:
            calls = [ToolCall(tool="ray_job_status", args={"job": job})]
        facts = ev.jobs.get(job)
        # A Ray job's pods are Kubernetes' business only under KubeRay: their events say why pods
        # never started or were killed from outside. A job whose own status and log already name
        # a cause needs no second account of its end, nor a running job nothing points at yet.
        explained = leader is not None and not leader.entry.label.symptom
        running = facts is not None and facts.state.upper() in RUNNING_STATES
        no_events = backend == "ray" and facts is not None and (explained or (running and leader is None))
        if backend != "slurm" and not upstream and not no_events and not ev.no_kubernetes:
            # Kubernetes objects (a RayJob, its pods) carry the job's name, and its id only where
            # the id could name one: Ray's `raysubmit_...` ids never do.
            # A running pod nothing points at yet has its own events read; its workload's (the
            # Job's, the PyTorchJob's) tell why pods never started or ended, which it has not.
            workload = facts is not None and facts.name and facts.name != job and not (running and leader is None)
            names = [job] + ([facts.name] if workload else [])
            calls += [ToolCall(tool="kubectl_events", args={"object": n}) for n in names if KUBE_NAME.match(n)]
        never_ran = pending or (facts is not None and facts.state.upper() == "PENDING")
        if not never_ran:
            calls.append(ToolCall(tool="get_logs", args={"job": job}))
        if ev.trigger["kind"] == "job_stalled" and not upstream:
            calls.append(ToolCall(tool="training_progress", args={"job": job}))
        return calls

    def _node_listing(self, backend: str, args: dict[str, Any]) -> ToolCall:
        name = {"slurm": "sinfo", "kubernetes": "kubectl_get_nodes", "ray": "ray_list_nodes"}[backend]
        return ToolCall(tool=name, args=args)

    def _steps(self, match: LabelMatch, ev: Evidence, backend: str) -> list[ToolCall]:
        calls: list[ToolCall] = []
        # A job the focus job waits on, where the label's evidence is, is looked at like the focus.
        ups = ev.upstream_jobs()
        jobs = ev.focus_jobs() + [e[4:] for e in match.entities("job") if e[4:] in ups]
        for step in match.entry.label.investigate:
            if step.when and not CONDITIONS[step.when](ev):
                continue
            if ev.no_kubernetes and step.tool.startswith("kubectl_"):
                continue  # a plain Ray cluster already said it has no Kubernetes API
            if step.scope in {"job", "job_attempts"}:
                targets = [{"job": j} for j in jobs]
            elif step.scope == "job_nodes":
                targets = [{"node": n} for n in ev.relevant_nodes()[:MAX_NODES_PER_STEP]]
            elif step.scope == "node":
                nodes = [e[5:] for e in match.entities("node")] or ([ev.trigger["node"]] if ev.trigger.get("node") else [])
                targets = [{"node": n} for n in nodes[:MAX_NODES_PER_STEP]]
            elif step.scope == "node_jobs":
                targets = [{"node": n} for n in ([e[5:] for e in match.entities("node")] or ev.relevant_nodes())[:4]]
            elif step.scope == "upstream_jobs":
                targets = [{"job": j} for j in ev.upstream_jobs()]
            elif step.scope == "all_nodes":
                targets = [{"node": n} for n, row in ev.nodes.items() if row.get("gpus")][:MAX_NODES_PER_STEP]
            elif step.scope == "partition_jobs":
                targets = [{"job": j} for j in ev.partition_jobs()]
            elif step.scope == "partition_peers":
                targets = [{"node": n} for n in partition_peers(ev)]
            elif step.scope == "idle_gpu_nodes":
                targets = [{"node": n} for n in idle_gpu_nodes(ev)[:MAX_NODES_PER_STEP]]
            elif step.scope == "earlier_good_runs":
                targets = [{"job": r} for j in jobs for r in ev.earlier_good_runs(j)[:1]]
            elif step.scope == "owner_good_runs":
                targets = [{"job": r} for j in jobs for r in ev.owner_good_runs(j)[:2]]
            elif step.scope == "running_peers":
                targets = [{"job": j} for j in ev.running_peers()[:MAX_RUNNING_PEERS]]
            elif step.scope == "failed_peers":
                targets = [{"job": j} for j in ev.failed_peers()[:MAX_PEER_JOBS]]
            elif step.scope == "job_claims":
                targets = [{"object": f"persistentvolumeclaim/{c}"} for j in jobs for c in mounted_claims(ev.configs.get(j, {}))]
            elif step.scope == "topology_peers":
                targets = self._topology_targets(step.tool, match, ev, backend)
            elif step.scope == "namespace":
                targets = [{"partition": ev.jobs[j].partition} for j in jobs if j in ev.jobs and ev.jobs[j].partition]
            else:
                targets = [{}]
            for target in targets:
                args = {**step.args, **target}
                if step.tool in {"sinfo", "kubectl_get_nodes", "ray_list_nodes"}:
                    step_call = self._node_listing(backend, {k: v for k, v in args.items() if k in {"node", "partition"}})
                elif step.tool == "kubectl_describe" and "node" in target:
                    step_call = ToolCall(tool="kubectl_describe", args={"kind": "node", "name": target["node"]})
                elif step.tool == "gpu_metrics" and args.get("since") == "week" and ev.now:
                    step_call = ToolCall(tool="gpu_metrics", args={**args, "since": (ev.now - timedelta(days=7)).isoformat()})
                elif step.tool == "gpu_metrics":
                    since, until = ev.focus_window()
                    window = {k: v.isoformat() for k, v in (("since", since), ("until", until)) if v}
                    step_call = ToolCall(tool="gpu_metrics", args={**args, **window})
                elif step.tool == "kubectl_events" and "node" in target:
                    step_call = ToolCall(tool="kubectl_events", args={"object": f"node/{target['node']}"})
                else:
                    step_call = ToolCall(tool=step.tool, args=args)
                calls.append(step_call)
        remedy = match.entry.label.remedy
        if remedy.kind in {"resubmit_with_changes", "preempt"}:
            calls += [ToolCall(tool="job_config", args={"job": j}) for j in jobs]
        if remedy.kind == "preempt":
            running = [j for j, f in ev.jobs.items() if f.state.upper() in RUNNING_STATES and j not in jobs]
            calls += [ToolCall(tool="job_config", args={"job": j}) for j in running[:12]]
        if any(c.compute == "half_precision" for c in remedy.changes.values()):
            # Which dtype the GPUs compute in is in the node listing (their model).
            calls += [self._node_listing(backend, {"node": n}) for n in ev.relevant_nodes()[:MAX_NODES_PER_STEP]]
        history = [s for s in match.entry.label.signals if s.from_history]
        captured = {name for h in match.hits for name in h.captures}
        if remedy.kind == "resubmit_with_changes" and any(
                set(re.compile(s.pattern or "").groupindex) - captured for s in history):
            # A value the failed run never printed (its peak memory) that an earlier run did: the
            # runs that finished first (they report it at their end), then the newest failures.
            # The job's history first (which runs there were), then one run's log.
            calls += [ToolCall(tool="job_history", args={"job": j}) for j in jobs]
            calls += [ToolCall(tool="get_logs", args={"job": j, "attempt": a["attempt"]})
                      for j in jobs if j in ev.jobs for a in _finished_first(ev.jobs[j].attempts)[:1]]
        if any(c.previous_checkpoint or c.compute == "newest_complete_checkpoint" for c in remedy.changes.values()):
            calls += [ToolCall(tool="training_progress", args={"job": j}) for j in jobs]
            # Earlier attempts' logs say which saves finished (the latest attempt's may not).
            calls += [ToolCall(tool="get_logs", args={"job": j, "attempt": a["attempt"]})
                      for j in jobs if j in ev.jobs for a in ev.jobs[j].attempts[-MAX_ATTEMPT_LOGS:]
                      if a.get("attempt")]
        return calls

    @staticmethod
    def _topology_targets(tool: str, match: LabelMatch, ev: Evidence, backend: str) -> list[dict[str, Any]]:
        """A fault on two or more nodes: the node listing (their rack and switch labels), then the
        other nodes of the rack or switch they share, where the same fault shows if it is that
        switch's. Slurm's node listing carries no labels (its topology is in topology.conf)."""
        named = [e[5:] for e in match.entities("node")]
        if len(named) < 2 or backend == "slurm":
            return []
        if tool in fanout.LISTINGS:
            return [{}]
        return [{"node": n} for n in rack_peers(named, ev)[:MAX_RACK_PEERS]]

    def _rack_reads_pending(self, match: LabelMatch, ev: Evidence, backend: str) -> bool:
        """The label still has to read the rack peers of the nodes it names: until then a switch,
        which drains no node and reruns no victim on it, is as likely as the node."""
        for step in match.entry.label.investigate:
            if step.scope != "topology_peers":
                continue
            for target in self._topology_targets(step.tool, match, ev, backend):
                tool = self._node_listing(backend, target).tool if step.tool in fanout.LISTINGS else step.tool
                if call_key(tool, target) not in ev.calls:
                    return True
        return False

    def _sweep(self, ev: Evidence, backend: str) -> list[ToolCall]:
        """Nothing recognised yet: look at the nodes and the job's past before giving up."""
        calls: list[ToolCall] = []
        since, until = ev.focus_window()
        window = {k: v.isoformat() for k, v in (("since", since), ("until", until)) if v}
        for n in ev.relevant_nodes()[:MAX_NODES_PER_STEP]:
            calls += [ToolCall(tool="kernel_log", args={"node": n}), ToolCall(tool="gpu_metrics", args={"node": n, **window})]
        calls += [ToolCall(tool="job_history", args={"job": j}) for j in ev.focus_jobs()]
        # The job's own settings, too: a config at odds with its GPU allocation (more ranks per
        # node than GPUs) fails with an error that names neither. A job given no GPUs (an MPI
        # launcher, a CPU stage) cannot be at odds with one.
        calls += [ToolCall(tool="job_config", args={"job": j}) for j in ev.focus_jobs()
                  if j not in ev.jobs or ev.jobs[j].gpus > 0]
        return calls

    def _unexplained_sweep(self, ev: Evidence, backend: str) -> list[ToolCall]:
        """A waiting job nothing explains: the nodes (is there room?) and its own request. A stalled
        one: its nodes' kernel logs (a hung rank's node often says why)."""
        calls: list[ToolCall] = []
        for s in unexplained(ev, self.kb):
            if s.unexplained == "pending":
                calls += [self._node_listing(backend, {}), ToolCall(tool="job_config", args={"job": s.job})]
            elif s.unexplained == "stalled":
                calls += [ToolCall(tool="kernel_log", args={"node": n}) for n in ev.relevant_nodes()[:MAX_NODES_PER_STEP]]
        return calls

    @staticmethod
    def _unread(calls: list[ToolCall], ev: Evidence) -> bool:
        """Some of these calls about the focus jobs (their events, log, status) were not made yet."""
        about = set(ev.focus_jobs()) | {f.name for j in ev.focus_jobs() if (f := ev.jobs.get(j)) and f.name}
        return any(call_key(c.tool, c.args) not in ev.calls and (c.args.get("job") in about or c.args.get("object") in about)
                   for c in calls)

    def _failed_focus(self, ev: Evidence) -> bool:
        return any(ev.jobs[j].failed for j in ev.focus_jobs() if j in ev.jobs)

    def _candidates(self, ev: Evidence) -> list[LabelMatch]:
        matches = [m for entry in self.kb if (m := match_label(entry, ev))]
        return sorted(matches, key=lambda m: (-m.entry.label.priority, -m.score, m.name))

    # --- conclude ---------------------------------------------------------

    def diagnose(self, state: dict[str, Any], now: datetime | None) -> tuple[Diagnosis, list[ToolCall]]:
        ev = build_evidence(state.get("observations") or [], state["trigger"], now)
        ambiguous = {t: jobs for t, jobs in ev.shortened_ids().items() if len(jobs) > 1}
        if ambiguous and not ev.focus_jobs() and not ev.focus_nodes():
            # Several jobs' ids start with what the question names: ask, never pick one.
            return self._ambiguous(ev, ambiguous), []
        candidates = self._candidates(ev)
        if not candidates:
            diagnosis = self._no_match(ev)
            diagnosis.ruled_out = [m for entry in self.kb if (m := near_miss(entry, ev))][:6]
            team = ESCALATION_TEAM.get(diagnosis.remedy)
            if team is None:
                return diagnosis, []
            return diagnosis, [ToolCall(tool="escalate", args={
                "team": team, "summary": diagnosis.summary, "severity": "medium",
                "evidence": diagnosis.evidence[:8],
                "reason": "crashcart: unrecognized failure" if team == "user" else "crashcart: could not tell",
            })]
        best = candidates[0]
        label = best.entry.label
        # A storage error every victim saw on one node, with jobs elsewhere fine: that node's client.
        scope = one_node(best, ev)
        remedy = label.one_node.remedy if scope and label.one_node else label.remedy
        root = f"node:{scope.node}" if scope else self._root_cause(best, ev)
        evidence = list(dict.fromkeys(h.line for h in sorted(best.hits, key=lambda h: h.signal)))
        if scope:
            evidence = scope.lines(ev) + evidence
        path = list(dict.fromkeys(h.call for h in best.hits))
        signals = sorted({f"{label.signals[h.signal].where}#{h.signal}" for h in best.hits})
        root_node = root[5:] if root and root.startswith("node:") else None
        summary = f"{label.title} ({root or 'cause unknown'})"
        if remedy.advice:
            summary += f". {remedy.advice}"
        chart = None
        if label.analysis:
            answer, lines, chart = ANALYSES[label.analysis](ev)
            summary, evidence = f"{label.title}: {answer}", lines + evidence
            if chart and chart.get("binds"):
                signals.append(f"analysis#{chart['binds']}")
            # An analysis may name what its answer rests on with nothing to draw (no hourly series).
            chart = chart if chart and chart.get("series") else None
        changes: dict[str, Any] = {}
        remedy_kind = remedy.kind
        if remedy.while_jobs_wait and ev.trigger.get("kind") == "chat" and any(
                f.state.upper() == "PENDING" for f in ev.jobs.values()):
            remedy_kind = remedy.while_jobs_wait
        fixed_job = self._fixed_job(root, ev)
        if remedy.kind == "resubmit_with_changes" and fixed_job:
            changes, notes = compute_changes(remedy, ev, fixed_job, captured_values(best), state.get("backend", "slurm"))
            if changes and label.job_when_fixed and not scope:
                old_root, root = root, f"job:{fixed_job}"
                summary = summary.replace(f"{label.title} ({old_root or 'cause unknown'})", f"{label.title} ({root})", 1)
            if not changes:
                # Resubmitting it unchanged would fail the same way: escalate with the evidence.
                remedy_kind = f"escalate_{fallback_team(label.team)}"
                notes.append("no change to the job's own settings could be computed from the evidence")
            if notes:
                summary += " (" + "; ".join(notes) + ")"
        if remedy_kind == "exclude_node" and not root_node:
            # A node fault without the node: never drain at random; a person looks.
            remedy_kind = f"escalate_{label.team}" if label.team in {"hardware", "network", "infra"} else "escalate_infra"
        diagnosis = Diagnosis(
            label=best.name, family=best.entry.family, root_cause=root, remedy=remedy_kind,
            confidence=round(min(0.95, 0.55 + 0.15 * best.matched_signals), 2),
            retriable=label.retriable, evidence=evidence[:12], evidence_path=path, signals=signals, summary=summary,
            changes=changes, team=label.team, candidates=[m.name for m in candidates[1:6]], chart=chart,
        )
        node_cause = self._node_cause(best, candidates, ev, root) if changes and remedy_kind == remedy.kind else None
        if node_cause:
            # The job's change composed with what the node's loss alone calls for: a dead node is
            # drained and kept out of the rerun whatever the job was doing when it died (a save),
            # a reclaimed one only rerun.
            remedy = node_cause.entry.label.remedy
            remedy_kind = remedy.kind
        actions = plan_actions(best, remedy_kind, ev, root_node, summary, evidence, state.get("backend", "slurm"), remedy,
                               fixed_job, changes if node_cause else None)
        return diagnosis, actions

    def _node_cause(self, best: LabelMatch, candidates: list[LabelMatch], ev: Evidence,
                    root: str | None) -> LabelMatch | None:
        """For a label blaming a node whose remedy is a job change (a save the node's loss cut
        short): the highest other matching label for the same node's loss itself (node_failure,
        spot_reclaimed), whose node actions the change then rides on."""
        if best.entry.label.root_cause != "node" or not root or not root.startswith("node:"):
            return None
        for m in candidates:
            label = m.entry.label
            if (m is not best and label.root_cause == "node" and label.remedy.kind in NODE_LOSS_REMEDIES
                    and self._root_cause(m, ev) == root):
                return m
        return None

    @staticmethod
    def _fixed_job(root: str | None, ev: Evidence) -> str | None:
        """The job a config fix goes to: the job the incident is about, unless the root cause is a
        job it waits on (its --dependency), which is then the one that never starts as it is."""
        focus = ev.focus_jobs()
        if root and root.startswith("job:") and root[4:] in ev.upstream_jobs() and root[4:] in ev.jobs:
            return root[4:]
        return focus[0] if focus else None

    def _root_cause(self, match: LabelMatch, ev: Evidence) -> str | None:
        kind = match.entry.label.root_cause
        if kind == "cluster" or self._shared(match):
            return "cluster"
        if kind == "node":
            nodes = match.entities("node")
            if nodes:
                return nodes[0]
            # The error names no node by a name the cluster uses (Ray's "its node has died" gives an
            # id and an address): the node is the one of the job's nodes that died under it.
            gone = ev.gone_nodes()
            if len(gone) > 1:
                gone = [n for n in gone if n in fanout.nodes_named_in_errors(ev)] or gone
            if len(gone) == 1:
                return f"node:{gone[0]}"
            job_nodes = ev.relevant_nodes()
            return f"node:{job_nodes[0]}" if len(job_nodes) == 1 else None
        if kind == "upstream":
            ups = ev.upstream_jobs()
            jobs = [e for e in match.entities("job") if e[4:] in ups]
            return jobs[0] if jobs else (f"job:{ups[0]}" if ups else None)
        jobs = match.entities("job")
        focus = ev.focus_jobs()
        return jobs[0] if jobs else (f"job:{focus[0]}" if focus else None)

    @staticmethod
    def _shared(match: LabelMatch) -> bool:
        """The same required error in enough jobs' own output: their common dependency is the cause."""
        need = match.entry.label.shared_after_jobs
        if not need:
            return False
        required = {i for i, s in enumerate(match.entry.label.signals) if s.required}
        jobs = {h.entity for h in match.hits if h.signal in required and h.entity.startswith("job:")}
        return len(jobs) >= need

    @staticmethod
    def _ambiguous(ev: Evidence, ambiguous: dict[str, list[str]]) -> Diagnosis:
        token, jobs = next(iter(ambiguous.items()))
        described = [f"{j} ({', '.join(x for x in (ev.jobs[j].name, ev.jobs[j].user, ev.jobs[j].state) if x)})" for j in jobs]
        more = f" and {len(jobs) - 6} more" if len(jobs) > 6 else ""
        return Diagnosis(
            label="unrecognized", family="none", root_cause=None, remedy="none", confidence=0.1,
            summary=f"{token} is the start of {len(jobs)} jobs' ids: {'; '.join(described[:6])}{more}. "
                    "crashcart does not guess which one is meant; ask again with the full id (or more of it).",
            evidence=[f"asked about: {t} (matches {', '.join(js[:6])})" for t, js in ambiguous.items()][:5],
        )

    def _undetermined(self, ev: Evidence, open_jobs: list[Standing], unseen: list[str]) -> Diagnosis:
        """"Could not tell": what is unexplained, what was read about it, and who looks."""
        kind = open_jobs[0].unexplained if open_jobs else "missing"
        route = load_table().undetermined[kind]
        if open_jobs:
            what = {"pending": "waits to start", "stalled": "shows no progress", "missing": "has no record in the scheduler",
                    "other": "is in a state"}[kind]
            subject = f"Job {open_jobs[0].job} {what}"
        else:
            subject = (f"Node {', '.join(unseen[:3])} was not found in what the cluster returned" if unseen
                       else "The cluster returned no jobs or nodes to look at")
        summary = (f"Could not tell: {subject} and nothing crashcart read explains it (no playbook recognises it, and it "
                   f"is not a wait by design). Handed to {route.team} with what was read; this is not a healthy verdict.")
        evidence = [s.why for s in open_jobs] + [f"node {n}: not in the cluster's node listing" for n in unseen]
        for s in open_jobs:
            # What was read about the job itself: the scheduler's and the kubelet's words, its last log line.
            for doc in ev.docs:
                if doc.entity == f"job:{s.job}" and doc.source in {"events", "status_message", "log"} and doc.lines:
                    evidence.append(doc.lines[-1].strip()[:300])
        evidence += _capacity_lines(ev)
        about = {f"job:{s.job}" for s in open_jobs} | {f"node:{n}" for j in open_jobs for n in ev.relevant_nodes()}
        return Diagnosis(
            label="unrecognized", family=route.family, root_cause=None, remedy=f"escalate_{route.team}",
            confidence=0.2, summary=summary, evidence=list(dict.fromkeys(evidence))[:12], team=route.team,
            evidence_path=list(dict.fromkeys(d.call for d in ev.docs if d.entity in about)),
        )

    def _no_match(self, ev: Evidence) -> Diagnosis:
        focus = [ev.jobs[j] for j in ev.focus_jobs() if j in ev.jobs]
        failed = [f for f in focus if f.failed]
        nodes = ev.focus_nodes()
        unmatched = ev.unmatched_names()
        if not failed and not focus and not nodes and unmatched:
            # A question about something this cluster has nothing called: "could not tell", never "healthy".
            return Diagnosis(
                label="unrecognized", family="none", root_cause=None, remedy="none", confidence=0.1,
                summary=f"Nothing in this cluster's jobs or nodes is called {', '.join(unmatched[:3])} (by id or name), "
                        "so crashcart could not tell; ask with the job id or the node's name as the scheduler shows it.",
                evidence=[f"asked about: {name}" for name in unmatched[:5]],
            )
        if not failed:
            open_jobs = unexplained(ev, self.kb)
            unseen = [n for n in nodes if n not in ev.nodes and not any(d.entity == f"node:{n}" for d in ev.docs)]
            if open_jobs or unseen or not (ev.jobs or ev.nodes):
                # Nothing recognised is not nothing wrong: a job that waits or stalls for no reason
                # shown, or a subject nothing was read about, is "could not tell", never "healthy".
                return self._undetermined(ev, open_jobs, unseen)
            # Nothing is wrong, and the verdict says what shows it: what was asked about, and why fine.
            subject = f"job:{focus[0].job}" if focus else (f"node:{nodes[0]}" if nodes else None)
            return Diagnosis(
                label=HEALTHY, family="none", root_cause=subject, remedy="none", confidence=0.6,
                summary="No fault found: the jobs in question are running, queued as expected or finished.",
                evidence=[standing(ev, f.job, self.kb).why for f in focus][:5],
            )
        suspicious = [
            line.strip()[:300] for d in ev.docs for line in d.lines if SUSPICIOUS.search(line)
        ]
        return Diagnosis(
            label="unrecognized", family="user_code", root_cause=f"job:{failed[0].job}",
            remedy="escalate_user", confidence=0.2,
            summary=f"Job {failed[0].job} ended {failed[0].state} and no playbook recognises why; "
            "the owner should look at the lines below.",
            evidence=list(dict.fromkeys(suspicious))[-10:],
        )


def _capacity_lines(ev: Evidence) -> list[str]:
    """What the node listing showed, one line: whether room for a waiting job existed."""
    if not ev.nodes:
        return []
    by_state: dict[str, int] = {}
    for row in ev.nodes.values():
        state = str(row.get("state") or "unknown").lower()
        by_state[state] = by_state.get(state, 0) + 1
    return ["nodes read: " + ", ".join(f"{n} {s}" for s, n in sorted(by_state.items()))]
