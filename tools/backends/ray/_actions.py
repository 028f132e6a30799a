"""Write tools on a real Ray cluster, and the facts the guard decides on (ActionTarget).

- resubmit: the job submitted again through the Jobs API with its own entrypoint and
  runtime_env and the changes applied (entrypoint `--key=value` arguments, env.* into
  runtime_env.env_vars, entrypoint_num_cpus/gpus/memory and entrypoint_resources.*). The
  new submission id carries the request's idempotency key, so a retry finds the job it
  already created; its metadata names the job it replaces and the incident.
- cancel_job: stop_job. node_drain: the GCS DrainNode call `ray drain-node` makes, with a
  reason naming crashcart and the incident; under KubeRay also a cordon of the Kubernetes
  node that runs the Ray node's pod (its pods are left to Ray's drain, not evicted).
- node_resume: Ray has no call that returns a drained node to service; said so, not faked.
- escalate / notify: recorded and returned, as on Slurm.
"""

from __future__ import annotations

import re
import secrets
import shlex
from typing import TYPE_CHECKING, Any

from crashcart.tools._spec import ToolCall, ToolError
from crashcart.tools.backends.base import ActionTarget, PeopleActions, current_incident, set_dotted
from crashcart.tools.backends.ray import _parse as parse
from crashcart.tools.backends.ray._backend import LINEAGE_KEY, SUBMIT_KEYS
from crashcart.tools.backends.slurm._actions import drain_reason
from crashcart.tools.backends.slurm._submit import set_args
from crashcart.tools.catalog import ActionOutput, CancelInput, NodeWriteInput, ResubmitInput

if TYPE_CHECKING:
    from crashcart.tools.backends.ray._backend import RayBackend

_SUFFIX = re.compile(r"(-cc-[0-9a-zA-Z]+)+$")


def resubmit_id(old: str, request_id: str | None) -> str:
    """`<original>-cc-<key>`: the request's idempotency key, or a fresh one without it."""
    key = re.sub(r"[^0-9a-zA-Z]", "", request_id or "") or secrets.token_hex(6)
    return f"{_SUFFIX.sub('', old)}-cc-{key}"


