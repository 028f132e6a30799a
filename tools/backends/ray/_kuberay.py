"""Under KubeRay: the RayJob and RayCluster objects behind a Ray job, from the Kubernetes API.

KubeRay submits a RayJob's entrypoint with the submission id it records in the RayJob's
`status.jobId` (or `spec.jobId` when the user set one), so the Jobs API's id leads to the
RayJob, and the RayJob's `status.rayClusterName` to the RayCluster and its pods (labelled
`ray.io/cluster`). What the head cannot say is there: a RayCluster that never became ready
(its worker pods unschedulable), a submitter that failed, a deadline the operator enforced.
A RayJob that failed before the head ever ran its job is a failure only Kubernetes knows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crashcart.tools._spec import ToolError
from crashcart.tools.backends.kubernetes import _parse as kparse
from crashcart.tools.backends.kubernetes._client import POD, WORKLOADS, Absent
from crashcart.tools.backends.kubernetes._watch import Caches
from crashcart.tools.catalog import JobRow

if TYPE_CHECKING:
    from crashcart.tools.backends.kubernetes import KubernetesBackend

RAYJOB, RAYCLUSTER = WORKLOADS["rayjob"], WORKLOADS["raycluster"]


def submission_id(rj: dict[str, Any]) -> str | None:
    return (rj.get("status") or {}).get("jobId") or (rj.get("spec") or {}).get("jobId")


def rayjobs(kube: KubernetesBackend) -> list[dict[str, Any]]:
    return kube.api.list_if_served(RAYJOB)


class RayJobWatch:
    """RayJobs for the Ray watch, kept as the Kubernetes watch keeps its objects: listed once,
    then watched from the list's resourceVersion at every poll (a 410 Expired relists), so a poll
    costs one watch request however many RayJobs the cluster holds. Without the CRD: none, and
    discovery is asked again only every REDISCOVER_SECONDS."""

    def __init__(self, kube: KubernetesBackend):
        self.kube = kube
        self.cache: Caches | None = None

    def rayjobs(self) -> list[dict[str, Any]]:
        api = self.kube.api
        if self.cache is None:
            key = f"{RAYJOB.plural}.{RAYJOB.group}"
            if key in api.absent and not api.absent_expired(key):
                return []
            try:
                api.served(RAYJOB)
            except Absent:
                return []
            self.cache = Caches(RAYJOB, self.kube.settings.namespaces)
        try:
            self.cache.sync(api, self.kube.settings.watch_seconds)
        except Absent:
            self.cache = None  # KubeRay was uninstalled: its RayJobs went with its CRD
            return []
        return list(self.cache.objects.values())


def rayjob_for(kube: KubernetesBackend, job: str, found: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """The RayJob that submitted `job` (by its submission id), or the RayJob named `job`."""
    found = rayjobs(kube) if found is None else found
    return (next((rj for rj in found if submission_id(rj) == job), None)
            or next((rj for rj in found if kparse.meta(rj)["name"] == job.rpartition("/")[2]), None))


def lines(kube: KubernetesBackend, rj: dict[str, Any]) -> list[str]:
    """What the RayJob, its RayCluster and the cluster's pods that are not running say."""
    m, st = kparse.meta(rj), rj.get("status") or {}
    ns = m.get("namespace")
    out = ["", f"KubeRay (kubectl get rayjob -n {ns} {m['name']}):",
           f"  RayJob {ns}/{m['name']}: jobDeploymentStatus={st.get('jobDeploymentStatus') or '<none>'}, "
           f"jobStatus={st.get('jobStatus') or '<none>'}" + (f", reason={st['reason']}" if st.get("reason") else "")]
    if st.get("message"):
        out.append(f"    message: {' '.join(str(st['message']).split())[:400]}")
    cluster = st.get("rayClusterName") or ((rj.get("spec") or {}).get("clusterSelector") or {}).get("ray.io/cluster")
    if not cluster:
        return out + ["  RayCluster: none yet (the operator has not created one)"]
    try:
        rc = kube.api.get(RAYCLUSTER, ns, cluster)
    except ToolError as e:  # deleted with the job (shutdownAfterJobFinishes), or refused: say which
        return out + [f"  RayCluster {ns}/{cluster}: cannot be read ({e})"]
    rs = rc.get("status") or {}
    out.append(f"  RayCluster {ns}/{cluster}: state={rs.get('state') or '<none>'}, workers ready "
               f"{rs.get('readyWorkerReplicas', 0)}/{rs.get('desiredWorkerReplicas', 0)}"
               + (f", reason={rs['reason']}" if rs.get("reason") else ""))
    stuck = []
    for pod in kube.api.list(POD, ns, labels=f"ray.io/cluster={cluster}")[0]:
        state, reason, code, _ = kparse.pod_state(pod)
        if state != "Running":
            message = next((c.get("message") for c in (pod.get("status") or {}).get("conditions") or []
                            if c.get("type") == "PodScheduled" and c.get("status") == "False"), None)
            stuck.append(f"    pod {kparse.meta(pod)['name']}: {state}" + (f" ({reason})" if reason else "")
                         + (f" exit code {code}" if code else "") + (f": {message}" if message else ""))
    return out + (["  Pods of the RayCluster that are not running:", *stuck] if stuck else [])


def failed_row(rj: dict[str, Any], user_labels: list[str]) -> JobRow | None:
    """A RayJob the operator marked Failed, as a failed job row (its submission id when it has one)."""
    why = kparse.workload_failure(rj)
    if why is None:
        return None
    m = kparse.meta(rj)
    return JobRow(job=submission_id(rj) or m["name"], name=m["name"], user=kparse.first_label(m.get("labels") or {}, user_labels),
                  partition=m.get("namespace"), state="FAILED", reason=why[0], end_time=why[2],
                  submit_time=kparse.when(m.get("creationTimestamp")),
                  start_time=kparse.when((rj.get("status") or {}).get("startTime")))
