"""A workload's own manifest, made ready to create again with a resubmit's changes applied
where the manifest really holds them.

A change lands in every pod template of the workload (a PyTorchJob's master and workers, a
RayJob's head and worker groups): env in the main container, resources, the program's
`--key=value` arguments (where the command or args already hold the flag, else appended to
args), tolerations, nodeSelector, excluded nodes as a required node anti-affinity, /dev/shm
as a memory-backed emptyDir; a Job's own deadline and backoff limit in the Job spec.
"""

from __future__ import annotations

import copy
from typing import Any

from crashcart.tools._spec import ToolError
from crashcart.tools.backends.kubernetes import _parse as parse
from crashcart.tools.backends.slurm._submit import arg_text, set_args

# Fields the API server sets; a create that carries them is refused or means something else.
_SERVER_META = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink",
                "ownerReferences", "deletionTimestamp", "deletionGracePeriodSeconds", "finalizers", "generateName")
# Labels and selectors the Job controller stamps with the old Job's uid.
_JOB_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid", "job-name", "batch.kubernetes.io/job-name")
_RESOURCES = {"memory_limit_gi": ("limits", "memory", "Gi"), "memory_request_gi": ("requests", "memory", "Gi"),
              "cpu_limit": ("limits", "cpu", ""), "cpu_request": ("requests", "cpu", ""),
              "ephemeral_storage_gi": ("limits", "ephemeral-storage", "Gi"),
              "gpus_per_pod": ("limits", parse.GPU, "")}
_SHM = {"shm_size": None, "shm_size_gb": "Gi", "shm_size_mb": "Mi"}


def clean(obj: dict[str, Any]) -> dict[str, Any]:
    """The manifest as a person would apply it: no status, nothing the server or a controller set."""
    out = copy.deepcopy({k: v for k, v in obj.items() if k != "status"})
    m = out.setdefault("metadata", {})
    for k in _SERVER_META:
        m.pop(k, None)
    annotations = m.get("annotations") or {}
    annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    if out.get("kind") == "Job" and out.get("apiVersion") == "batch/v1":
        spec = out.get("spec") or {}
        spec.pop("selector", None)
        spec.pop("manualSelector", None)
        tmpl_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        for k in _JOB_LABELS:
            tmpl_labels.pop(k, None)
    if out.get("kind") == "Pod":
        spec = out.get("spec") or {}
        spec.pop("nodeName", None)  # let the scheduler place it (and honour excluded nodes)
        for k in _JOB_LABELS:
            (m.get("labels") or {}).pop(k, None)
    return out


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj.get("kind") == "Pod":
        return [obj.setdefault("spec", {})]
    specs = [t.setdefault("spec", {}) for _, t, _ in parse.pod_templates(obj)]
    if not specs:
        raise ToolError(f"{obj.get('kind')} {parse.meta(obj).get('name')} holds no pod template crashcart can change")
    return specs


