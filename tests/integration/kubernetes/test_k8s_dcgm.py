"""GPU metrics on Kubernetes from NVIDIA's DCGM exporter: its /metrics (Prometheus text, as
dcgm-exporter prints it) served by a real HTTP server on loopback and reached the way crashcart
reaches it on a cluster, through the API server's pod proxy; reported as unavailable when no
exporter is configured."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import kubeseed as k
from crashcart.tools._spec import REGISTRY, ToolError

SICK = {3: {"DCGM_FI_DEV_GPU_TEMP": 91, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 0x48, "DCGM_FI_DEV_XID_ERRORS": 79,
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 2, "DCGM_FI_DEV_GPU_UTIL": 0, "DCGM_FI_DEV_POWER_USAGE": 87.113}}


def run(backend, tool: str, **args):
    return backend.run(REGISTRY.get(tool), args)


class Exporters:
    """dcgm-exporter pods whose port 9400 is a real HTTP server on loopback, one per node, each
    serving the /metrics text the test sets."""

    def __init__(self, lab):
        self.lab = lab
        self.bodies: dict[str, bytes] = {}
        self.servers: list[ThreadingHTTPServer] = []

    def serve(self, node: str, overrides=None, pod_of=None) -> dict:
        bodies, name = self.bodies, node
        bodies[name] = k.dcgm_metrics(node, overrides=overrides, pod_of=pod_of).encode()

        class Metrics(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                body = bodies[name]
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.servers.append(server)
        pod = self.lab.add(k.dcgm_exporter_pod(node))
        self.lab.store.proxies[("gpu-operator", pod["metadata"]["name"], 9400)] = f"http://127.0.0.1:{server.server_address[1]}"
        return pod

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


@pytest.fixture
def exporters(lab):
    found = Exporters(lab)
    yield found
    found.close()


@pytest.fixture
def exporter(lab, exporters):
    """gpu-a01 with a dcgm-exporter pod whose port 9400 is a real HTTP server on loopback."""
    lab.add(k.node("gpu-a01"))
    lab.add(k.node("gpu-a02"))
    return exporters.serve("gpu-a01", overrides=SICK, pod_of={i: ("train", "llama-worker-0", "pytorch") for i in range(8)})


def test_gpu_metrics_read_the_exporter_through_the_pod_proxy(lab, exporter):
    b = lab.backend(node_access={"dcgm_exporter": {}})
    out = run(b, "gpu_metrics", node="gpu-a01")
    assert [g.index for g in out.gpus] == list(range(8))
    sick, well = out.gpus[3], out.gpus[0]
    assert (sick.temperature_c, sick.util_pct, sick.power_w, sick.ecc_uncorrected) == (91, 0, 87.113, 2)
    assert sick.throttle_reasons == ["hw_slowdown", "hw_thermal_slowdown"]
    assert (well.temperature_c, well.memory_used_mib, well.memory_total_mib, well.throttle_reasons) == (47, 72560, 72560 + 8011 + 588, [])
    assert well.remapped_rows_pending is None  # not collected by this exporter: unknown, not 0
    assert out.text.splitlines()[-1] == "Last Xid per GPU (DCGM_FI_DEV_XID_ERRORS): GPU 3: Xid 79"
    row = next(line for line in out.text.splitlines() if line.split()[1:2] == ["3"])
    assert row.split()[2:4] == ["91", "87.113"] and row.split()[-1] == "hw_slowdown,hw_thermal_slowdown"
    proxied = [p for m, p, _, _ in lab.store.requests if "/proxy" in p]
    assert proxied == [f"/api/v1/namespaces/gpu-operator/pods/{exporter['metadata']['name']}:9400/proxy/metrics"]


def test_without_node_access_nvidia_smi_and_the_kernel_log_fall_back_to_the_exporter(lab, exporter):
    b = lab.backend(node_access={"dcgm_exporter": {}})
    smi = run(b, "nvidia_smi_query", node="gpu-a01")
    lines = smi.text.splitlines()
    assert lines[0].startswith("# no node access for nvidia-smi: the same fields from the DCGM exporter")
    assert lines[1].startswith("index, name, temperature.gpu")
    assert lines[5].startswith("3, NVIDIA H100 80GB HBM3, 91, 87.11 W")
    kernel = run(b, "kernel_log", node="gpu-a01")
    assert "kernel log of node gpu-a01 is not available" in kernel.text
    assert "Last Xid per GPU (DCGM_FI_DEV_XID_ERRORS): GPU 3: Xid 79 [from the DCGM exporter" in kernel.text


def test_no_exporter_configured_is_unavailable_and_a_broken_one_is_an_error(lab, exporter):
    out = run(lab.backend(), "gpu_metrics", node="gpu-a01")
    assert out.gpus == [] and "GPU metrics are not available on this cluster" in out.text
    b = lab.backend(node_access={"dcgm_exporter": {}})
    with pytest.raises(ToolError, match=r"no DCGM exporter pod \(app=nvidia-dcgm-exporter in namespace gpu-operator\) runs on node gpu-a02"):
        run(b, "gpu_metrics", node="gpu-a02")
    lab.store.proxies.clear()  # the exporter's port stops answering
    with pytest.raises(ToolError, match=r"503 ServiceUnavailable: error trying to reach service: dial tcp [\d.]+:9400: connect: connection refused"):
        run(b, "gpu_metrics", node="gpu-a01")
    with pytest.raises(Exception, match="must start with /"):
        lab.backend(node_access={"dcgm_exporter": {"path": "metrics"}})


def gpu_fault(lab, exporters, xid: int, log: str, dbe: int = 0):
    """A Job's pod that died on a GPU fault on gpu-a01, where the DCGM exporter is the only view of
    the node (no node access: no kernel log); gpu-a02 beside it, clean."""
    sick = {3: {"DCGM_FI_DEV_XID_ERRORS": xid, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": dbe, "DCGM_FI_DEV_GPU_UTIL": 0}}
    for n in ("gpu-a01", "gpu-a02"):
        lab.add(k.node(n))
        exporters.serve(n, overrides=sick if n == "gpu-a01" else None)
    job = lab.add(k.job("vit-pretrain"))
    lab.add(k.pod("vit-pretrain-x7kq2", owner=job, phase="Failed",
                  state=k.terminated("Error", 1, k.ago(minutes=50), k.ago(minutes=2))))
    lab.store.set_log("train", "vit-pretrain-x7kq2", log)
    lab.add(k.event(job, "BackoffLimitExceeded", "Job has reached the specified backoff limit", component="job-controller"))


UNKNOWN_ERROR = """[2026-11-24 09:41:40,117][train][INFO] epoch 3 step 21450 | loss 2.0795 | 1839 img/s
[rank3]: Traceback (most recent call last):
[rank3]:   File "/workspace/train_vit.py", line 318, in <module>
[rank3]:     loss.backward()
[rank3]: RuntimeError: CUDA error: unknown error
[rank3]: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
"""
ILLEGAL_INSTRUCTION = """2026-11-24 09:40:12 | INFO | trainer | step 1250 | loss 3.1518 | tok/s 18377
Traceback (most recent call last):
  File "/workspace/moe/layers/fused_moe.py", line 188, in forward
    _fused_moe_kernel[grid](hidden, w1, w2, topk_ids, out, **meta)
