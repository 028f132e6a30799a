"""crashcart watch on the loopback cluster: list + watch with resourceVersion (a 410 relists),
one incident per root cause, and `crashcart watch --cluster` / `export` / `eval` end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

import kubeseed as k
from crashcart.agent.guard import policy_from_dict
from crashcart.agent.policies import make_policy
from crashcart.agent.runner import make_deps
from crashcart.agent.store import IncidentStore
from crashcart.agent.watch import Watcher, WatchSettings
from crashcart.tools._spec import REGISTRY, ToolError
from test_k8s_agent import ALLOW_ALL, oom_job


def failures(lab):
    """A crash loop, two failed pods of one PyTorchJob, a bad image tag, a pod that cannot be
    scheduled for 20 minutes, a node that stopped reporting, and healthy work around them."""
    lab.store.install_crd("pytorchjobs")
    for n in ("gpu-a01", "gpu-a02"):
        lab.add(k.node(n))
    lab.add(k.node("gpu-a03", ready=False))
    lab.add(k.pod("healthy-0", node_name="gpu-a02"))
    lab.add(k.pod("done-0", phase="Succeeded", state=k.terminated("Completed", 0, k.ago(hours=2), k.ago(hours=1))))
    lab.add(k.pod("loop-0", restart="Always", restarts=3, state=k.waiting("CrashLoopBackOff", "back-off 40s"),
                  last_state=k.terminated("Error", 1, k.ago(minutes=2), k.ago(minutes=1))))
    pj = lab.add(k.pytorchjob("llama"))
    for i in range(2):
        lab.add(k.pod(f"llama-worker-{i}", owner=pj, phase="Failed", labels={"user": "dana", "training.kubeflow.org/job-name": "llama"},
                      state=k.terminated("Error", 1, k.ago(minutes=5), k.ago(minutes=1))))
    lab.add(k.pod("img-0", phase="Pending", state=k.waiting("ImagePullBackOff", 'Back-off pulling image "x:bad"')))
    big = k.pod("big-0", node_name=None, phase="Pending", started=k.ago(minutes=20),
                unschedulable_message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    big["metadata"]["creationTimestamp"] = k.ts(k.ago(minutes=20))  # created 20 minutes ago
    big = lab.add(big)
    lab.add(k.event(big, "FailedScheduling", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", component="default-scheduler"))
    lab.add(k.pod("young-0", node_name=None, phase="Pending", unschedulable_message="0/3 nodes are available"))


def test_one_poll_finds_each_failure_once(lab):
    failures(lab)
    b = lab.backend()
    changes = b.changes_since(b.now() - timedelta(minutes=10), stall_minutes=45)
    assert sorted((r.job, r.state) for r in changes.failed) == [("llama-worker-0", "Failed"), ("loop-0", "CrashLoopBackOff")]
    assert sorted((r.job, r.reason) for r in changes.pending) == [("big-0", "Unschedulable"), ("img-0", "ImagePullBackOff")]
    assert [(n.node, n.state) for n in changes.nodes_down] == [("gpu-a03", "not_ready")]
    lists = [p for m, p, q, _ in lab.store.requests if m == "GET" and "watch" not in q and p in ("/api/v1/pods", "/api/v1/nodes")]
    assert sorted(lists) == ["/api/v1/nodes", "/api/v1/pods"]


def test_later_polls_watch_from_the_resource_version_and_a_410_relists(lab):
    lab.add(k.node("gpu-a01"))
    b = lab.backend()
    first = b.changes_since(b.now() - timedelta(minutes=10), 45)
    assert first.failed == []
    listed_at = b.informer.pods.rv
    lab.add(k.pod("oom-0", phase="Failed", state=k.terminated("OOMKilled", 137, k.ago(minutes=3), k.ago(seconds=5))))
    second = b.changes_since(b.now() - timedelta(minutes=1), 45)
    assert [r.job for r in second.failed] == ["oom-0"]
    watches = [q for m, p, q, _ in lab.store.requests if q.get("watch") == ["true"] and p == "/api/v1/pods"]
    assert watches[0]["resourceVersion"] == [listed_at]
    assert watches[0]["allowWatchBookmarks"] == ["true"]
    relists = b.informer.pods.relists
    lab.store.compact()
    lab.add(k.pod("oom-1", phase="Failed", state=k.terminated("OOMKilled", 137, k.ago(minutes=3), k.ago(seconds=2))))
    lab.store.compact()
    third = b.changes_since(b.now() - timedelta(minutes=1), 45)
    assert b.informer.pods.relists == relists + 1
    assert sorted(r.job for r in third.failed) == ["oom-0", "oom-1"]


def test_watcher_acts_once_per_failure(lab, tmp_path):
    oom_job(lab)
    b = lab.backend()
    store = IncidentStore(str(tmp_path / "w.duckdb"))
    watcher = Watcher(make_deps(b, make_policy("playbook"), policy_from_dict(ALLOW_ALL), store, cluster="loopback"),
                      cluster="loopback", settings=WatchSettings(interval_s=0))
    store.set_watch_cursor("loopback", b.now() - timedelta(minutes=10))
    touched = watcher.poll_once()
    assert len(touched) == 1
    assert [j["metadata"]["name"] for j in lab.all("batch/v1", "Job")] == ["biencoder-idx", "biencoder-idx-r1"]
    assert watcher.poll_once() == []
    assert len(lab.all("batch/v1", "Job")) == 2


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "crashcart.agent.interfaces.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=240)


def test_watch_cluster_export_and_eval_end_to_end(lab, tmp_path):
    oom_job(lab)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({
        "name": "loopback", "backend": "kubernetes",
        "kubernetes": {"connection": {"kubeconfig": str(lab.kubeconfig), "context": "loopback"}, "namespaces": ["train"]},
        "guard": ALLOW_ALL}))
    state = tmp_path / "state"
    watched = _cli("watch", "--cluster", str(cluster), "--polls", "1", "--interval", "0", "--lookback-minutes", "10",
                   "--state-dir", str(state), cwd=tmp_path)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    incident = next(line.split()[0] for line in watched.stdout.splitlines() if line.startswith("inc-"))
    assert "host_oom" in watched.stdout, watched.stdout
    out = tmp_path / "exported.yaml"
    exported = _cli("export", incident, "--out", str(out), "--state-dir", str(state), cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    scenario = yaml.safe_load(out.read_text())
    assert scenario["backend"] == "kubernetes"
    job = next(j for j in scenario["cluster"]["jobs"] if j["id"] == "biencoder-idx-k2l9v")
    assert (job["state"], job["reason"], job["exit_code"]) == ("Failed", "OOMKilled", "137")
    result = _cli("eval", str(out), "--json", str(tmp_path / "eval.json"), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((tmp_path / "eval.json").read_text())["scenarios"][0]["passed"] is True


def test_a_running_gpu_pod_whose_log_stopped_is_stalled(lab):
    lab.add(k.node("gpu-a01"))
    for name in ("hung-0", "busy-0"):
        lab.add(k.pod(name, started=k.ago(hours=2)))
    lab.store.set_log("train", "hung-0", [(k.ago(minutes=90), "step 100 loss 2.1"), (k.ago(minutes=61), "step 110 loss 2.0")])
    lab.store.set_log("train", "busy-0", [(k.ago(minutes=2), "step 900 loss 1.7")])
    b = lab.backend()
    changes = b.changes_since(b.now() - timedelta(minutes=1), stall_minutes=45)
    assert [r.job for r in changes.stalled] == ["hung-0"]
    reads = lambda: [p for _, p, q, _ in lab.store.requests if p.endswith("/log")]  # noqa: E731
    assert sorted(reads()) == ["/api/v1/namespaces/train/pods/busy-0/log", "/api/v1/namespaces/train/pods/hung-0/log"]
    again = b.changes_since(b.now() - timedelta(minutes=1), stall_minutes=45)
    assert [r.job for r in again.stalled] == ["hung-0"]
    assert reads().count("/api/v1/namespaces/train/pods/busy-0/log") == 1  # its log moved: not read again yet


def test_a_job_that_failed_without_pods_is_one_failure(lab):
    lab.add(k.node("gpu-a01"))
    j = lab.add(k.job("nightly-eval"))
    lab.update(j, lambda o: o["status"].update(conditions=[
        {"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded", "message": "Job was active longer than specified deadline",
         "lastProbeTime": k.ts(k.ago(seconds=40)), "lastTransitionTime": k.ts(k.ago(seconds=40))},
        {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "Job was active longer than specified deadline",
         "lastProbeTime": k.ts(k.ago(seconds=30)), "lastTransitionTime": k.ts(k.ago(seconds=30))}], failed=1))
    j2 = lab.add(k.job("ft"))
    lab.update(j2, lambda o: o["status"].update(conditions=[
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit",
         "lastTransitionTime": k.ts(k.ago(seconds=20))}]))
    lab.add(k.pod("ft-abcde", owner=lab.get("batch/v1", "Job", "train", "ft"), phase="Failed",
                  state=k.terminated("OOMKilled", 137, k.ago(minutes=5), k.ago(seconds=25))))
    b = lab.backend()
    changes = b.changes_since(b.now() - timedelta(minutes=5), 45)
    assert sorted((r.job, r.state, r.reason) for r in changes.failed) == [
        ("ft-abcde", "Failed", "OOMKilled"), ("nightly-eval", "Failed", "DeadlineExceeded")]


def test_each_watched_namespace_is_listed_and_watched_from_its_own_version(lab):
    lab.add(k.node("gpu-a01"))
    lab.add(k.pod("a-0", namespace="train"))
    lab.add(k.pod("elsewhere-0", namespace="kube-system", phase="Failed",
                  state=k.terminated("Error", 1, k.ago(minutes=2), k.ago(seconds=10))))
    b = lab.backend(namespaces=["train", "research"])
    assert b.changes_since(b.now() - timedelta(minutes=5), 45).failed == []
    lab.add(k.pod("r-0", namespace="research", phase="Failed", state=k.terminated("OOMKilled", 137, k.ago(minutes=2), k.ago(seconds=5))))
    assert [r.job for r in b.changes_since(b.now() - timedelta(minutes=5), 45).failed] == ["r-0"]
    pod_paths = sorted({p for m, p, q, _ in lab.store.requests if p.endswith("/pods")})
    assert pod_paths == ["/api/v1/namespaces/research/pods", "/api/v1/namespaces/train/pods"]
    watched = [(p, q["resourceVersion"][0]) for m, p, q, _ in lab.store.requests if q.get("watch") and p.endswith("/pods")]
    assert {p for p, _ in watched} == set(pod_paths)


def _fail(lab, obj, status: dict) -> dict:
    return lab.update(obj, lambda o: o["status"].update(status))


def operator_failures(lab):
    """Workloads that failed with no pod left to show it: a PyTorchJob whose cleanPodPolicy
    removed its pods, a JobSet whose two Jobs hit their backoff limit, a RayJob whose entrypoint
    failed (its RayCluster and submitter Job owned by it); one JobSet whose pod is still there,
    one that failed two hours ago and a PyTorchJob that runs."""
    lab.store.install_crd("pytorchjobs", "jobsets", "rayjobs", "rayclusters")
    lab.add(k.node("gpu-a01"))
    llama = lab.add(k.pytorchjob("llama"))
    _fail(lab, llama, {"conditions": llama["status"]["conditions"] + [
        {"type": "Failed", "status": "True", "reason": "PyTorchJobFailed",
         "message": "PyTorchJob train/llama is failed because 1 Worker replica(s) failed.",
         "lastUpdateTime": k.ts(k.ago(seconds=40)), "lastTransitionTime": k.ts(k.ago(seconds=40))}],
        "replicaStatuses": {"Master": {"active": 0, "failed": 0}, "Worker": {"failed": 1}}})
    lab.add(k.pytorchjob("healthy"))
    for name, at in (("sft", k.ago(seconds=30)), ("old", k.ago(hours=2))):
        js = lab.add(k.jobset(name))
        for i in range(2):
            child = lab.add(k.owned_by(k.job(f"{name}-workers-{i}"), js))
            _fail(lab, child, {"conditions": k.failed_condition("BackoffLimitExceeded", "Job has reached the specified backoff limit", at),
                               "failed": 1})
        _fail(lab, js, {"conditions": [{"type": "Failed", "status": "True", "reason": "FailedJobs",
                                        "message": "jobset failed due to one or more job failures",
                                        "lastTransitionTime": k.ts(at)}], "terminalState": "Failed"})
    rl = lab.add(k.jobset("rl", replicas=1))
    rl_job = lab.add(k.owned_by(k.job("rl-workers-0"), rl))
    _fail(lab, rl_job, {"conditions": k.failed_condition("BackoffLimitExceeded", "Job has reached the specified backoff limit", k.ago(seconds=20))})
    _fail(lab, rl, {"conditions": [{"type": "Failed", "status": "True", "reason": "FailedJobs",
                                    "message": "jobset failed due to one or more job failures", "lastTransitionTime": k.ts(k.ago(seconds=20))}]})
    lab.add(k.pod("rl-workers-0-0-q8x2d", owner=lab.get("batch/v1", "Job", "train", "rl-workers-0"), phase="Failed",
                  labels={"user": "dana", "jobset.sigs.k8s.io/jobset-name": "rl"},
                  state=k.terminated("OOMKilled", 137, k.ago(minutes=9), k.ago(seconds=25))))
    tune = lab.add(k.rayjob("tune"))
    lab.add(k.raycluster_of(tune))
    submitter = lab.add(k.owned_by(k.job("tune", c=k.container(name="ray-job-submitter", gpus=0, memory="1Gi")), tune))
    _fail(lab, submitter, {"conditions": k.failed_condition("BackoffLimitExceeded", "Job has reached the specified backoff limit", k.ago(seconds=12))})
    _fail(lab, tune, {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": "AppFailed",
                      "message": "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\n"
                                 "torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
                      "endTime": k.ts(k.ago(seconds=10)), "failed": 1, "succeeded": 0})


def test_failed_operator_workloads_with_no_pods_left_are_one_failure_per_root_cause(lab):
    operator_failures(lab)
    b = lab.backend()
    changes = b.changes_since(b.now() - timedelta(minutes=5), 45)
    assert sorted((r.job, r.partition, r.state, r.reason) for r in changes.failed) == [
        ("llama", "train", "Failed", "PyTorchJobFailed"),
        ("rl-workers-0-0-q8x2d", "train", "Failed", "OOMKilled"),
        ("sft", "train", "Failed", "FailedJobs"),
        ("tune", "train", "Failed", "AppFailed")]
    assert sorted(b.informer.workloads) == ["jobset", "pytorchjob", "raycluster", "rayjob"]
    # Later polls watch the operators' objects from their lists' versions, as they do pods.
    watched = {p for m, p, q, _ in lab.store.requests if q.get("watch") == ["true"]}
    assert watched == set()
    b.changes_since(b.now() - timedelta(minutes=5), 45)
    watched = {p for m, p, q, _ in lab.store.requests if q.get("watch") == ["true"]}
    assert {"/apis/kubeflow.org/v1/pytorchjobs", "/apis/jobset.x-k8s.io/v1alpha2/jobsets", "/apis/ray.io/v1/rayjobs"} <= watched


def test_a_failed_workload_with_no_pod_says_so_when_asked_for_its_log(lab):
    operator_failures(lab)
    b = lab.backend()
    with pytest.raises(ToolError, match=r"PyTorchJob llama failed \(PyTorchJobFailed: .*1 Worker replica\(s\) failed.*no pod left"):
        b.run(REGISTRY.get("get_logs"), {"job": "train/llama"})


def test_no_operator_installed_costs_one_discovery_and_a_late_install_is_noticed(lab, monkeypatch):
    from crashcart.tools.backends.kubernetes import _client

    lab.add(k.node("gpu-a01"))
    b = lab.backend()
    for _ in range(3):
        assert b.changes_since(b.now() - timedelta(minutes=5), 45).failed == []
    assert b.informer.workloads == {}
    assert [p for m, p, q, _ in lab.store.requests if p == "/apis"] == ["/apis"]  # asked once, not per poll
    assert not [p for m, p, q, _ in lab.store.requests if p.startswith("/apis/kubeflow.org")]
    lab.store.install_crd("pytorchjobs")
    pj = lab.add(k.pytorchjob("late"))
    _fail(lab, pj, {"conditions": [{"type": "Failed", "status": "True", "reason": "PyTorchJobFailed",
                                    "message": "PyTorchJob train/late is failed because 1 Master replica(s) failed.",
                                    "lastTransitionTime": k.ts(k.ago(seconds=5))}]})
    monkeypatch.setattr(_client, "REDISCOVER_SECONDS", 0)
    assert [r.job for r in b.changes_since(b.now() - timedelta(minutes=5), 45).failed] == ["late"]


def test_the_watcher_opens_one_incident_per_failed_workload_and_none_again(lab, tmp_path):
    operator_failures(lab)
    b = lab.backend()
    store = IncidentStore(str(tmp_path / "ops.duckdb"))
    observe = {**ALLOW_ALL, "mode": "observe"}
    watcher = Watcher(make_deps(b, make_policy("playbook"), policy_from_dict(observe), store, cluster="loopback"),
                      cluster="loopback", settings=WatchSettings(interval_s=0))
    store.set_watch_cursor("loopback", b.now() - timedelta(minutes=5))
    before = lab.snapshot()
    touched = watcher.poll_once()
    assert len(touched) == 4  # llama, sft (its two Jobs with it), rl (its pod speaks), tune (its RayCluster and submitter with it)
    assert watcher.poll_once() == []
    assert lab.snapshot() == before  # observe mode: every write denied