class Actions(PeopleActions):
    def __init__(self, backend: RayBackend):
        self.b = backend

    # --- nodes -------------------------------------------------------------------------

    def node_drain(self, a: NodeWriteInput) -> ActionOutput:
        node = self.b.node(a.node)
        if node.state == "down":
            raise ToolError(f"Ray node {node.name} is DEAD ({node.message or 'no message'}); there is nothing to drain")
        if node.state == "draining":
            return ActionOutput(ok=True, message=f"ray drain-node: node {node.name} ({node.node_id}) is already DRAINING")
        reason = drain_reason(a.reason)
        deadline = self.b.settings.drain_deadline_seconds
        deadline_ms = int(self.b.now().timestamp() * 1000) + deadline * 1000 if deadline else 0
        accepted, why = self.b.client.drain(node.node_id, reason, deadline_ms)
        if not accepted:
            raise ToolError(f"Ray refused to drain node {node.name} ({node.node_id}): {why or 'no reason given'}")
        self.b.forget()
        after = self.b.node(node.node_id)
        message = (f"ray drain-node --node-id {node.node_id} --reason DRAIN_NODE_REASON_PREEMPTION "
                   f"--reason-message \"{reason}\": accepted; node {node.name} is now {after.ray_state}")
        if self.b.kube is not None:
            message += "\n" + self._cordon(node, a.reason)
        return ActionOutput(ok=True, message=message)

    def _cordon(self, node: parse.NodeInfo, reason: str) -> str:
        """Cordon the Kubernetes node under a KubeRay pod (found by its pod IP), so that KubeRay
        does not place the replacement pod on the same machine."""
        from crashcart.tools.backends.kubernetes._actions import stamp_annotations
        from crashcart.tools.backends.kubernetes._client import NODE, POD

        api = self.b.kube.api
        pods = [p for p in api.list(POD, None, labels="ray.io/is-ray-node=yes")[0]
                if (p.get("status") or {}).get("podIP") == node.ip]
        host = next(((p.get("spec") or {}).get("nodeName") for p in pods if (p.get("spec") or {}).get("nodeName")), None)
        if host is None:
            return (f"no KubeRay pod has IP {node.ip} (label ray.io/is-ray-node=yes), so no Kubernetes node was "
                    "cordoned")
        api.patch(NODE, None, host, {"spec": {"unschedulable": True},
                                     "metadata": {"annotations": stamp_annotations(reason)}})
        pod = pods[0]["metadata"]
        return f"node/{host} cordoned (it runs pod {pod.get('namespace')}/{pod.get('name')}, Ray node {node.name})"

    def node_resume(self, a: NodeWriteInput) -> ActionOutput:
        node = self.b.node(a.node)
        if node.state not in ("draining", "down"):
            return ActionOutput(ok=True, message=f"Ray node {node.name} is already in service ({node.ray_state})")
        raise ToolError(f"Ray node {node.name} is {node.ray_state}, and Ray has no call that undoes a drain: "
                        "restart the node's raylet (or let the autoscaler replace the node)")

    # --- jobs --------------------------------------------------------------------------

    def cancel_job(self, a: CancelInput) -> ActionOutput:
        d = self.b.details(a.job)
        status = str(d.get("status")).upper()
        if status not in parse.ACTIVE:
            raise ToolError(f"job {a.job!r} is {status}; only pending or running jobs can be stopped")
        self.b.client.stop(a.job)
        return ActionOutput(ok=True, message=f"ray job stop {a.job}: Job '{a.job}' was stopped (it was {status})")

    def resubmit(self, a: ResubmitInput) -> ActionOutput:
        d = self.b.details(a.job)
        new_id = resubmit_id(a.job, a.request_id)
        if self.b.client.job(new_id) is not None:
            # The same request again (crashcart restarted mid-action): answer, don't submit twice.
            return ActionOutput(ok=True, new_job=new_id, message=f"Already submitted as {new_id} (request {a.request_id})")
        self._check_excluded(a.exclude_nodes)
        entrypoint, options, runtime_env = self._apply(d, a.changes)
        metadata = {**(d.get("metadata") or {}), LINEAGE_KEY: a.job,
                    "crashcart_incident": current_incident() or "no-incident"}
        if a.request_id:
            metadata["crashcart_request"] = a.request_id
        try:
            # Never retried blindly: a second submit with a fresh id would be a second job.
            self.b.client.submit(entrypoint=entrypoint, runtime_env=runtime_env or None, metadata=metadata,
                                 submission_id=new_id, **options)
        except ToolError as e:
            if "already exists" in str(e):
                return ActionOutput(ok=True, new_job=new_id, message=f"Already submitted as {new_id} (request {a.request_id})")
            raise
        details = "".join([f"; changes {a.changes}" if a.changes else "",
                           f"; excluding drained {','.join(a.exclude_nodes)}" if a.exclude_nodes else ""])
        return ActionOutput(ok=True, new_job=new_id, message=(
            f"Job '{new_id}' submitted successfully (resubmit of {a.job}{details}; entrypoint: {entrypoint})"))

    def _check_excluded(self, names: list[str]) -> None:
        """Ray places a job's tasks itself: the only way to keep them off a node is to drain it."""
        for name in names:
            node = self.b.node(name)
            if node.state not in ("draining", "down"):
                raise ToolError(f"resubmit cannot keep a Ray job off node {node.name} ({node.ray_state}): Ray "
                                "schedules tasks on any node that has room; drain it first (node_drain)")

    def _apply(self, d: dict[str, Any], changes: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
        command, args = parse.entrypoint_args(d.get("entrypoint") or "")
        if not command:
            raise ToolError(f"job {parse.job_id(d)!r} has no entrypoint to resubmit")
        runtime_env = dict(d.get("runtime_env") or {})
        env = dict(runtime_env.get("env_vars") or {})
        options: dict[str, Any] = {k: d[k] for k in (*SUBMIT_KEYS, "entrypoint_resources") if d.get(k) is not None}
        knobs: dict[str, Any] = {}
        for key, value in changes.items():
            if key.startswith("env."):
                env[key[4:]] = str(value)
            elif key in SUBMIT_KEYS:
                options[key] = value
            elif key.startswith("entrypoint_resources."):
                resources = dict(options.get("entrypoint_resources") or {})
                set_dotted(resources, key.split(".", 1)[1], value)
                options["entrypoint_resources"] = resources
            elif key.startswith("runtime_env."):
                set_dotted(runtime_env, key.split(".", 1)[1], value)
            elif key == "exclude_nodes":
                self._check_excluded([str(v) for v in (value if isinstance(value, list) else [value])])
            else:
                knobs[key] = value
        if env:
            runtime_env["env_vars"] = env
        entrypoint = shlex.join([*command, *set_args(args, knobs)]) if knobs else d["entrypoint"]
        return entrypoint, options, runtime_env

    # --- facts for the guard -------------------------------------------------------------------

    def target(self, call: ToolCall) -> ActionTarget:
        args = call.args
        if node_name := args.get("node"):
            node = self.b.node(str(node_name))
            peers = [n for n in self.b.nodes() if n.group == node.group]
            out = sum(n.state in ("draining", "down") for n in peers)
            return ActionTarget(tool=call.tool, node=node.name, partition=node.group, gpus=node.gpus,
                                partition_nodes=len(peers), partition_unavailable=out,
                                node_unavailable=node.state in ("draining", "down"))
        if job_id := args.get("job"):
            d = self.b.details(str(job_id))
            row = self.b.row(d)
            earlier = [self.b.row(e) for e in self.b.attempts(d)]
            try:
                lines = self.b.driver_log(row.job)
            except ToolError:
                lines = []
            _, checkpoints = self.b.progress(lines)
            last = max((c.time for c in checkpoints), default=None)
            # A run with no recorded end is counted: unknown must not look like progress.
            restarts = sum(last is None or r.end_time is None or r.end_time > last for r in earlier)
            return ActionTarget(tool=call.tool, job=row.job, partition=row.partition, user=row.user, gpus=row.gpus,
                                restarts_without_progress=restarts, last_checkpoint=last)
        return ActionTarget(tool=call.tool)
