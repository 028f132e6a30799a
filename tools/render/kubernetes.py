"""Kubernetes as kubectl prints it: pods, nodes, events, and describe of pods, nodes and jobs."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from crashcart.tools.cluster import Event, Job, Node
from crashcart.tools.render._formats import aware, is_active, iso_z, table
from crashcart.tools.render.ray import ray_status


def k8s_age(delta: timedelta) -> str:
    """kubectl's HumanDuration: 90s, 5m30s, 45m, 3h15m, 20h, 3d4h, 30d."""
    seconds = int(delta.total_seconds())
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    return f"{hours // 24}d"


def rfc1123z(dt: datetime) -> str:
    return aware(dt).strftime("%a, %d %b %Y %H:%M:%S %z")


def taint_text(key: str, value: str | None, effect: str) -> str:
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


_WAITING = {"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "ContainerCreating",
            "CreateContainerConfigError", "PodInitializing", "InvalidImageName"}
_TERMINATED = {"OOMKilled", "Error", "Completed", "ContainerCannotRun", "DeadlineExceeded"}


def pod_phase(job: Job) -> str:
    s = job.state.lower()
    for phase in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
        if s == phase.lower():
            return phase
    if job.state == "CrashLoopBackOff":
        return "Running"  # the kubelet restarts the container inside a pod that stays Running
    if job.state in _WAITING or s in ("configuring", "requeued"):
        return "Pending"
    if s in ("completed", "complete"):
        return "Succeeded"
    return "Running" if is_active(job.state) else "Failed"


def pod_status(job: Job) -> str:
    """The STATUS column of `kubectl get pods`: a container's reason when it has one, else the phase."""
    for word in (job.reason, job.state):
        if word in _WAITING or word in _TERMINATED or word == "Evicted":
            return word
    return pod_phase(job)


def k8s_exit_code(job: Job) -> str | None:
    code = job.exit_code
    if code:
        exit_, _, signal = code.partition(":")
        if signal.isdigit() and int(signal):
            return str(128 + int(signal))  # a container killed by signal N exits 128+N
        return exit_
    if "OOMKilled" in (job.reason, job.state):
        return "137"
    return "0" if pod_phase(job) == "Succeeded" else None


def node_ready(node: Node) -> str:
    return {"not_ready": "False", "down": "Unknown"}.get(node.state, "True")


def node_status(node: Node) -> str:
    status = "Ready" if node_ready(node) == "True" else "NotReady"
    if node.state in ("cordoned", "drained", "draining"):
        status += ",SchedulingDisabled"
    return status


def node_roles(node: Node) -> str:
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix):] for k in node.labels if k.startswith(prefix))
    return ",".join(roles) or "<none>"


def node_taints(node: Node) -> list[str]:
    return [taint_text(t.key, t.value, t.effect) for t in node.taints]


def kubectl_nodes_lines(nodes: Iterable[Node]) -> list[str]:
    """`kubectl get nodes -L <pool>` with GPU and taint columns; no creation time or kubelet
    version is recorded in a scenario, so those print as kubectl prints a missing value."""
    rows = [
        (n.name, node_status(n), node_roles(n), "<unknown>", "<unknown>", n.gpus,
         n.partition or "<none>", ",".join(node_taints(n)) or "<none>")
        for n in nodes
    ]
    return table(["NAME", "STATUS", "ROLES", "AGE", "VERSION", "GPU", "POOL", "TAINTS"], rows)


def event_parts(obj: str) -> tuple[str, str | None, str]:
    """"pod/train/llama-0" -> ("pod", "train", "llama-0"); "node/gpu-b07" -> ("node", None, ...)."""
    parts = obj.split("/")
    if len(parts) >= 3:
        return parts[0], parts[1], "/".join(parts[2:])
    if len(parts) == 2:
        return parts[0], None, parts[1]
    return "", None, obj


