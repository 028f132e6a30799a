"""Objects shaped as `kubectl get -o json` prints them on a real GPU cluster.

Built by hand from what the kubelet, the scheduler and the node controller write (field
names, reasons and messages as Kubernetes 1.30 prints them); the loopback API server adds
uid, resourceVersion and creationTimestamp as a real one does. Each helper returns one
object, so a test reads as the cluster it sets up.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

H100 = "NVIDIA-H100-80GB-HBM3"


def ts(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ago(**kw) -> datetime:
    return datetime.now(UTC) - timedelta(**kw)


def node(name: str, pool: str = "h100", gpus: int = 8, ready: bool = True, since: datetime | None = None,
         unschedulable: bool = False, taints: list[dict] | None = None) -> dict[str, Any]:
    beat = ts(since or ago(seconds=20))
    ready_cond = ({"type": "Ready", "status": "True", "lastHeartbeatTime": beat, "lastTransitionTime": ts(ago(days=12)),
                   "reason": "KubeletReady", "message": "kubelet is posting ready status"} if ready else
                  {"type": "Ready", "status": "Unknown", "lastHeartbeatTime": ts(ago(minutes=6)),
                   "lastTransitionTime": beat, "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status."})
    conditions = [
        {"type": "MemoryPressure", "status": "False" if ready else "Unknown", "lastHeartbeatTime": beat,
         "lastTransitionTime": ts(ago(days=12)), "reason": "KubeletHasSufficientMemory" if ready else "NodeStatusUnknown",
         "message": "kubelet has sufficient memory available" if ready else "Kubelet stopped posting node status."},
        {"type": "DiskPressure", "status": "False" if ready else "Unknown", "lastHeartbeatTime": beat,
         "lastTransitionTime": ts(ago(days=12)), "reason": "KubeletHasNoDiskPressure" if ready else "NodeStatusUnknown",
         "message": "kubelet has no disk pressure" if ready else "Kubelet stopped posting node status."},
        {"type": "PIDPressure", "status": "False" if ready else "Unknown", "lastHeartbeatTime": beat,
         "lastTransitionTime": ts(ago(days=12)), "reason": "KubeletHasSufficientPID" if ready else "NodeStatusUnknown",
         "message": "kubelet has sufficient PID available" if ready else "Kubelet stopped posting node status."},
        ready_cond,
    ]
    node_taints = list(taints or [])
    if not ready:
        node_taints += [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": beat},
                        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": beat}]
    if unschedulable:
        node_taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": beat})
    spec: dict[str, Any] = {"podCIDR": "10.244.3.0/24", "podCIDRs": ["10.244.3.0/24"], "providerID": f"aws:///us-east-1a/i-0{abs(hash(name)) % 10**16:016x}"}
    if node_taints:
        spec["taints"] = node_taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                                   "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
                     "labels": {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                                "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                "node.kubernetes.io/instance-type": "p5.48xlarge", "pool": pool,
                                "nvidia.com/gpu.count": str(gpus), "nvidia.com/gpu.product": H100,
                                "nvidia.com/gpu.memory": "81559", "nvidia.com/cuda.driver.major": "550"}},
        "spec": spec,
        "status": {
            "addresses": [{"type": "InternalIP", "address": "10.0.3.17"}, {"type": "Hostname", "address": name}],
            "allocatable": {"cpu": "191450m", "ephemeral-storage": "27196154Ki", "hugepages-1Gi": "0",
                            "hugepages-2Mi": "0", "memory": "2047544808Ki", "nvidia.com/gpu": str(gpus), "pods": "110"},
            "capacity": {"cpu": "192", "ephemeral-storage": "29098932Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                         "memory": "2097144808Ki", "nvidia.com/gpu": str(gpus), "pods": "110"},
            "conditions": conditions,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        },
    }


def container(name: str = "trainer", image: str = "nvcr.io/nvidia/pytorch:24.05-py3", args: list[str] | None = None,
              env: dict[str, str] | None = None, memory: str = "64Gi", gpus: int = 8, command: list[str] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": name, "image": image, "imagePullPolicy": "IfNotPresent",
        "command": command or ["torchrun", "--nproc_per_node=8", "train.py"],
        "args": args if args is not None else ["--batch_size=32", "--lr=3e-4"],
        "env": [{"name": k, "value": v} for k, v in (env or {"NCCL_DEBUG": "WARN"}).items()],
        "resources": {"limits": {"memory": memory, "nvidia.com/gpu": str(gpus)},
                      "requests": {"cpu": "32", "memory": memory, "nvidia.com/gpu": str(gpus)}},
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access-7xq2d", "readOnly": True}],
    }
    return c


def pod_spec(node_name: str | None, c: dict[str, Any], restart: str = "Never") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [c], "restartPolicy": restart, "schedulerName": "default-scheduler",
        "dnsPolicy": "ClusterFirst", "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority", "priority": 0,
        "securityContext": {}, "serviceAccount": "default", "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
        "tolerations": [{"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
                        {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300},
                        {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}],
        "volumes": [{"name": "kube-api-access-7xq2d", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    return spec


def _cond(kind: str, status: str, at: datetime, reason: str | None = None, message: str | None = None) -> dict[str, Any]:
    c = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": ts(at)}
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def _cid() -> str:
    return "containerd://" + uuid.uuid4().hex + uuid.uuid4().hex


def pod(name: str, namespace: str = "train", node_name: str | None = "gpu-a01", *, phase: str = "Running",
        started: datetime | None = None, c: dict[str, Any] | None = None, state: dict[str, Any] | None = None,
        last_state: dict[str, Any] | None = None, restarts: int = 0, owner: dict[str, Any] | None = None,
        labels: dict[str, str] | None = None, unschedulable_message: str | None = None,
        reason: str | None = None, message: str | None = None, restart: str = "Never") -> dict[str, Any]:
    c = c or container()
    started = started or ago(minutes=40)
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {"user": "dana"})}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
        if owner["kind"] == "Job":
            meta["labels"].update({"batch.kubernetes.io/job-name": owner["metadata"]["name"], "job-name": owner["metadata"]["name"],
                                   "batch.kubernetes.io/controller-uid": owner["metadata"]["uid"], "controller-uid": owner["metadata"]["uid"]})
    status: dict[str, Any] = {"phase": phase, "qosClass": "Burstable", "hostIP": "10.0.3.17", "podIP": "10.244.3.41",
                              "podIPs": [{"ip": "10.244.3.41"}]}
    if phase == "Pending" and unschedulable_message:
        status = {"phase": "Pending", "qosClass": "Burstable",
                  "conditions": [_cond("PodScheduled", "False", started, "Unschedulable", unschedulable_message)]}
    else:
        ready = phase == "Running" and "running" in (state or {"running": {}})
        status["startTime"] = ts(started)
        status["conditions"] = [
            _cond("PodReadyToStartContainers", "True", started), _cond("Initialized", "True", started),
            _cond("Ready", str(ready), started, None if ready else "ContainersNotReady",
                  None if ready else f"containers with unready status: [{c['name']}]"),
            _cond("ContainersReady", str(ready), started, None if ready else "ContainersNotReady",
                  None if ready else f"containers with unready status: [{c['name']}]"),
            _cond("PodScheduled", "True", started)]
        cs: dict[str, Any] = {"name": c["name"], "image": c["image"], "imageID": "" if "waiting" in (state or {}) and restarts == 0
                              else f"{c['image'].split(':')[0]}@sha256:{uuid.uuid4().hex}{uuid.uuid4().hex}",
                              "ready": ready, "restartCount": restarts, "started": ready,
                              "state": state or {"running": {"startedAt": ts(started)}}, "lastState": last_state or {}}
        if "waiting" not in cs["state"] or restarts:
            cs["containerID"] = _cid()
        status["containerStatuses"] = [cs]
        if reason:
            status["reason"] = reason
            status["message"] = message or ""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec(node_name, c, restart), "status": status}


def terminated(reason: str, code: int, started: datetime, finished: datetime) -> dict[str, Any]:
    return {"terminated": {"containerID": _cid(), "exitCode": code, "reason": reason,
                           "startedAt": ts(started), "finishedAt": ts(finished)}}


def waiting(reason: str, message: str) -> dict[str, Any]:
    return {"waiting": {"reason": reason, "message": message}}


def job(name: str, namespace: str = "train", c: dict[str, Any] | None = None, backoff: int = 0,
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    c = c or container()
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {"user": "dana"})},
            "spec": {"backoffLimit": backoff, "completionMode": "NonIndexed", "completions": 1, "parallelism": 1,
                     "podReplacementPolicy": "TerminatingOrFailed", "suspend": False, "manualSelector": False,
                     "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "PLACEHOLDER"}},
                     "template": {"metadata": {"labels": {"user": "dana", "batch.kubernetes.io/controller-uid": "PLACEHOLDER",
                                                          "controller-uid": "PLACEHOLDER", "job-name": name,
                                                          "batch.kubernetes.io/job-name": name}},
                                  "spec": {k: v for k, v in pod_spec(None, c).items()}}},
            "status": {}}


def pytorchjob(name: str, namespace: str = "train", workers: int = 2) -> dict[str, Any]:
    c = container(name="pytorch")
    tmpl = {"spec": {k: v for k, v in pod_spec(None, c, restart="OnFailure").items() if k != "restartPolicy"}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": namespace, "labels": {"user": "dana"}},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": tmpl},
                "Worker": {"replicas": workers, "restartPolicy": "OnFailure", "template": tmpl}}},
            "status": {"conditions": [{"type": "Created", "status": "True", "reason": "PyTorchJobCreated",
                                       "message": f"PyTorchJob {name} is created.", "lastTransitionTime": ts(ago(minutes=30))},
                                      {"type": "Running", "status": "True", "reason": "PyTorchJobRunning",
                                       "message": f"PyTorchJob {namespace}/{name} is running.", "lastTransitionTime": ts(ago(minutes=29))}]}}


def event(obj: dict[str, Any], reason: str, message: str, *, type_: str = "Warning", component: str = "kubelet",
          count: int = 1, at: datetime | None = None, first: datetime | None = None) -> dict[str, Any]:
    m = obj["metadata"]
    at = at or ago(seconds=30)
    host = (obj.get("spec") or {}).get("nodeName") or (m["name"] if obj.get("kind") == "Node" else "")
    involved = {"kind": obj["kind"], "name": m["name"], "uid": m.get("uid", ""), "apiVersion": obj["apiVersion"],
                "resourceVersion": m.get("resourceVersion", "")}
    if m.get("namespace"):
        involved["namespace"] = m["namespace"]
    if obj["kind"] == "Pod" and component == "kubelet":
        involved["fieldPath"] = f"spec.containers{{{obj['spec']['containers'][0]['name']}}}"
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{m['name']}.{uuid.uuid4().hex[:16]}", "namespace": m.get("namespace") or "default"},
            "involvedObject": involved, "reason": reason, "message": message, "type": type_,
            "source": {"component": component, **({"host": host} if host and component == "kubelet" else {})},
            "firstTimestamp": ts(first or at), "lastTimestamp": ts(at), "count": count,
            "reportingComponent": component, "reportingInstance": host}


def pdb(name: str, namespace: str, match: dict[str, str], allowed: int = 0, healthy: int = 1) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minAvailable": healthy, "selector": {"matchLabels": match}},
            "status": {"currentHealthy": healthy, "desiredHealthy": healthy, "disruptionsAllowed": allowed,
                       "expectedPods": healthy, "observedGeneration": 1,
                       "conditions": [{"type": "DisruptionAllowed", "status": "True" if allowed else "False",
                                       "reason": "SufficientPods" if allowed else "InsufficientPods", "message": "",
                                       "lastTransitionTime": ts(ago(hours=2)), "observedGeneration": 1}]}}


def owned_by(obj: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
    """`obj` with the controller ownerReference its operator sets (owner as stored: with its uid)."""
    obj["metadata"]["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                           "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                           "controller": True, "blockOwnerDeletion": True}]
    return obj


def failed_condition(reason: str, message: str, at: datetime) -> list[dict[str, Any]]:
    """A Job's status conditions once its controller gave up (FailureTarget first, as 1.30 writes them)."""
    return [{"type": "FailureTarget", "status": "True", "reason": reason, "message": message,
             "lastProbeTime": ts(at), "lastTransitionTime": ts(at)},
            {"type": "Failed", "status": "True", "reason": reason, "message": message,
             "lastProbeTime": ts(at), "lastTransitionTime": ts(at)}]


