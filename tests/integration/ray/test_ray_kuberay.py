"""Under KubeRay, the Ray backend reads the RayJob and RayCluster behind a job by itself: a
real job on the real head, its RayJob and RayCluster (and a worker pod the scheduler cannot
place) on the loopback Kubernetes API server, found by the submission id KubeRay recorded.
A RayJob the operator failed before the head ran anything is reported by the watch."""

from __future__ import annotations

from datetime import timedelta

import kubeseed as k
from raylab import RayLab, kubernetes_settings

from crashcart.tools import REGISTRY
from crashcart.tools.backends.ray import RayBackend

FAILS = """
print("step 1 loss 3.10", flush=True)
raise SystemExit("NCCL error: unhandled system error, NCCL version 2.21.5")
"""


def _add(server, obj):
    store = server.store
    return store.create(store.resource_of(obj["apiVersion"], obj["kind"]), obj["metadata"].get("namespace"), obj)


def test_ray_job_status_reads_the_rayjob_and_raycluster_behind_the_job(ray_lab: RayLab, kuberay):
    server, kube = kuberay
    server.store.install_crd("rayjobs", "rayclusters")
    rj = k.rayjob("tune", namespace="ray")
    submission = rj["status"]["jobId"]
    rj = _add(server, rj)
    rc = _add(server, k.raycluster_of(rj))
    worker = k.pod(f"{rc['metadata']['name']}-gpu-worker-5tq9h", namespace="ray", node_name=None, phase="Pending",
                   labels={"ray.io/cluster": rc["metadata"]["name"], "ray.io/node-type": "worker", "ray.io/group": "gpu"},
                   unschedulable_message="0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes "
                                         "are available: 1 No preemption victims found for incoming pod.")
    _add(server, worker)
    # A second RayJob the operator failed before its cluster ever ran the entrypoint.
    dead = k.rayjob("sweep", namespace="ray")
    dead["status"].update(jobDeploymentStatus="Failed", jobStatus="", reason="DeadlineExceeded",
                          message="The RayJob has passed the activeDeadlineSeconds. DeadlineSeconds: 600",
                          endTime=k.ts(k.ago(seconds=20)))
    dead = _add(server, dead)

    job = ray_lab.submit(ray_lab.script("kuberay_fails.py", FAILS), submission_id=submission)
    assert ray_lab.wait(job) == "FAILED"
    backend = RayBackend(ray_lab.settings().model_copy(update={"kubernetes": kubernetes_settings(kube)}))

    out = backend.run(REGISTRY.get("ray_job_status"), {"job": submission})
    assert out.status == "FAILED" and "NCCL error" in out.text  # the head's own account first
    kuberay_part = out.text.split("KubeRay (kubectl get rayjob -n ray tune):")[1].splitlines()
    assert kuberay_part[1] == "  RayJob ray/tune: jobDeploymentStatus=Running, jobStatus=RUNNING"
    assert kuberay_part[2] == f"  RayCluster ray/{rc['metadata']['name']}: state=ready, workers ready 2/2"
    assert kuberay_part[4].startswith(f"    pod {worker['metadata']['name']}: Pending (Unschedulable): 0/1 nodes are available")

    gone = backend.run(REGISTRY.get("ray_job_status"), {"job": dead["status"]["jobId"]})
    assert gone.status == "FAILED" and gone.row.reason == "DeadlineExceeded"
    assert gone.text.startswith(f"The Ray head has no job {dead['status']['jobId']!r}; its RayJob says:")
    assert "message: The RayJob has passed the activeDeadlineSeconds" in gone.text
    # Its RayCluster went with it (shutdownAfterJobFinishes): said so, not skipped.
    assert ('  RayCluster ray/sweep-raycluster-m4q8z: cannot be read (get raycluster sweep-raycluster-m4q8z in namespace ray: '
            'rayclusters.ray.io "sweep-raycluster-m4q8z" not found)') in gone.text.splitlines()

    changes = backend.changes_since(backend.now() - timedelta(minutes=2), stall_minutes=45)
    failed = {r.job: r for r in changes.failed}
    assert failed[dead["status"]["jobId"]].reason == "DeadlineExceeded"
    assert failed[dead["status"]["jobId"]].partition == "ray"
    assert failed[submission].state == "FAILED"  # the head's own row, not a second one from its RayJob
    assert [r.job for r in changes.failed].count(submission) == 1


def test_without_the_rayjob_crd_the_job_status_is_the_heads_alone(ray_lab: RayLab, kuberay):
    server, kube = kuberay
    job = ray_lab.submit(ray_lab.script("kuberay_fails_plain.py", FAILS))
    assert ray_lab.wait(job) == "FAILED"
    backend = RayBackend(ray_lab.settings().model_copy(update={"kubernetes": kubernetes_settings(kube)}))
    out = backend.run(REGISTRY.get("ray_job_status"), {"job": job})
    assert out.status == "FAILED" and "KubeRay" not in out.text


def test_the_watch_keeps_rayjobs_by_list_and_watch_and_a_410_relists(kuberay):
    """No Ray head needed: the RayJobs behind the Ray watch come from the Kubernetes API alone."""
    from crashcart.tools.backends.kubernetes import KubernetesBackend
    from crashcart.tools.backends.ray._kuberay import RayJobWatch, failed_row

    server, kube = kuberay
    watch = RayJobWatch(KubernetesBackend(kubernetes_settings(kube)))
    assert watch.rayjobs() == []  # no RayJob CRD: nothing, and nothing listed
    server.store.install_crd("rayjobs", "rayclusters")
    watch.kube.api.absent.clear()  # as after REDISCOVER_SECONDS
    _add(server, k.rayjob("tune", namespace="ray"))
    assert [rj["metadata"]["name"] for rj in watch.rayjobs()] == ["tune"]
    listed_at = watch.cache.rv

    dead = k.rayjob("sweep", namespace="ray")
    dead["status"].update(jobDeploymentStatus="Failed", reason="DeadlineExceeded", endTime=k.ts(k.ago(seconds=5)),
                          message="The RayJob has passed the activeDeadlineSeconds. DeadlineSeconds: 600")
    _add(server, dead)
    found = {rj["metadata"]["name"]: rj for rj in watch.rayjobs()}
    assert sorted(found) == ["sweep", "tune"]
    assert failed_row(found["sweep"], ["user"]).reason == "DeadlineExceeded"
    path = "/apis/ray.io/v1/rayjobs"
    lists = [q for m, p, q, _ in server.store.requests if m == "GET" and p == path and "watch" not in q]
    watches = [q for m, p, q, _ in server.store.requests if p == path and q.get("watch") == ["true"]]
    assert len(lists) == 1 and watches[0]["resourceVersion"] == [listed_at]

    server.store.compact()  # the version it holds is gone: the next watch gets a 410 and relists
    _add(server, k.rayjob("eval", namespace="ray"))
    server.store.compact()
    assert sorted(rj["metadata"]["name"] for rj in watch.rayjobs()) == ["eval", "sweep", "tune"]
    assert watch.cache.relists == 2