def events_lines(events: Sequence[Event], now: datetime, namespace_of: Callable[[Event], str | None],
                 all_namespaces: bool, namespace: str | None = None) -> list[str]:
    """`kubectl get events` (with -A: a NAMESPACE column first)."""
    if not events:
        where = f" in {namespace} namespace" if namespace else ""
        return [f"No resources found{where}."]
    header = ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    rows = []
    for ev in events:
        kind, _, name = event_parts(ev.object)
        row = [k8s_age(now - ev.time), ev.type, ev.reason, f"{kind}/{name}" if kind else name,
               ev.message]
        rows.append(([namespace_of(ev) or "default"] if all_namespaces else []) + row)
    return table((["NAMESPACE"] if all_namespaces else []) + header, rows)


_EVENT_SOURCE = {
    "FailedScheduling": "default-scheduler", "Scheduled": "default-scheduler",
    "Preempted": "default-scheduler", "NodeNotReady": "node-controller",
    "RegisteredNode": "node-controller", "TaintManagerEviction": "taint-eviction-controller",
}


def _describe_events(events: Sequence[Event], now: datetime) -> list[str]:
    if not events:
        return ["Events:  <none>"]
    rows = []
    for ev in events:
        age = k8s_age(now - ev.time) + (f" (x{ev.count})" if ev.count and ev.count > 1 else "")
        source = _EVENT_SOURCE.get(ev.reason, "kubelet" if ev.object.startswith("pod/") else "")
        rows.append((ev.type, ev.reason, age, source, ev.message))
    header = ("Type", "Reason", "Age", "From", "Message")
    return ["Events:"] + ["  " + line for line in table(header, [tuple("-" * len(h) for h in header)] + rows)]


def _field(label: str, value: Any, indent: int = 0, width: int = 18) -> str:
    return f"{' ' * indent}{(label + ':').ljust(width)}{value}"


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, dict):
            flat.update(_flatten(v, f"{prefix}{k}."))
        else:
            flat[f"{prefix}{k}"] = v
    return flat


# Config keys that have a home in a pod spec; the rest are the program's own flags.
_POD_KEYS = {"image", "command", "args", "env", "labels", "node_selector", "nodeSelector",
             "tolerations", "container", "entrypoint", "exclude_nodes"}


def _toleration(t: Any) -> str:
    if not isinstance(t, dict):
        return str(t)
    key, effect = t.get("key", ""), t.get("effect", "")
    if t.get("operator") == "Exists" or "value" not in t:
        return f"{key}:{effect} op=Exists" if effect else f"{key} op=Exists"
    return f"{key}={t['value']}:{effect}" if effect else f"{key}={t['value']}"


def _container_state(job: Job, label: str, now: datetime, current: bool) -> list[str]:
    phase = pod_phase(job)
    waiting = next((w for w in (job.reason, job.state) if w in _WAITING), None)
    if current and phase == "Pending" and not job.nodes:
        return []  # never scheduled: no container status yet
    if current and waiting:
        return [_field(label, "Waiting", 4, 16), _field("Reason", waiting, 6, 14)]
    if current and phase == "Running":
        lines = [_field(label, "Running", 4, 16)]
        return lines + ([_field("Started", rfc1123z(job.start_time), 6, 14)] if job.start_time else [])
    reason = next((w for w in (job.reason, job.state) if w in _TERMINATED), None)
    reason = reason or ("Completed" if phase == "Succeeded" else "Error")
    lines = [_field(label, "Terminated", 4, 16), _field("Reason", reason, 6, 14)]
    if (code := k8s_exit_code(job)) is not None:
        lines.append(_field("Exit Code", code, 6, 14))
    if job.start_time:
        lines.append(_field("Started", rfc1123z(job.start_time), 6, 14))
    if job.end_time:
        lines.append(_field("Finished", rfc1123z(job.end_time), 6, 14))
    return lines