def jobset(name: str, namespace: str = "train", replicas: int = 2) -> dict[str, Any]:
    c = container(name="trainer")
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace, "labels": {"user": "dana"}},
            "spec": {"failurePolicy": {"maxRestarts": 0}, "network": {"enableDNSHostnames": True, "subdomain": name},
                     "startupPolicy": {"startupPolicyOrder": "AnyOrder"}, "successPolicy": {"operator": "All"},
                     "suspend": False,
                     "replicatedJobs": [{"name": "workers", "replicas": replicas, "template": {"spec": {
                         "backoffLimit": 0, "completions": 1, "parallelism": 1,
                         "template": {"spec": {k: v for k, v in pod_spec(None, c).items()}}}}}]},
            "status": {"replicatedJobsStatus": [{"name": "workers", "active": replicas, "ready": replicas,
                                                 "succeeded": 0, "failed": 0, "suspended": 0}], "restarts": 0}}


def rayjob(name: str, namespace: str = "train", entrypoint: str = "python /home/ray/train.py --epochs=3") -> dict[str, Any]:
    head = container(name="ray-head", image="rayproject/ray:2.40.0-py310-gpu", command=["/bin/bash", "-lc", "--"],
                     args=["ulimit -n 65536; ray start --head --dashboard-host=0.0.0.0 --block"], gpus=0, memory="16Gi")
    worker = container(name="ray-worker", image="rayproject/ray:2.40.0-py310-gpu", command=["/bin/bash", "-lc", "--"],
                       args=["ulimit -n 65536; ray start --address=$RAY_IP:6379 --block"])
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": name, "namespace": namespace, "labels": {"user": "dana"}},
            "spec": {"entrypoint": entrypoint, "shutdownAfterJobFinishes": True, "ttlSecondsAfterFinished": 60,
                     "submissionMode": "K8sJobMode", "backoffLimit": 0,
                     "rayClusterSpec": {"rayVersion": "2.40.0",
                                        "headGroupSpec": {"rayStartParams": {"dashboard-host": "0.0.0.0"},
                                                          "template": {"spec": pod_spec(None, head, restart="Always")}},
                                        "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "minReplicas": 2, "maxReplicas": 2,
                                                              "rayStartParams": {},
                                                              "template": {"spec": pod_spec(None, worker, restart="Always")}}]}},
            "status": {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING", "jobId": f"{name}-x7k2p",
                       "rayClusterName": f"{name}-raycluster-m4q8z",
                       "dashboardURL": f"{name}-raycluster-m4q8z-head-svc.{namespace}.svc.cluster.local:8265",
                       "startTime": ts(ago(minutes=20)), "observedGeneration": 1}}


