"""Write tools on a real Kubernetes cluster, and the facts the guard decides on (ActionTarget).

- node_drain: cordon (spec.unschedulable) then evict every pod on the node through the
  Eviction API, so PodDisruptionBudgets hold: a 429 is retried until the drain's timeout,
  never forced with a delete. DaemonSet and mirror pods stay, as with `kubectl drain`.
- node_resume: uncordon.
- resubmit: the workload's own manifest (the Job, PyTorchJob, RayJob or bare Pod that owns
  the failed pod) created again under a new name with the changes applied (_manifest.py),
  a lineage annotation naming what it replaces, and the request id as a label, so a retry
  after a crash finds the first one instead of creating a second.
- cancel_job: delete the workload with Background propagation (a batch/v1 Job deleted
  through the API orphans its pods by default; they must go with it).
Every write carries annotations naming crashcart and the incident.
"""

from __future__ import annotations

import hashlib
import re
import time
from typing import TYPE_CHECKING, Any

from crashcart.tools import render
from crashcart.tools._spec import ToolCall, ToolError
from crashcart.tools.backends.base import ActionTarget, PeopleActions, current_incident
from crashcart.tools.backends.kubernetes import _manifest as manifest
from crashcart.tools.backends.kubernetes import _parse as parse
from crashcart.tools.backends.kubernetes._client import BY_KIND, JOB, NODE, POD, WORKLOADS, Absent, NotFound, TooManyRequests
from crashcart.tools.catalog import ActionOutput, CancelInput, NodeWriteInput, ResubmitInput

if TYPE_CHECKING:
    from crashcart.tools.backends.kubernetes._backend import KubernetesBackend, Subject

UNAVAILABLE = ("down", "drained", "draining", "not_ready", "cordoned")
_MAX_NAME = 63  # a Job's name ends up in a label value


def stamp_annotations(reason: str | None = None) -> dict[str, str]:
    out = {parse.INCIDENT: current_incident() or "no-incident", "crashcart.io/by": "crashcart"}
    if reason:
        out[parse.CORDON_REASON] = " ".join(reason.split())[:500]
    return out


def request_label(request_id: str) -> str:
    """A label value (63 chars, alphanumeric) that stands for the request id."""
    return hashlib.sha256(request_id.encode()).hexdigest()[:40]


