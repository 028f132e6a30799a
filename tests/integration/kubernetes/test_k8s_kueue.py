"""Kueue through the dynamic client: a Workload's pending reason and admission, a ClusterQueue's
quota usage, read with discovery and degrading cleanly where Kueue is not installed."""

from __future__ import annotations

import pytest

import kubeseed as k
from crashcart.tools._spec import REGISTRY, ToolError

NO_QUOTA = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed"


def run(backend, tool: str, **args):
    return backend.run(REGISTRY.get(tool), args)


def queued_job(lab, name: str, **workload):
    job = k.job(name, labels={"user": "dana", "kueue.x-k8s.io/queue-name": "team-a"})
    job["spec"]["suspend"] = True  # Kueue keeps it suspended until its Workload is admitted
    job = lab.add(job)
    wl = lab.add(k.kueue_workload(job, "team-a", **workload))
    if "pending" in workload:
        lab.add(k.event(wl, "Pending", workload["pending"], component="kueue-admission"))
    return job, wl


@pytest.fixture
def kueue(lab):
    lab.store.install_crd("workloads", "clusterqueues", "localqueues")
    lab.add(k.node("gpu-a01"))
    lab.add(k.clusterqueue("gpu-cq"))
    lab.add(k.localqueue("team-a", "train", "gpu-cq"))
    return lab


def test_a_pending_workload_says_why_and_how_full_its_queue_is(kueue):
    job, wl = queued_job(kueue, "llama-ft", pending=NO_QUOTA)
    b = kueue.backend()
    by_job = run(b, "kubectl_describe", kind="workload", name="llama-ft", namespace="train")
    by_name = run(b, "kubectl_describe", kind="workload", name=wl["metadata"]["name"])
    assert by_job.text.split("Events:")[0] == by_name.text.split("Events:")[0]
    lines = by_job.text.splitlines()
    assert lines[0] == (f"[crashcart: Kueue Workload train/{wl['metadata']['name']} for Job llama-ft in LocalQueue team-a: "
                        f"Pending (Pending): {NO_QUOTA}]")
    assert lines[1] == "[crashcart: ClusterQueue gpu-cq (cohort research): 1 pending, 8 reserving quota, 8 admitted workload(s)]"
    quota = next(line for line in lines if line.startswith("h100") and "nvidia.com/gpu" in line)
    assert quota.split() == ["h100", "nvidia.com/gpu", "64", "-", "64", "64", "0"]
    # kubectl's own describe of the object follows, events included.
    assert "Kind:         Workload" in by_job.text and "Queue Name:" in by_job.text
    # Aligned as kubectl aligns a condition: two spaces past "Last Transition Time:".
    assert f"    Message:{' ' * 15}{NO_QUOTA}" in by_job.text.splitlines()
    assert "kueue-admission" not in by_job.text.split("Events:")[0] and NO_QUOTA in by_job.text.split("Events:")[1]
    assert (by_job.job.job, by_job.job.state, by_job.job.reason, by_job.job.name) == (wl["metadata"]["name"], "Pending", "Pending", "llama-ft")
    # The Job's own describe leads with Kueue's reason: it is suspended because of it.
    d = run(b, "kubectl_describe", kind="job", name="llama-ft", namespace="train")
    assert d.text.splitlines()[0] == lines[0]
    assert d.job.state == "Pending" and d.job.reason == "JobSuspended"
    # Discovery found Kueue's group and the objects were read through it.
    paths = [p for _, p, _, _ in kueue.store.requests]
    assert "/apis" in paths and "/apis/kueue.x-k8s.io/v1beta1" in paths


def test_an_admitted_workload_names_its_flavors_and_usage(kueue):
    _, wl = queued_job(kueue, "eval-7b", admitted_to="gpu-cq")
    out = run(kueue.backend(), "kubectl_describe", kind="workload", name="eval-7b")
    assert out.job.state == "Admitted"
    assert ("[crashcart: quota in ClusterQueue gpu-cq: pod set main x1 on flavors cpu=h100, memory=h100, "
            "nvidia.com/gpu=h100; uses cpu: 32, memory: 64Gi, nvidia.com/gpu: 8]") in out.text.splitlines()


def test_a_clusterqueue_shows_its_quota_and_an_unknown_one_lists_the_known(kueue):
    b = kueue.backend()
    out = run(b, "kubectl_describe", kind="clusterqueue", name="gpu-cq")
    header = out.text.splitlines()[1].split()
    assert header[:3] == ["FLAVOR", "RESOURCE", "NOMINAL"]
    assert "Nominal Quota:  64" in out.text and "Queueing Strategy:" in out.text
    with pytest.raises(ToolError, match=r'clusterqueues.kueue.x-k8s.io "cpu-cq" not found \(known: gpu-cq\)'):
        run(b, "kubectl_describe", kind="clusterqueue", name="cpu-cq")


def test_a_missing_local_queue_is_named(kueue):
    job = kueue.add(k.job("stray", labels={"user": "dana", "kueue.x-k8s.io/queue-name": "team-z"}))
    kueue.add(k.kueue_workload(job, "team-z", pending="LocalQueue team-z doesn't exist"))
    out = run(kueue.backend(), "kubectl_describe", kind="workload", name="stray")
    assert "[crashcart: LocalQueue team-z does not exist in namespace train: Kueue cannot admit a workload sent to it]" in out.text


def test_without_kueue_the_tools_say_so_and_jobs_still_describe(lab):
    lab.add(k.node("gpu-a01"))
    lab.add(k.job("plain"))
    b = lab.backend()
    with pytest.raises(ToolError, match=r"Kueue is not installed on this cluster \(discovery lists no workloads.kueue.x-k8s.io\)"):
        run(b, "kubectl_describe", kind="workload", name="plain", namespace="train")
    with pytest.raises(ToolError, match="Kueue is not installed"):
        run(b, "kubectl_describe", kind="clusterqueue", name="gpu-cq")
    d = run(b, "kubectl_describe", kind="job", name="plain", namespace="train")
    assert d.text.startswith("Name:") and "Kueue" not in d.text