def raycluster_of(rj: dict[str, Any]) -> dict[str, Any]:
    """The RayCluster a RayJob's operator created for it (owned by the RayJob)."""
    m = rj["metadata"]
    rc = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
          "metadata": {"name": rj["status"]["rayClusterName"], "namespace": m["namespace"],
                       "labels": {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": m["name"],
                                  "app.kubernetes.io/created-by": "kuberay-operator"}},
          "spec": rj["spec"]["rayClusterSpec"],
          "status": {"state": "ready", "readyWorkerReplicas": 2, "availableWorkerReplicas": 2, "desiredWorkerReplicas": 2,
                     "desiredGPU": "16", "head": {"podName": f"{rj['status']['rayClusterName']}-head-9bf4c"}}}
    return owned_by(rc, rj)


# --- Kueue ----------------------------------------------------------------------------------------


def clusterqueue(name: str, gpus: int = 64, reserved: int = 64, used: int = 64, pending: int = 1,
                 admitted: int = 8) -> dict[str, Any]:
    res = lambda gpu, cpu: [{"name": "cpu", "total": cpu, "borrowed": "0"}, {"name": "memory", "total": f"{gpu * 8}Gi", "borrowed": "0"},  # noqa: E731
                            {"name": "nvidia.com/gpu", "total": str(gpu), "borrowed": "0"}]
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
            "metadata": {"name": name, "finalizers": ["kueue.x-k8s.io/resource-in-use"], "generation": 1},
            "spec": {"cohort": "research", "flavorFungibility": {"whenCanBorrow": "Borrow", "whenCanPreempt": "TryNextFlavor"},
                     "namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO", "stopPolicy": "None",
                     "preemption": {"borrowWithinCohort": {"policy": "Never"}, "reclaimWithinCohort": "Never",
                                    "withinClusterQueue": "Never"},
                     "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": [
                         {"name": "h100", "resources": [{"name": "cpu", "nominalQuota": "1536"},
                                                        {"name": "memory", "nominalQuota": "16Ti"},
                                                        {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)}]}]}]},
            "status": {"admittedWorkloads": admitted, "pendingWorkloads": pending, "reservingWorkloads": admitted,
                       "flavorsReservation": [{"name": "h100", "resources": res(reserved, str(reserved * 4))}],
                       "flavorsUsage": [{"name": "h100", "resources": res(used, str(used * 4))}],
                       "conditions": [{"type": "Active", "status": "True", "reason": "Ready", "message": "Can admit new workloads",
                                       "lastTransitionTime": ts(ago(days=3)), "observedGeneration": 1}]}}