def apply(obj: dict[str, Any], changes: dict[str, Any], exclude: list[str]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    specs = pod_specs(obj)
    flags: dict[str, Any] = {}
    for key, value in changes.items():
        if key.startswith("env."):
            for spec in specs:
                _set_env(parse.main_container({"spec": spec}), key[4:], value)
        elif key == "image":
            for spec in specs:
                parse.main_container({"spec": spec})["image"] = str(value)
        elif key in _RESOURCES:
            section, name, unit = _RESOURCES[key]
            for spec in specs:
                _set_resource(parse.main_container({"spec": spec}), section, name, _quantity(key, value, unit))
        elif key in _SHM:
            for spec in specs:
                _set_shm(spec, _quantity(key, value, _SHM[key]))
        elif key in ("node_selector", "nodeSelector"):
            if not isinstance(value, dict):
                raise ToolError(f"resubmit: {key} must be a mapping of node labels, got {value!r}")
            for spec in specs:
                spec["nodeSelector"] = {str(k): str(v) for k, v in value.items()}
        elif key == "tolerations":
            if not isinstance(value, list):
                raise ToolError(f"resubmit: tolerations must be a list, got {value!r}")
            for spec in specs:
                spec["tolerations"] = copy.deepcopy(value)
        elif key == "exclude_nodes":
            exclude = [*exclude, *([value] if isinstance(value, str) else value)]
        elif key in ("active_deadline_seconds", "backoff_limit"):
            if obj.get("kind") != "Job":
                raise ToolError(f"resubmit: {key} is a batch/v1 Job setting; this workload is a {obj.get('kind')}")
            obj["spec"]["activeDeadlineSeconds" if key == "active_deadline_seconds" else "backoffLimit"] = int(value)
        elif key in ("replicas", "container", "labels"):
            raise ToolError(f"resubmit: crashcart does not change {key!r} of a Kubernetes workload; "
                            "that is the owner's decision")
        else:
            flags[key] = value
    if flags:
        for spec in specs:
            _set_flags(parse.main_container({"spec": spec}), flags)
    if exclude:
        for spec in specs:
            _exclude(spec, list(dict.fromkeys(exclude)))
    return obj


def _set_env(container: dict[str, Any], name: str, value: Any) -> None:
    env = container.setdefault("env", [])
    for e in env:
        if e.get("name") == name:
            e.pop("valueFrom", None)
            e["value"] = arg_text(value)
            return
    env.append({"name": name, "value": arg_text(value)})


def _quantity(key: str, value: Any, unit: str | None) -> str:
    if unit is None:  # already a quantity ("16Gi")
        if parse.quantity(value) is None:
            raise ToolError(f"resubmit: {key} must be a Kubernetes quantity such as 16Gi, got {value!r}")
        return str(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ToolError(f"resubmit: {key} must be a number, got {value!r}") from None
    if number <= 0:
        raise ToolError(f"resubmit: {key} must be positive, got {value!r}")
    return f"{int(number) if number == int(number) else number}{unit}"


def _set_resource(container: dict[str, Any], section: str, name: str, value: str) -> None:
    res = container.setdefault("resources", {})
    res.setdefault(section, {})[name] = value
    if section == "limits" and name == parse.GPU:
        res.setdefault("requests", {})[name] = value  # extended resources: request must equal limit
    requests, limits = res.get("requests") or {}, res.get("limits") or {}
    if name in requests and name in limits and parse.quantity(requests[name]) > parse.quantity(limits[name]):
        # A request above its limit is invalid; raising the limit keeps the request, lowering it caps it.
        requests[name] = limits[name]


def _set_shm(spec: dict[str, Any], size: str) -> None:
    volume = parse.shm_volume(spec)
    if volume is None:
        volume = {"name": "dshm", "emptyDir": {"medium": "Memory"}}
        spec.setdefault("volumes", []).append(volume)
        for c in spec.get("containers") or []:
            c.setdefault("volumeMounts", []).append({"name": "dshm", "mountPath": "/dev/shm"})
    volume["emptyDir"] = {"medium": "Memory", "sizeLimit": size}


def _set_flags(container: dict[str, Any], flags: dict[str, Any]) -> None:
    command = [str(w) for w in container.get("command") or []]
    args = [str(w) for w in container.get("args") or []]
    in_command = {k: v for k, v in flags.items() if any(w == f"--{k}" or w.startswith(f"--{k}=") for w in command[1:])}
    rest = {k: v for k, v in flags.items() if k not in in_command}
    if in_command:
        container["command"] = command[:1] + set_args(command[1:], in_command)
    if rest:
        container["args"] = set_args(args, rest)


def _exclude(spec: dict[str, Any], nodes: list[str]) -> None:
    if spec.get("nodeName") in nodes:
        spec.pop("nodeName")
    required = (spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
                .setdefault("requiredDuringSchedulingIgnoredDuringExecution", {}))
    terms = required.setdefault("nodeSelectorTerms", []) or [{}]
    required["nodeSelectorTerms"] = terms
    # Terms are ORed: the exclusion must hold in each of them.
    for term in terms:
        exprs = term.setdefault("matchExpressions", [])
        mine = next((e for e in exprs if e.get("key") == "kubernetes.io/hostname" and e.get("operator") == "NotIn"), None)
        if mine is None:
            exprs.append({"key": "kubernetes.io/hostname", "operator": "NotIn", "values": nodes})
        else:
            mine["values"] = list(dict.fromkeys([*mine.get("values", []), *nodes]))
