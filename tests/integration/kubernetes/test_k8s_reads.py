"""Read tools of the kubernetes backend, through the official client, against injected failures."""

from __future__ import annotations

import pytest

import kubeseed as k
from crashcart.tools._spec import REGISTRY, ToolError


def run(backend, tool: str, **args):
    return backend.run(REGISTRY.get(tool), args)


@pytest.fixture
def oom(lab):
    """A batch Job whose only pod was OOMKilled on gpu-a01."""
    lab.add(k.node("gpu-a01"))
    j = lab.add(k.job("llama-ft", c=k.container(memory="32Gi", args=["--batch_size=32", "--num_workers=8"],
                                                env={"NCCL_DEBUG": "WARN", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})))
    p = lab.add(k.pod("llama-ft-7xk2p", owner=j, phase="Failed",
                      c=k.container(memory="32Gi", args=["--batch_size=32", "--num_workers=8"]),
                      state=k.terminated("OOMKilled", 137, k.ago(minutes=30), k.ago(minutes=3))))
    lab.store.set_log("train", "llama-ft-7xk2p", "2026-11-24 10:00:01 step 10 loss 2.31\n"
                      "loading shards into host memory (41.2 GB)\n")
    lab.add(k.event(j, "BackoffLimitExceeded", "Job has reached the specified backoff limit", component="job-controller"))
    return p


def test_failed_pod_row_and_describe_carry_the_termination(lab, oom):
    b = lab.backend()
    out = run(b, "list_jobs", partition="train")
    row = out.rows[0]
    assert (row.job, row.state, row.reason, row.exit_code, row.nodes, row.gpus, row.user) == (
        "llama-ft-7xk2p", "Failed", "OOMKilled", "137", ["gpu-a01"], 8, "dana")
    assert "OOMKilled" in out.text.splitlines()[1]
    d = run(b, "kubectl_describe", kind="pod", name="llama-ft-7xk2p", namespace="train")
    assert "Reason:       OOMKilled" in d.text and "Exit Code:    137" in d.text
    assert d.job.reason == "OOMKilled"