def localqueue(name: str, namespace: str, cq: str) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cq, "stopPolicy": "None"},
            "status": {"admittedWorkloads": 2, "pendingWorkloads": 1, "reservingWorkloads": 2,
                       "conditions": [{"type": "Active", "status": "True", "reason": "Ready", "message": "Can submit new workloads to localQueue",
                                       "lastTransitionTime": ts(ago(days=3)), "observedGeneration": 1}]}}


def _times(quantity: str, n: int) -> str:
    number = quantity.rstrip("KMGTPEi")
    return f"{int(number) * n}{quantity[len(number):]}"


def kueue_workload(job_obj: dict[str, Any], queue: str, *, pending: str | None = None,
                   admitted_to: str | None = None, at: datetime | None = None) -> dict[str, Any]:
    """The Workload Kueue creates for a job it manages, pending (QuotaReserved False with the
    flavor assigner's message) or admitted to a ClusterQueue."""
    at = at or ago(minutes=12)
    m = job_obj["metadata"]
    tmpl = job_obj["spec"]["template"]
    c = tmpl["spec"]["containers"][0]
    count = int(job_obj["spec"].get("parallelism") or 1)
    # status.resourceRequests holds the pod set's total (every pod's requests), as Kueue records it.
    requests = {r: _times(q, count) for r, q in c["resources"]["requests"].items()}
    wl: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": f"job-{m['name']}-{m['uid'][:5]}", "namespace": m["namespace"],
                     "labels": {"kueue.x-k8s.io/job-uid": m["uid"]}, "finalizers": ["kueue.x-k8s.io/resource-in-use"]},
        "spec": {"active": True, "priority": 0, "priorityClassSource": "", "queueName": queue,
                 "podSets": [{"count": count, "name": "main", "template": tmpl}]},
        "status": {"resourceRequests": [{"name": "main", "resources": requests}]}}
    if pending:
        wl["status"]["conditions"] = [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": pending,
                                       "lastTransitionTime": ts(at), "observedGeneration": 1}]
    if admitted_to:
        wl["status"]["admission"] = {"clusterQueue": admitted_to, "podSetAssignments": [
            {"name": "main", "count": count, "flavors": {"cpu": "h100", "memory": "h100", "nvidia.com/gpu": "h100"},
             "resourceUsage": requests}]}
        wl["status"]["conditions"] = [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": f"Quota reserved in ClusterQueue {admitted_to}",
             "lastTransitionTime": ts(at), "observedGeneration": 1},
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted",
             "lastTransitionTime": ts(at), "observedGeneration": 1}]
    return owned_by(wl, job_obj)


