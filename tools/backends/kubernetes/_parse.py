"""API objects as crashcart's vocabulary: a pod as a job (cluster.Job / JobRow), a node as
a cluster.Node / NodeRow, an event as a cluster.Event, with the words the fixture backend
and the playbooks use (Failed/OOMKilled/137, Pending/Unschedulable, CrashLoopBackOff)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from crashcart.tools.backends.slurm._submit import args_config
from crashcart.tools.catalog import JobRow, NodeRow
from crashcart.tools.cluster import Event, Job, Node, Taint
from crashcart.tools.render import node_taints

GPU = "nvidia.com/gpu"
CORDON_REASON = "crashcart.io/cordon-reason"
INCIDENT = "crashcart.io/incident"
RESUBMIT_OF = "crashcart.io/resubmit-of"
REQUEST = "crashcart.io/request-id"
REQUEST_LABEL = "crashcart.io/request"
WAITING_STUCK = {"ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError", "InvalidImageName",
                 "CreateContainerError", "ContainerCreating"}


def when(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def main_container(pod: dict[str, Any]) -> dict[str, Any]:
    """The container a person means by "the pod's": kubectl's default-container annotation, else the first."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    wanted = (meta(pod).get("annotations") or {}).get("kubectl.kubernetes.io/default-container")
    return next((c for c in containers if c.get("name") == wanted), containers[0])


def _status_of(pod: dict[str, Any], name: str | None) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((s for s in statuses if s.get("name") == name), statuses[0] if statuses else {})


def quantity(text: Any) -> float | None:
    """A Kubernetes quantity ("32Gi", "500m", "8", "1e3", "64M") as a number of base units."""
    if text is None:
        return None
    m = re.fullmatch(r"([0-9.]+(?:[eE][-+]?\d+)?)([numkMGTPE]i?)?", str(text).strip())
    if not m:
        return None
    factor = {None: 1, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
              "E": 1e18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
    return float(m[1]) * factor.get(m[2], 1)


def gpus_of(spec: dict[str, Any]) -> int:
    total = 0
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        n = quantity((res.get("limits") or {}).get(GPU) or (res.get("requests") or {}).get(GPU))
        total += int(n or 0)
    return total


def first_label(labels: dict[str, str], keys: list[str]) -> str | None:
    return next((labels[k] for k in keys if labels.get(k)), None)


def owner(obj: dict[str, Any]) -> dict[str, Any] | None:
    refs = meta(obj).get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), refs[0] if refs else None)


def workload_name(pod: dict[str, Any]) -> str:
    labels = meta(pod).get("labels") or {}
    ref = owner(pod)
    return (labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
            or labels.get("training.kubeflow.org/job-name") or (ref or {}).get("name") or meta(pod)["name"])


# --- pods -------------------------------------------------------------------------------------