def describe_pod_lines(job: Job, events: Sequence[Event], now: datetime) -> list[str]:
    cfg = job.config
    phase = pod_phase(job)
    labels = cfg.get("labels") or {}
    lines = [
        _field("Name", job.id), _field("Namespace", job.partition or "default"),
        _field("Priority", 0), _field("Node", job.nodes[0] if job.nodes else "<none>"),
    ]
    if job.start_time:
        lines.append(_field("Start Time", rfc1123z(job.start_time)))
    label_lines = [f"{k}={v}" for k, v in labels.items()] or ["<none>"]
    lines.append(_field("Labels", label_lines[0]))
    lines += [" " * 18 + extra for extra in label_lines[1:]]
    lines += [_field("Annotations", "<none>"), _field("Status", phase)]
    if "Evicted" in (job.reason, job.state):
        lines.append(_field("Reason", "Evicted"))
    lines.append("Containers:")
    lines.append(f"  {cfg.get('container') or job.name or 'main'}:")
    lines.append(_field("Image", cfg.get("image", "<none>"), 4, 16))
    if command := cfg.get("command") or cfg.get("entrypoint"):
        lines += ["    Command:"] + [f"      {c}" for c in (command if isinstance(command, list) else [command])]
    args = [str(a) for a in cfg.get("args") or []]
    args += [f"--{k}={v}" for k, v in _flatten({k: v for k, v in cfg.items() if k not in _POD_KEYS}).items()]
    if args:
        lines += ["    Args:"] + [f"      {a}" for a in args]
    lines += _container_state(job, "State", now, current=True)
    if job.attempts:
        lines += _container_state(job.attempts[-1], "Last State", now, current=False)
    ready = phase == "Running" and not any(w in _WAITING for w in (job.reason, job.state))
    lines += [_field("Ready", str(ready), 4, 16), _field("Restart Count", len(job.attempts), 4, 16)]
    if job.gpus:
        # The container's own limit when the spec states it (pods can share a node), else the job's
        # GPUs over its nodes.
        limit = ((cfg.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu") or cfg.get("gpus_per_pod")
        per_pod = int(limit) if str(limit or "").strip().isdigit() else job.gpus // max(1, len(job.nodes))
        for section in ("Limits", "Requests"):
            lines += [f"    {section}:", _field("nvidia.com/gpu", per_pod, 6, 17)]
    env = cfg.get("env") or {}
    lines += ["    Environment:" + ("" if env else "  <none>")] + [f"      {k}:  {v}" for k, v in env.items()]
    lines.append("Conditions:")
    scheduled = bool(job.nodes) or phase != "Pending"
    conditions = [("PodScheduled", str(scheduled))]
    if scheduled:
        conditions = [("Initialized", "True"), ("Ready", str(ready)),
                      ("ContainersReady", str(ready))] + conditions
    lines += ["  " + line for line in table(["Type", "Status"], conditions)]
    selector = cfg.get("node_selector") or cfg.get("nodeSelector") or {}
    lines.append(_field("Node-Selectors", ",".join(f"{k}={v}" for k, v in selector.items()) or "<none>", 0, 29))
    tolerations = [_toleration(t) for t in cfg.get("tolerations") or []] or ["<none>"]
    lines.append(_field("Tolerations", tolerations[0], 0, 29))
    lines += [" " * 29 + t for t in tolerations[1:]]
    return lines + _describe_events(events, now)


def describe_node_lines(node: Node, pods: Sequence[Job], events: Sequence[Event], now: datetime) -> list[str]:
    label_lines = [f"{k}={v}" for k, v in node.labels.items()] or ["<none>"]
    taints = node_taints(node) or ["<none>"]
    lines = [_field("Name", node.name, 0, 20), _field("Roles", node_roles(node), 0, 20),
             _field("Labels", label_lines[0], 0, 20)]
    lines += [" " * 20 + extra for extra in label_lines[1:]]
    lines += [_field("Annotations", "<none>", 0, 20), _field("CreationTimestamp", "<unknown>", 0, 20),
              _field("Taints", taints[0], 0, 20)]
    lines += [" " * 20 + t for t in taints[1:]]
    unschedulable = node.state in ("cordoned", "drained", "draining")
    lines.append(_field("Unschedulable", str(unschedulable).lower(), 0, 20))
    ready = node_ready(node)
    reason, message = {
        "True": ("KubeletReady", "kubelet is posting ready status"),
        "False": ("KubeletNotReady", "container runtime network not ready"),
        "Unknown": ("NodeStatusUnknown", "Kubelet stopped posting node status."),
    }[ready]
    lines.append("Conditions:")
    lines += ["  " + line for line in table(["Type", "Status", "Reason", "Message"],
                                             [("----", "------", "------", "-------"),
                                              ("Ready", ready, reason, node.reason or message)])]
    for section in ("Capacity", "Allocatable"):
        lines += [f"{section}:", _field("nvidia.com/gpu", node.gpus, 2, 17)]
    if node.gpu_model:
        lines += ["System Info:", _field("GPU Product", node.gpu_model, 2, 17)]
    lines.append(f"Non-terminated Pods:          ({len(pods)} in total)")
    if pods:
        rows = [("---------", "----", "--------------", "---")] + [
            (p.partition or "default", p.id, p.gpus // max(1, len(p.nodes)),
             k8s_age(now - (p.start_time or p.submit_time or now)))
            for p in pods
        ]
        lines += ["  " + line for line in table(["Namespace", "Name", "nvidia.com/gpu", "Age"], rows)]
    return lines + _describe_events(events, now)


_CRD = {
    "job": ("batch/v1", "Job"), "pytorchjob": ("kubeflow.org/v1", "PyTorchJob"),
    "rayjob": ("ray.io/v1", "RayJob"), "raycluster": ("ray.io/v1", "RayCluster"),
    "mpijob": ("kubeflow.org/v2beta1", "MPIJob"), "jobset": ("jobset.x-k8s.io/v1alpha2", "JobSet"),
}


def _condition_type(state: str) -> str:
    s = state.upper()
    if s in ("SUCCEEDED", "COMPLETED", "COMPLETE"):
        return "Succeeded"
    if s in ("RUNNING",):
        return "Running"
    if s in ("PENDING", "CONFIGURING"):
        return "Created"
    return "Failed" if not is_active(state) else "Running"


def _yamlish(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, dict):
        out: list[str] = []
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                out += [f"{pad}{k}:"] + _yamlish(v, indent + 2)
            else:
                out.append(f"{pad}{k}:  {v}")
        return out
    if isinstance(value, list):
        return [f"{pad}{item}" for item in value]
    return [f"{pad}{value}"]


def describe_resource_lines(kind: str, job: Job, events: Sequence[Event], now: datetime) -> list[str]:
    """kubectl describe of a Job or a custom resource (PyTorchJob, RayJob, RayCluster)."""
    api, kind_name = _CRD[kind]
    lines = [_field("Name", job.id, 0, 14), _field("Namespace", job.partition or "default", 0, 14),
             _field("Labels", "<none>", 0, 14), _field("Annotations", "<none>", 0, 14),
             _field("API Version", api, 0, 14), _field("Kind", kind_name, 0, 14), "Spec:"]
    spec = dict(job.config)
    if job.gpus:
        spec.setdefault("gpus", job.gpus)
    lines += _yamlish(spec, 2) or ["  <none>"]
    ctype = _condition_type(job.state)
    lines += ["Status:", "  Conditions:",
              _field("Last Transition Time", iso_z(job.end_time or job.start_time or job.submit_time), 4, 24),
              _field("Message", job.reason or "", 4, 24),
              _field("Reason", job.state, 4, 24),
              _field("Status", "True", 4, 24), _field("Type", ctype, 4, 24)]
    if kind == "rayjob":
        lines += [_field("Job Deployment Status", "Complete" if ctype == "Succeeded" else ctype, 2, 24),
                  _field("Job Status", ray_status(job), 2, 24)]
    if job.start_time:
        lines.append(_field("Start Time", iso_z(job.start_time), 2, 24))
    if job.end_time:
        lines.append(_field("Completion Time", iso_z(job.end_time), 2, 24))
    if job.attempts:
        lines.append(_field("Restart Count", len(job.attempts), 2, 24))
    if job.nodes:
        lines.append(_field("Nodes", ",".join(job.nodes), 2, 24))
    return lines + _describe_events(events, now)


def pods_lines(jobs: Iterable[Job], now: datetime) -> list[str]:
    """`kubectl get pods -A -o wide` (the columns that a scenario records)."""
    rows = []
    for j in jobs:
        ready = pod_phase(j) == "Running" and pod_status(j) == "Running"
        rows.append((j.partition or "default", j.id, "1/1" if ready else "0/1", pod_status(j),
                     len(j.attempts), k8s_age(now - (j.submit_time or j.start_time or now)),
                     ",".join(j.nodes) or "<none>"))
    return table(["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "NODE"], rows)


# --- any object, as kubectl's generic describer prints a custom resource ----------------------

_INITIALISMS = {"api": "API", "uid": "UID", "url": "URL", "ip": "IP", "id": "ID", "cpu": "CPU", "gpu": "GPU",
                "ttl": "TTL", "dns": "DNS", "tls": "TLS", "json": "JSON", "http": "HTTP"}


def smart_label(key: str) -> str:
    """A field name as kubectl describe titles it: apiVersion -> "API Version",
    podSetAssignments -> "Pod Set Assignments"; resource names (nvidia.com/gpu) stay as they are."""
    if "/" in key or "." in key or not key[:1].isalpha():
        return key
    words = re.findall(r"[A-Z]+(?=[A-Z][a-z]|\d|$)|[A-Z]?[a-z]+|[A-Z]+|\d+", key) or [key]
    return " ".join(_INITIALISMS.get(w.lower(), w[:1].upper() + w[1:]) for w in words)


def _unstructured(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    out: list[str] = []
    if isinstance(value, dict):
        # kubectl walks the fields in sorted order and aligns a map's values two spaces past its longest label.
        scalars = {k: v for k, v in value.items() if not isinstance(v, (dict, list)) or not v}
        width = max((len(smart_label(k)) + 3 for k in scalars), default=0)
        for k, v in sorted(value.items()):
            if k in scalars:
                shown = "" if v is None or v == {} or v == [] else (str(v).lower() if isinstance(v, bool) else v)
                out.append(f"{pad}{(smart_label(k) + ':').ljust(width)}{shown}".rstrip())
            else:
                out += [f"{pad}{smart_label(k)}:"] + _unstructured(v, indent + 2)
    elif isinstance(value, list):
        for item in value:
            out += _unstructured(item, indent) if isinstance(item, (dict, list)) else [f"{pad}{item}"]
    else:
        out.append(f"{pad}{value}")
    return out


def describe_object_lines(obj: dict[str, Any], events: Sequence[Event], now: datetime) -> list[str]:
    """`kubectl describe` of a custom resource as the API holds it (a Kueue Workload or
    ClusterQueue): name, labels and annotations first, then the rest field by field."""
    meta = obj.get("metadata") or {}

    def pairs(label: str, d: dict[str, str] | None) -> list[str]:
        items = [f"{k}={v}" for k, v in sorted((d or {}).items())] or ["<none>"]
        return [_field(label, items[0], 0, 14)] + [" " * 14 + i for i in items[1:]]

    lines = [_field("Name", meta.get("name", ""), 0, 14)]
    if meta.get("namespace"):
        lines.append(_field("Namespace", meta["namespace"], 0, 14))
    lines += pairs("Labels", meta.get("labels")) + pairs("Annotations", meta.get("annotations"))
    lines += [_field("API Version", obj.get("apiVersion", ""), 0, 14), _field("Kind", obj.get("kind", ""), 0, 14)]
    rest = {k: v for k, v in meta.items() if k not in ("name", "namespace", "labels", "annotations", "managedFields")}
    if rest:
        lines += ["Metadata:"] + _unstructured(rest, 2)
    for key, value in sorted(obj.items()):
        if key in ("apiVersion", "kind", "metadata"):
            continue
        lines += [f"{smart_label(key)}:"] + (_unstructured(value, 2) if isinstance(value, (dict, list)) else [f"  {value}"])
    return lines + _describe_events(events, now)