# --- the DCGM exporter ------------------------------------------------------------------------------

_DCGM_FIELDS = [
    # (field, type, help) as dcgm-exporter 3.3 prints them with its default counters
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "Current clock throttle reasons."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes."),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active (in %)."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active (in %)."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is active sending or receiving data (in %)."),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second."),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second."),
]


def dcgm_metrics(hostname: str, gpus: int = 8, overrides: dict[int, dict[str, float]] | None = None,
                 pod_of: dict[int, tuple[str, str, str]] | None = None) -> str:
    """/metrics of dcgm-exporter on one H100 node: busy, healthy GPUs unless `overrides` says
    otherwise (per GPU index, per field); `pod_of` attributes a GPU to (namespace, pod, container)."""
    base = {"DCGM_FI_DEV_SM_CLOCK": 1980, "DCGM_FI_DEV_MEM_CLOCK": 2619, "DCGM_FI_DEV_MEMORY_TEMP": 41,
            "DCGM_FI_DEV_GPU_TEMP": 47, "DCGM_FI_DEV_POWER_USAGE": 612.871, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 91264519339,
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0, "DCGM_FI_DEV_GPU_UTIL": 100, "DCGM_FI_DEV_MEM_COPY_UTIL": 38,
            "DCGM_FI_DEV_ENC_UTIL": 0, "DCGM_FI_DEV_DEC_UTIL": 0, "DCGM_FI_DEV_XID_ERRORS": 0,
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 0, "DCGM_FI_DEV_FB_FREE": 8011, "DCGM_FI_DEV_FB_USED": 72560,
            "DCGM_FI_DEV_FB_RESERVED": 588, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 1734988102,
            "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0, "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.981201, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.473519,
            "DCGM_FI_PROF_DRAM_ACTIVE": 0.531870, "DCGM_FI_PROF_PCIE_TX_BYTES": 331244129, "DCGM_FI_PROF_PCIE_RX_BYTES": 1294838733}
    out = []
    for field, kind, help_text in _DCGM_FIELDS:
        out += [f"# HELP {field} {help_text}", f"# TYPE {field} {kind}"]
        for i in range(gpus):
            labels = (f'gpu="{i}",UUID="GPU-{uuid.UUID(int=hash((hostname, i)) % 2**128)}",pci_bus_id="00000000:{0x18 + 0x11 * i:02X}:00.0",'
                      f'device="nvidia{i}",modelName="NVIDIA H100 80GB HBM3",Hostname="{hostname}",DCGM_FI_DRIVER_VERSION="550.90.07"')
            if pod_of and i in pod_of:
                ns, pod_name, cont = pod_of[i]
                labels += f',container="{cont}",namespace="{ns}",pod="{pod_name}"'
            value = (overrides or {}).get(i, {}).get(field, base[field])
            out.append(f"{field}{{{labels}}} {value:g}" if isinstance(value, float) else f"{field}{{{labels}}} {value}")
    return "\n".join(out) + "\n"


def dcgm_exporter_pod(node_name: str) -> dict[str, Any]:
    p = pod(f"nvidia-dcgm-exporter-{abs(hash(node_name)) % 10**5:05d}", namespace="gpu-operator", node_name=node_name,
            c=container(name="nvidia-dcgm-exporter", image="nvcr.io/nvidia/k8s/dcgm-exporter:3.3.6-3.4.2-ubuntu22.04",
                        command=["/bin/bash", "-c"], args=["dcgm-exporter -f /etc/dcgm-exporter/dcp-metrics-included.csv"],
                        env={"DCGM_EXPORTER_LISTEN": ":9400", "DCGM_EXPORTER_KUBERNETES": "true"}, gpus=0, memory="512Mi"),
            labels={"app": "nvidia-dcgm-exporter", "app.kubernetes.io/managed-by": "gpu-operator"}, restart="Always")
    p["spec"]["containers"][0]["ports"] = [{"containerPort": 9400, "name": "metrics", "protocol": "TCP"}]
    return p