def pod_state(pod: dict[str, Any]) -> tuple[str, str | None, str | None, datetime | None]:
    """(state, reason, exit code, end time) in the scenario vocabulary."""
    st = pod.get("status") or {}
    phase = st.get("phase") or "Unknown"
    cs = _status_of(pod, main_container(pod).get("name"))
    statuses = st.get("containerStatuses") or []
    waiting = next(((s.get("state") or {}).get("waiting") for s in [cs, *statuses]
                    if (s.get("state") or {}).get("waiting", {}).get("reason")), None)
    terminated = next(((s.get("state") or {}).get("terminated") for s in [cs, *statuses]
                       if (s.get("state") or {}).get("terminated")), None)
    last = (cs.get("lastState") or {}).get("terminated")
    if waiting and waiting.get("reason") == "CrashLoopBackOff":
        return "CrashLoopBackOff", "CrashLoopBackOff", _code(last), when((last or {}).get("finishedAt"))
    if phase == "Pending":
        scheduled = next((c for c in st.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
        if scheduled and scheduled.get("status") == "False":
            return "Pending", scheduled.get("reason") or "Unschedulable", None, None
        return "Pending", (waiting or {}).get("reason"), None, None
    if phase == "Failed":
        reason = st.get("reason") or (terminated or {}).get("reason") or "Error"
        return "Failed", reason, _code(terminated), when((terminated or {}).get("finishedAt"))
    if phase == "Succeeded":
        return "Succeeded", "Completed", _code(terminated) or "0", when((terminated or {}).get("finishedAt"))
    return phase, (waiting or {}).get("reason"), None, None


def _code(terminated: dict[str, Any] | None) -> str | None:
    return None if not terminated or terminated.get("exitCode") is None else str(terminated["exitCode"])


def pod_config(pod_spec: dict[str, Any], container: dict[str, Any], job_spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """The knobs a resubmit can change, where the manifest holds them: the program's own
    `--key=value` flags, env, image, resources, /dev/shm, node selector, tolerations, deadlines."""
    words = [str(w) for w in (container.get("command") or [])[1:]] + [str(w) for w in container.get("args") or []]
    config: dict[str, Any] = args_config(words)
    env = {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}
    if env:
        config["env"] = env
    if container.get("image"):
        config["image"] = container["image"]
    res = container.get("resources") or {}
    for key, section, name, unit in (("memory_limit_gi", "limits", "memory", 2**30),
                                     ("memory_request_gi", "requests", "memory", 2**30),
                                     ("cpu_limit", "limits", "cpu", 1), ("cpu_request", "requests", "cpu", 1),
                                     ("ephemeral_storage_gi", "limits", "ephemeral-storage", 2**30)):
        value = quantity((res.get(section) or {}).get(name))
        if value is not None:
            config[key] = round(value / unit, 3)
    if gpus := gpus_of({"containers": [container]}):
        config["gpus_per_pod"] = gpus
    if (shm := shm_volume(pod_spec)) is not None:
        config["shm_size"] = (shm.get("emptyDir") or {}).get("sizeLimit") or "unlimited"
    if pod_spec.get("nodeSelector"):
        config["node_selector"] = dict(pod_spec["nodeSelector"])
    if pod_spec.get("tolerations"):
        config["tolerations"] = list(pod_spec["tolerations"])
    if excluded := excluded_nodes(pod_spec):
        config["exclude_nodes"] = excluded
    for key, field in (("active_deadline_seconds", "activeDeadlineSeconds"), ("backoff_limit", "backoffLimit")):
        if job_spec and job_spec.get(field) is not None:
            config[key] = job_spec[field]
    return config


def shm_volume(pod_spec: dict[str, Any]) -> dict[str, Any] | None:
    mounted = {m.get("name") for c in pod_spec.get("containers") or [] for m in c.get("volumeMounts") or []
               if m.get("mountPath") == "/dev/shm"}
    return next((v for v in pod_spec.get("volumes") or [] if v.get("name") in mounted and "emptyDir" in v), None)


def excluded_nodes(pod_spec: dict[str, Any]) -> list[str]:
    terms = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    return [v for t in terms for e in t.get("matchExpressions") or []
            if e.get("key") == "kubernetes.io/hostname" and e.get("operator") == "NotIn" for v in e.get("values") or []]


def pod_job(pod: dict[str, Any], user_labels: list[str], config: dict[str, Any] | None = None) -> Job:
    """A pod as the cluster.Job the renderers and the playbooks read."""
    m, spec, st = meta(pod), pod.get("spec") or {}, pod.get("status") or {}
    state, reason, code, ended = pod_state(pod)
    container = main_container(pod)
    cs = _status_of(pod, container.get("name"))
    attempts = []
    if (last := (cs.get("lastState") or {}).get("terminated")) and state != "Failed":
        attempts = [Job(id=m["name"], state="Failed" if last.get("exitCode") else "Succeeded",
                        reason=last.get("reason"), exit_code=_code(last), start_time=when(last.get("startedAt")),
                        end_time=when(last.get("finishedAt")), nodes=[spec["nodeName"]] if spec.get("nodeName") else [])]
    labels = m.get("labels") or {}
    cfg = dict(config if config is not None else pod_config(spec, container))
    cfg.setdefault("container", container.get("name"))
    if labels:
        cfg.setdefault("labels", labels)
    return Job(id=m["name"], name=workload_name(pod), user=first_label(labels, user_labels),
               state=state, reason=reason, exit_code=code, partition=m.get("namespace"),
               nodes=[spec["nodeName"]] if spec.get("nodeName") else [], gpus=gpus_of(spec),
               submit_time=when(m.get("creationTimestamp")), start_time=when(st.get("startTime")),
               end_time=ended, config=cfg, attempts=attempts)


def job_row(job: Job, attempt: int | None = None) -> JobRow:
    return JobRow(job=job.id, name=job.name, user=job.user, partition=job.partition, state=job.state,
                  reason=job.reason, exit_code=job.exit_code, nodes=job.nodes, gpus=job.gpus,
                  submit_time=job.submit_time, start_time=job.start_time, end_time=job.end_time, attempt=attempt)


def workload_job(obj: dict[str, Any], kind: str, user_labels: list[str]) -> Job:
    """A Job or training-operator object (no pod of its own) as a cluster.Job."""
    m, st = meta(obj), obj.get("status") or {}
    conditions = [c for c in st.get("conditions") or [] if c.get("status") == "True"]
    latest = max(conditions, key=lambda c: c.get("lastTransitionTime") or "", default=None)
    kind_word = (obj.get("kind") or kind)
    if obj.get("spec", {}).get("suspend"):
        state, reason = "Pending", "JobSuspended"
    elif latest:
        state = {"Complete": "Succeeded", "Succeeded": "Succeeded", "Failed": "Failed", "Running": "Running",
                 "Suspended": "Pending", "Created": "Pending"}.get(latest.get("type"), latest.get("type") or "Unknown")
        reason = latest.get("reason") or (f"{kind_word}Failed" if state == "Failed" else None)
    else:
        state = st.get("jobStatus") or st.get("state") or "Pending"
        state, reason = state.capitalize() if state.isupper() else state, st.get("reason")
    templates = pod_templates(obj)
    gpus = sum(gpus_of(t.get("spec") or {}) * count for _, t, count in templates)
    return Job(id=m["name"], name=m["name"], user=first_label(m.get("labels") or {}, user_labels), state=state,
               reason=reason, partition=m.get("namespace"), gpus=gpus, submit_time=when(m.get("creationTimestamp")),
               start_time=when(st.get("startTime")), end_time=when(st.get("completionTime")),
               config=workload_config(obj))


def workload_failure(obj: dict[str, Any]) -> tuple[str, str, datetime | None] | None:
    """(reason, message, when) of a workload that failed as a whole, wherever its operator
    says so: a Failed condition (batch Job: BackoffLimitExceeded, DeadlineExceeded; PyTorchJob,
    MPIJob, JobSet), a RayJob's jobDeploymentStatus, a Volcano job's state; None otherwise."""
    st = obj.get("status") or {}
    failed = next((c for c in st.get("conditions") or [] if c.get("type") == "Failed" and c.get("status") == "True"), None)
    if failed:
        return (failed.get("reason") or f"{obj.get('kind', 'Workload')}Failed", failed.get("message") or "",
                when(failed.get("lastTransitionTime")))
    if st.get("jobDeploymentStatus") == "Failed":  # KubeRay RayJob
        return (st.get("reason") or "RayJobFailed", st.get("message") or "",
                when(st.get("endTime")) or when(st.get("startTime")))
    state = st.get("state")
    if isinstance(state, dict) and state.get("phase") == "Failed":  # Volcano batch.volcano.sh Job
        return state.get("reason") or "Failed", state.get("message") or "", when(state.get("lastTransitionTime"))
    return None


def pod_templates(obj: dict[str, Any]) -> list[tuple[str, dict[str, Any], int]]:
    """Every pod template in a workload manifest, wherever the operator keeps it (a Job's
    spec.template, PyTorchJob replica specs, a RayJob's head and worker groups, a JobSet's
    replicated jobs): (path, template, replicas)."""
    found: list[tuple[str, dict[str, Any], int]] = []

    def walk(node: Any, path: str, replicas: int) -> None:
        if isinstance(node, dict):
            here = int(node.get("replicas") or node.get("parallelism") or replicas or 1) if (
                "replicas" in node or "parallelism" in node) else replicas
            for k, v in node.items():
                if k == "template" and isinstance(v, dict) and "containers" in (v.get("spec") or {}):
                    found.append((f"{path}.template".lstrip("."), v, here))
                elif isinstance(v, (dict, list)):
                    walk(v, f"{path}.{k}", here)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]", replicas)

    walk(obj.get("spec") or {}, "spec", 1)
    return found


def workload_config(obj: dict[str, Any]) -> dict[str, Any]:
    if obj.get("kind") == "Pod":
        return pod_config(obj.get("spec") or {}, main_container(obj))
    templates = pod_templates(obj)
    if not templates:
        return {}
    # The largest group is the one that trains (workers, not the launcher or the Ray head).
    _, template, replicas = max(templates, key=lambda t: t[2])
    spec = template.get("spec") or {}
    config = pod_config(spec, main_container(template), obj.get("spec") if obj.get("kind") == "Job" else None)
    if len(templates) > 1 or replicas > 1:
        config["replicas"] = replicas
    return config


# --- nodes ----------------------------------------------------------------------------------


def node_condition(node: dict[str, Any], kind: str = "Ready") -> dict[str, Any]:
    return next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def node_state(node: dict[str, Any], busy: bool) -> tuple[str, str | None]:
    ready = node_condition(node)
    annotations = meta(node).get("annotations") or {}
    # kubectl says NotReady for False and Unknown alike (Unknown: the kubelet stopped posting).
    if ready.get("status") != "True":
        return "not_ready", ready.get("message") or ready.get("reason") or "no Ready condition reported"
    if (node.get("spec") or {}).get("unschedulable"):
        return "cordoned", annotations.get(CORDON_REASON)
    return ("allocated" if busy else "idle"), None


def node_model(node: dict[str, Any], pool_labels: list[str], busy: bool) -> Node:
    m, st = meta(node), node.get("status") or {}
    labels = m.get("labels") or {}
    state, reason = node_state(node, busy)
    taints = [Taint(key=t["key"], value=t.get("value") or None, effect=t["effect"])
              for t in (node.get("spec") or {}).get("taints") or []
              if t.get("effect") in ("NoSchedule", "PreferNoSchedule", "NoExecute")]
    gpus = quantity((st.get("allocatable") or {}).get(GPU)) or 0
    model = labels.get("nvidia.com/gpu.product")
    return Node(name=m["name"], state=state, partition=first_label(labels, pool_labels), gpus=int(gpus),
                gpu_model=model.replace("-", " ") if model else None, labels=labels, taints=taints, reason=reason)


def node_row(node: Node) -> NodeRow:
    return NodeRow(node=node.name, partition=node.partition, state=node.state, gpus=node.gpus,
                   gpu_model=node.gpu_model, reason=node.reason, labels=node.labels, taints=node_taints(node))


# --- events ---------------------------------------------------------------------------------


def event(obj: dict[str, Any]) -> Event:
    inv = obj.get("involvedObject") or obj.get("regarding") or {}
    kind = (inv.get("kind") or "").lower()
    ns = inv.get("namespace")
    name = inv.get("name") or ""
    t = (obj.get("lastTimestamp") or obj.get("eventTime") or obj.get("firstTimestamp")
         or meta(obj).get("creationTimestamp"))
    ref = f"{kind}/{ns}/{name}" if ns and kind != "node" else f"{kind}/{name}"
    return Event(time=when(t), type=obj.get("type") or "Normal", reason=obj.get("reason") or "",
                 object=ref, message=(obj.get("message") or obj.get("note") or "").strip(),
                 count=obj.get("count") or (obj.get("series") or {}).get("count"))
