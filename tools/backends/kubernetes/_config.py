"""The `kubernetes:` section of a cluster config: how to reach the API server and how to act.

Strict (an unknown key is an error) and secret-free: credentials live in the kubeconfig
(or the pod's service account when crashcart runs inside the cluster), never here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from crashcart.tools.backends.slurm._config import Progress

DEFAULT_POOL_LABELS = (
    "pool", "nodepool", "cloud.google.com/gke-nodepool", "eks.amazonaws.com/nodegroup",
    "karpenter.sh/nodepool", "kubernetes.azure.com/agentpool", "node.kubernetes.io/instance-type",
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Connection(_Strict):
    method: Literal["kubeconfig", "in_cluster"] = "kubeconfig"
    """kubeconfig: a kubeconfig file and context; in_cluster: the pod's service account."""
    kubeconfig: str | None = None
    """Default: $KUBECONFIG, else ~/.kube/config."""
    context: str | None = None
    """Default: the kubeconfig's current-context."""
    request_timeout: float = Field(30, gt=0)
    """Seconds one API request may take."""

    @model_validator(mode="after")
    def _in_cluster_has_no_file(self) -> Connection:
        if self.method == "in_cluster" and (self.kubeconfig or self.context):
            raise ValueError("method in_cluster uses the pod's service account; kubeconfig/context do not apply")
        return self


class DcgmExporter(_Strict):
    """NVIDIA's DCGM exporter DaemonSet, read through the API server's pod proxy (RBAC: get pods/proxy)."""

    namespace: str = "gpu-operator"
    selector: str = "app=nvidia-dcgm-exporter"
    """Label selector of the exporter's pods (one per GPU node)."""
    port: int = Field(9400, ge=1, le=65535)
    path: str = "/metrics"

    @model_validator(mode="after")
    def _checked(self) -> DcgmExporter:
        if not self.selector.strip():
            raise ValueError("node_access.dcgm_exporter needs a selector (the exporter pods' labels)")
        if not self.path.startswith("/"):
            raise ValueError(f"node_access.dcgm_exporter.path {self.path!r} must start with /")
        return self


class NodeAccess(_Strict):
    """How node commands (nvidia-smi, the kernel log) reach a node, and where GPU metrics come from."""

    method: Literal["daemonset", "none"] = "none"
    """daemonset: exec in the pod a DaemonSet runs on every GPU node (e.g. the GPU operator's
    driver pod, which has nvidia-smi and the host's kernel log); none: reported as unavailable."""
    namespace: str = "gpu-operator"
    selector: str = "app=nvidia-driver-daemonset"
    """Label selector of the DaemonSet's pods."""
    container: str | None = None
    dcgm_exporter: DcgmExporter | None = None
    """Where gpu_metrics reads each GPU's fields (and the last Xid); none: reported as unavailable."""

    @model_validator(mode="after")
    def _selector_needed(self) -> NodeAccess:
        if self.method == "daemonset" and not self.selector.strip():
            raise ValueError("node_access.method daemonset needs a selector (the DaemonSet pods' labels)")
        return self


class Drain(_Strict):
    eviction_timeout_seconds: float = Field(300, ge=0)
    """How long a drain keeps retrying evictions a PodDisruptionBudget refuses (429). Never forced."""
    retry_seconds: float = Field(5, gt=0)


class KubernetesSettings(_Strict):
    connection: Connection = Connection()
    namespaces: list[str] = Field(default_factory=list)
    """Namespaces crashcart looks at (empty: all, which needs cluster-wide list RBAC)."""
    node_pool_labels: list[str] = Field(default_factory=lambda: list(DEFAULT_POOL_LABELS))
    """Node labels that name a node's pool, tried in order (the `partition` of a node)."""
    user_labels: list[str] = Field(default_factory=lambda: ["user", "owner", "kueue.x-k8s.io/queue-name"])
    """Pod labels that name the person a workload belongs to, tried in order."""
    node_access: NodeAccess = NodeAccess()
    drain: Drain = Drain()
    pending_minutes: float = Field(10, ge=0)
    """watch: a pod Pending this long with a FailedScheduling event is reported."""
    stall_check_pods: int = Field(200, ge=0)
    """watch: at most this many running GPU pods have their log's last line read per poll (a pod
    whose log grew is not read again until it could have stalled); 0 turns stall checks off."""
    watch_seconds: int = Field(1, ge=1, le=60)
    """watch: how long each poll's watch stream stays open for changes."""
    max_log_lines: int = Field(20000, ge=100)
    progress: Progress = Progress()