class Actions(PeopleActions):
    def __init__(self, backend: KubernetesBackend):
        self.b = backend
        self.api = backend.api

    # --- nodes -------------------------------------------------------------------------

    def node_drain(self, a: NodeWriteInput) -> ActionOutput:
        node = self.b.node(a.node)
        was = bool((node.get("spec") or {}).get("unschedulable"))
        self.api.patch(NODE, None, a.node, {"spec": {"unschedulable": True},
                                            "metadata": {"annotations": stamp_annotations(a.reason)}})
        lines = [f"node/{a.node} {'already ' if was else ''}cordoned"]
        pods = [p for p in self.api.list(POD, None, fields=f"spec.nodeName={a.node}")[0] if _evictable(p)]
        drain = self.b.settings.drain
        deadline = time.monotonic() + drain.eviction_timeout_seconds
        blocked: dict[str, str] = {}
        pending = list(pods)
        while pending:
            still = []
            for p in pending:
                ns, name = parse.meta(p)["namespace"], parse.meta(p)["name"]
                try:
                    self.api.evict(ns, name)
                    lines.append(f"evicting pod {ns}/{name}")
                    blocked.pop(f"{ns}/{name}", None)
                except NotFound:
                    blocked.pop(f"{ns}/{name}", None)  # gone already
                except TooManyRequests as e:
                    blocked[f"{ns}/{name}"] = str(e).split(": ", 1)[-1]
                    still.append(p)
            pending = still
            if not pending or time.monotonic() + drain.retry_seconds > deadline:
                break
            time.sleep(drain.retry_seconds)
        if blocked:
            waited = int(drain.eviction_timeout_seconds)
            lines += [f"error when evicting pod {k} (will not force it): {v}" for k, v in blocked.items()]
            lines.append(f"node/{a.node} cordoned but not drained: {len(blocked)} pod(s) still protected by a "
                         f"PodDisruptionBudget after {waited}s")
            return ActionOutput(ok=False, message="\n".join(lines))
        lines.append(f"node/{a.node} drained")
        return ActionOutput(ok=True, message="\n".join(lines))

    def node_resume(self, a: NodeWriteInput) -> ActionOutput:
        node = self.b.node(a.node)
        if not (node.get("spec") or {}).get("unschedulable"):
            return ActionOutput(ok=True, message=f"node/{a.node} already uncordoned")
        annotations = {**stamp_annotations(), parse.CORDON_REASON: None}
        self.api.patch(NODE, None, a.node, {"spec": {"unschedulable": None}, "metadata": {"annotations": annotations}})
        return ActionOutput(ok=True, message=f"node/{a.node} uncordoned")

    # --- jobs --------------------------------------------------------------------------

    def _workload(self, s: Subject, verb: str) -> dict[str, Any]:
        if s.workload is None:
            ref = parse.owner(s.pod) or {}
            raise ToolError(f"cannot {verb} pod {parse.meta(s.pod)['name']}: it belongs to {ref.get('kind')} "
                            f"{ref.get('name')}, whose controller re-creates it; that is not a training workload "
                            "crashcart manages")
        return s.workload

    def cancel_job(self, a: CancelInput) -> ActionOutput:
        s = self.b.subject(a.job)
        job = self.b.subject_job(s)
        if not render.is_active(job.state) and job.state != "CrashLoopBackOff":
            raise ToolError(f"job {a.job!r} is {job.state}; only pending or running jobs can be cancelled")
        w = self._workload(s, "cancel")
        kind = BY_KIND.get((w.get("apiVersion"), w.get("kind")))
        m = parse.meta(w)
        # Stamp who did it before it goes (the deletion event and any audit log show it).
        self.api.patch(kind, m.get("namespace"), m["name"], {"metadata": {"annotations": stamp_annotations()}})
        self.api.delete(kind, m.get("namespace"), m["name"], propagation="Background")
        what = f'{kind.kind.lower()}.{kind.group}' if kind.group else kind.kind.lower()
        return ActionOutput(ok=True, message=f'{what} "{m["name"]}" deleted (propagation Background)')

    def resubmit(self, a: ResubmitInput) -> ActionOutput:
        for name in a.exclude_nodes:
            self.b.node(name)
        s = self.b.subject(a.job)
        w = self._workload(s, "resubmit")
        kind = BY_KIND.get((w.get("apiVersion"), w.get("kind")))
        ns = parse.meta(w).get("namespace")
        if a.request_id:
            done = self.api.list(kind, ns, labels=f"{parse.REQUEST_LABEL}={request_label(a.request_id)}")[0]
            if done:
                # The same request again (crashcart restarted mid-action): answer, don't create twice.
                name = parse.meta(done[0])["name"]
                return ActionOutput(ok=True, new_job=name, message=f"Already submitted as {name} (request {a.request_id})")
        body = manifest.apply(manifest.clean(w), a.changes, a.exclude_nodes)
        old = parse.meta(w)["name"]
        m = body["metadata"]
        m["name"] = self._new_name(kind, ns, old)
        m.setdefault("annotations", {}).update({**stamp_annotations(), parse.RESUBMIT_OF: old,
                                                **({parse.REQUEST: a.request_id} if a.request_id else {})})
        if a.request_id:
            m.setdefault("labels", {})[parse.REQUEST_LABEL] = request_label(a.request_id)
        created = self.api.create(kind, ns, body)
        new = parse.meta(created)["name"]
        details = "".join([f"; changes {a.changes}" if a.changes else "",
                           f"; excluding {','.join(a.exclude_nodes)}" if a.exclude_nodes else ""])
        what = f"{kind.kind.lower()}.{kind.group}" if kind.group else kind.kind.lower()
        return ActionOutput(ok=True, new_job=new, message=f"{what}/{new} created in namespace {ns} (resubmit of {old}{details})")

    def _new_name(self, kind, ns: str | None, old: str) -> str:
        # Resubmits of a resubmit count against the original name: train-r1, train-r2, ...
        root = re.sub(r"(-r\d+)+$", "", old)
        taken = {parse.meta(o)["name"] for o in self.api.list(kind, ns)[0]}
        n = 1
        while True:
            suffix = f"-r{n}"
            name = root[: _MAX_NAME - len(suffix)].rstrip("-.") + suffix
            if name not in taken:
                return name
            n += 1

    # --- facts for the guard -------------------------------------------------------------------

    def target(self, call: ToolCall) -> ActionTarget:
        args = call.args
        if node_name := args.get("node"):
            raw = self.b.node(str(node_name))
            nodes = self.b.node_models()
            node = next(n for n in nodes if n.name == node_name)
            peers = [n for n in nodes if n.partition == node.partition] if node.partition else [node]
            return ActionTarget(tool=call.tool, node=node.name, partition=node.partition, gpus=node.gpus,
                                partition_nodes=len(peers), partition_unavailable=sum(n.state in UNAVAILABLE for n in peers),
                                node_unavailable=node.state in UNAVAILABLE or bool((raw.get("spec") or {}).get("unschedulable")))
        if job_id := args.get("job"):
            s = self.b.subject(str(job_id))
            job = self.b.subject_job(s)
            earlier = [j for j, n in self.b.attempts(s) if n is not None]
            try:
                lines = self.b.read_log(s)
            except ToolError:
                lines = []
            _, checkpoints = self.b.progress(lines)
            last = max((c.time for c in checkpoints), default=None)
            # A run with no recorded end is counted: unknown must not look like progress.
            restarts = sum(last is None or j.end_time is None or j.end_time > last for j in earlier)
            return ActionTarget(tool=call.tool, job=job.id, partition=job.partition, user=job.user, gpus=job.gpus,
                                restarts_without_progress=restarts, last_checkpoint=last)
        return ActionTarget(tool=call.tool)


def _evictable(pod: dict[str, Any]) -> bool:
    """What `kubectl drain --ignore-daemonsets` evicts: not DaemonSet or mirror pods, not finished ones."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    if "kubernetes.io/config.mirror" in (parse.meta(pod).get("annotations") or {}):
        return False
    return (parse.owner(pod) or {}).get("kind") != "DaemonSet"


__all__ = ["Actions", "JOB", "WORKLOADS", "Absent"]