RuntimeError: Triton Error [CUDA]: an illegal instruction was encountered
"""


ECC_ERROR = UNKNOWN_ERROR.replace("CUDA error: unknown error", "CUDA error: uncorrectable ECC error encountered")


@pytest.mark.parametrize("xid, dbe, log, label, evidence", [
    (79, 0, UNKNOWN_ERROR, "gpu_fallen_off_bus", "gpu-a01 GPU 3: last Xid 79 (DCGM_FI_DEV_XID_ERRORS)"),
    (48, 1, ECC_ERROR, "ecc_uncorrectable", "gpu-a01 GPU 3: last Xid 48 (DCGM_FI_DEV_XID_ERRORS)"),
    # The double-bit ECC counter alone, with no Xid reported (0).
    (0, 2, ECC_ERROR, "ecc_uncorrectable", "gpu-a01 GPU 3: ecc_uncorrected=2"),
], ids=["xid79", "xid48", "dbe-counter"])
def test_a_fault_only_the_exporter_saw_leads_to_the_node(lab, exporters, tmp_path, xid, dbe, log, label, evidence):
    from test_k8s_agent import actions, run_agent

    gpu_fault(lab, exporters, xid, log, dbe=dbe)
    backend = lab.backend(node_access={"dcgm_exporter": {}})
    state = run_agent(backend, {"kind": "job_failed", "job": "vit-pretrain-x7kq2"}, tmp_path / "s.duckdb")
    d = state["diagnosis"]
    assert (d["label"], d["root_cause"], d["remedy"]) == (label, "node:gpu-a01", "exclude_node"), d
    assert evidence in d["evidence"]
    assert [(a["args"]["node"], a["decision"]) for a in actions(state, "node_drain")] == [("gpu-a01", "allow")]
    assert lab.get("v1", "Node", None, "gpu-a01")["spec"].get("unschedulable") is True
    assert not lab.get("v1", "Node", None, "gpu-a02")["spec"].get("unschedulable")
    # The node's GPUs were read through the exporter, never by exec on the node.
    assert not [p for _, p, _, _ in lab.store.requests if p.endswith("/exec")]


def test_an_application_xid_13_from_the_exporter_leaves_the_node_alone(lab, exporters, tmp_path):
    from test_k8s_agent import actions, run_agent

    gpu_fault(lab, exporters, 13, ILLEGAL_INSTRUCTION)
    backend = lab.backend(node_access={"dcgm_exporter": {}})
    state = run_agent(backend, {"kind": "job_failed", "job": "vit-pretrain-x7kq2"}, tmp_path / "s.duckdb")
    d = state["diagnosis"]
    assert (d["label"], d["remedy"]) == ("xid_application_fault", "escalate_user"), d
    assert "gpu-a01 GPU 3: last Xid 13 (DCGM_FI_DEV_XID_ERRORS)" in d["evidence"]
    assert not actions(state, "node_drain") and not actions(state, "resubmit")
    assert not [m for m, p in lab.writes() if "/nodes/" in p]
