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


@pytest.fixture
def exporter(lab):
    """gpu-a01 with a dcgm-exporter pod whose port 9400 is a real HTTP server on loopback."""
    body = k.dcgm_metrics("gpu-a01", overrides=SICK, pod_of={i: ("train", "llama-worker-0", "pytorch") for i in range(8)}).encode()

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/metrics":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    lab.add(k.node("gpu-a01"))
    lab.add(k.node("gpu-a02"))
    pod = lab.add(k.dcgm_exporter_pod("gpu-a01"))
    lab.store.proxies[("gpu-operator", pod["metadata"]["name"], 9400)] = f"http://127.0.0.1:{server.server_address[1]}"
    yield pod
    server.shutdown()
    server.server_close()


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