def test_job_config_reads_the_workload_manifest(lab, oom):
    out = run(lab.backend(), "job_config", job="llama-ft-7xk2p")
    c = out.config
    assert (c["batch_size"], c["num_workers"], c["memory_limit_gi"], c["gpus_per_pod"], c["nproc_per_node"]) == (32, 8, 32, 8, 8)
    assert c["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert c["backoff_limit"] == 0
    assert out.text.startswith("# Job train/llama-ft:")


def test_logs_and_workload_name_both_find_the_pod(lab, oom):
    b = lab.backend()
    by_pod = run(b, "get_logs", job="llama-ft-7xk2p", tail=50)
    by_job = run(b, "get_logs", job="train/llama-ft", tail=50)
    assert "41.2 GB" in by_pod.text and by_pod.text == by_job.text


def test_crashloop_previous_container_is_an_earlier_attempt(lab):
    lab.add(k.node("gpu-a01"))
    lab.add(k.pod("tok-0", phase="Running", restart="Always", restarts=5,
                  state=k.waiting("CrashLoopBackOff", "back-off 5m0s restarting failed container=trainer pod=tok-0_train(1b2c)"),
                  last_state=k.terminated("Error", 1, k.ago(minutes=3), k.ago(minutes=2))))
    lab.store.set_log("train", "tok-0", "OSError: Can't load tokenizer for 'meta-llama/Llama-3-8B'.", previous=True)
    b = lab.backend()
    rows = run(b, "job_history", job="tok-0").rows
    assert [(r.state, r.attempt) for r in rows] == [("Failed", 1), ("CrashLoopBackOff", None)]
    assert rows[-1].exit_code == "1"
    log = run(b, "get_logs", job="tok-0", attempt=1)
    assert "Can't load tokenizer" in log.text and "previous container" in log.text
    with pytest.raises(ToolError, match="attempt must be 1..1"):
        run(b, "get_logs", job="tok-0", attempt=2)


def test_pending_reasons_image_pull_and_unschedulable(lab):
    lab.add(k.pod("img-0", state=k.waiting("ImagePullBackOff", 'Back-off pulling image "nvcr.io/nvidia/pytorch:24.13-py3"'),
                  phase="Pending"))
    sched = lab.add(k.pod("big-0", node_name=None, phase="Pending",
                          unschedulable_message="0/4 nodes are available: 4 Insufficient nvidia.com/gpu."))
    lab.add(k.event(sched, "FailedScheduling", "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: "
                    "0/4 nodes are available: 4 No preemption victims found for incoming pod.", component="default-scheduler", count=7))
    b = lab.backend()
    rows = {r.job: (r.state, r.reason) for r in run(b, "list_jobs").rows}
    assert rows == {"img-0": ("Pending", "ImagePullBackOff"), "big-0": ("Pending", "Unschedulable")}
    ev = run(b, "kubectl_events", namespace="train", object="pod/big-0")
    assert [e.reason for e in ev.events] == ["FailedScheduling"] and "Insufficient nvidia.com/gpu" in ev.text
    assert any("involvedObject.name=big-0" in (q.get("fieldSelector") or [""])[0]
               for _, path, q, _ in lab.store.requests if path.endswith("/events"))


def test_nodes_show_not_ready_cordoned_gpus_and_pools(lab):
    lab.add(k.node("gpu-a01"))
    lab.add(k.node("gpu-a02", ready=False))
    lab.add(k.node("gpu-b01", pool="a100", unschedulable=True))
    lab.add(k.pod("run-0", node_name="gpu-a01"))
    b = lab.backend()
    out = run(b, "kubectl_get_nodes")
    states = {r.node: (r.state, r.partition, r.gpus, r.gpu_model) for r in out.rows}
    assert states == {"gpu-a01": ("allocated", "h100", 8, "NVIDIA H100 80GB HBM3"),
                      "gpu-a02": ("not_ready", "h100", 8, "NVIDIA H100 80GB HBM3"),
                      "gpu-b01": ("cordoned", "a100", 8, "NVIDIA H100 80GB HBM3")}
    not_ready = next(r for r in out.rows if r.node == "gpu-a02")
    assert not_ready.reason == "Kubelet stopped posting node status."
    assert "node.kubernetes.io/unreachable:NoExecute" in not_ready.taints
    assert "NotReady" in out.text
    assert [r.node for r in run(b, "kubectl_get_nodes", partition="a100").rows] == ["gpu-b01"]
    d = run(b, "kubectl_describe", kind="node", name="gpu-a01")
    assert "nvidia.com/gpu:  8" in d.text and "run-0" in d.text


def test_training_operator_objects_degrade_cleanly_when_absent(lab):
    b = lab.backend()
    with pytest.raises(ToolError, match="PyTorchJob is not installed on this cluster"):
        run(b, "kubectl_describe", kind="pytorchjob", name="llama", namespace="train")
    lab.store.install_crd("pytorchjobs")
    pj = lab.add(k.pytorchjob("llama", workers=3))
    lab.add(k.pod("llama-worker-0", owner=pj, node_name="gpu-a01"))
    d = run(b, "kubectl_describe", kind="pytorchjob", name="llama", namespace="train")
    assert "Kind:         PyTorchJob" in d.text and d.job.state == "Running"
    assert d.job.gpus == 8 * 4
    assert run(b, "job_config", job="llama").config["replicas"] == 3


def test_unknown_names_and_node_commands_say_so(lab):
    lab.add(k.node("gpu-a01"))
    b = lab.backend()
    with pytest.raises(ToolError, match="neither a pod nor a workload"):
        run(b, "get_logs", job="nope")
    with pytest.raises(ToolError, match=r"node 'gpu-z9' is not in this Kubernetes cluster \(known: gpu-a01\)"):
        run(b, "kernel_log", node="gpu-z9")
    out = run(b, "nvidia_smi_query", node="gpu-a01")
    assert out.gpus == [] and "not available" in out.text


def test_unreachable_api_server_is_a_clear_error(lab, tmp_path):
    bad = tmp_path / "kc"
    bad.write_text(lab.kubeconfig.read_text().replace(lab.server.url, "http://127.0.0.1:1"))
    b = lab.backend(connection={"kubeconfig": str(bad), "context": "loopback", "request_timeout": 2})
    with pytest.raises(ToolError, match="cannot be reached"):
        run(b, "kubectl_get_nodes")


def test_a_rayjob_speaks_through_its_raycluster_pods(lab):
    lab.store.install_crd("rayjobs", "rayclusters")
    lab.add(k.node("gpu-a01"))
    tmpl = {"spec": k.pod_spec(None, k.container(name="ray-worker", args=["--batch_size=64"]))}
    rj = lab.add({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "sweep", "namespace": "train"},
                  "spec": {"entrypoint": "python sweep.py", "rayClusterSpec": {
                      "headGroupSpec": {"rayStartParams": {}, "template": tmpl},
                      "workerGroupSpecs": [{"groupName": "gpu", "replicas": 4, "minReplicas": 0, "maxReplicas": 4,
                                            "rayStartParams": {}, "template": tmpl}]}},
                  "status": {"jobStatus": "FAILED", "jobDeploymentStatus": "Failed", "reason": "AppFailed"}})
    rc = lab.add({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "sweep-raycluster-x7k2p", "namespace": "train",
                  "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "sweep", "uid": rj["metadata"]["uid"], "controller": True}]},
                  "spec": rj["spec"]["rayClusterSpec"]})
    lab.add(k.pod("sweep-raycluster-x7k2p-gpu-worker-abcde", owner=rc, phase="Failed",
                  state=k.terminated("OOMKilled", 137, k.ago(minutes=9), k.ago(minutes=2))))
    b = lab.backend()
    cfg = run(b, "job_config", job="sweep").config
    assert (cfg["batch_size"], cfg["replicas"]) == (64, 4)
    row = run(b, "kubectl_describe", kind="rayjob", name="sweep", namespace="train").job
    assert (row.state, row.nodes) == ("Failed", ["gpu-a01"])
    out = run(b, "resubmit", job="sweep-raycluster-x7k2p-gpu-worker-abcde", reason="x", changes={"memory_limit_gi": 128})
    new = lab.get("ray.io/v1", "RayJob", "train", out.new_job)
    groups = new["spec"]["rayClusterSpec"]
    assert [g["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
            for g in [groups["headGroupSpec"], *groups["workerGroupSpecs"]]] == ["128Gi", "128Gi"]


def test_node_commands_run_in_the_configured_daemonset_pod(lab):
    from crashcart.tools import render
    from crashcart.tools.cluster import GpuSample

    lab.add(k.node("gpu-a01"))
    lab.add(k.node("gpu-a02"))
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "nvidia-driver-daemonset", "uid": "ds1"}}
    lab.add(k.pod("nvidia-driver-daemonset-8x2kq", namespace="gpu-operator", node_name="gpu-a01", owner=ds,
                  labels={"app": "nvidia-driver-daemonset"}, c=k.container(name="nvidia-driver-ctr", gpus=0)))
    csv = "\n".join(render.nvidia_smi_csv([GpuSample(index=i, temperature_c=41, power_w=110.5, sm_clock_mhz=1980, util_pct=0,
                                                     memory_used_mib=0, memory_total_mib=81559, ecc_uncorrected=0,
                                                     remapped_rows_pending=0) for i in range(7)], "NVIDIA H100 80GB HBM3"))
    dmesg = ("[Mon Nov 24 21:02:11 2026] NVRM: Xid (PCI:0000:9b:00): 79, pid=41235, name=python, GPU has fallen off the bus.\n"
             "[Mon Nov 24 21:02:11 2026] NVRM: GPU 0000:9b:00.0: GPU has fallen off the bus.\n")
    ran = []

    def handler(command):
        ran.append(command)
        return (csv, "", 0) if command[0] == "nvidia-smi" else (dmesg, "", 0)
    lab.store.exec[("gpu-operator", "nvidia-driver-daemonset-8x2kq")] = handler
    b = lab.backend(node_access={"method": "daemonset", "namespace": "gpu-operator",
                                 "selector": "app=nvidia-driver-daemonset", "container": "nvidia-driver-ctr"})
    gpus = run(b, "nvidia_smi_query", node="gpu-a01")
    assert len(gpus.gpus) == 7 and gpus.gpus[0].temperature_c == 41  # one GPU missing from the list
    log = run(b, "kernel_log", node="gpu-a01", grep="Xid")
    assert "fallen off the bus" in log.text and log.total_lines == 2
    assert [c[0] for c in ran] == ["nvidia-smi", "dmesg"]
    with pytest.raises(ToolError, match="no pod of the node-access DaemonSet .* runs on node gpu-a02"):
        run(b, "kernel_log", node="gpu-a02")
    lab.store.exec[("gpu-operator", "nvidia-driver-daemonset-8x2kq")] = lambda c: ("", "dmesg: read kernel buffer failed: Operation not permitted\n", 1)
    with pytest.raises(ToolError, match="exited 1: dmesg: read kernel buffer failed"):
        run(b, "kernel_log", node="gpu-a01")
