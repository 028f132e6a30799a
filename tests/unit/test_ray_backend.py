"""The ray backend without a head: its cluster.yaml section, what it reads from Ray's rows,
and how a resubmit is built (Ray's client faked at the boundary; the real head is in
tests/integration/ray)."""

from __future__ import annotations

import pytest

from crashcart.agent.config import ClusterConfigError, parse_cluster_config
from crashcart.tools import REGISTRY, ToolError
from crashcart.tools.backends.ray import RayBackend, RaySettings
from crashcart.tools.backends.ray import _parse as parse
from crashcart.tools.backends.ray._actions import resubmit_id

FAILED = {
    "type": "SUBMISSION", "job_id": "03000000", "submission_id": "raysubmit_Yx3W", "status": "FAILED",
    "entrypoint": "python /home/ray/train.py --batch_size=16 --resources_per_worker.memory_gb=48",
    "message": "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\n...",
    "error_type": "JOB_ENTRYPOINT_COMMAND_ERROR", "driver_exit_code": 1, "start_time": 1780000000000,
    "end_time": 1780000600000, "metadata": {"user": "noor"}, "driver_node_id": "ab" * 28,
    "runtime_env": {"working_dir": "gcs://_ray_pkg_8673b8f9fa57162c.zip", "env_vars": {"NCCL_DEBUG": "INFO"}},
    "entrypoint_num_gpus": 8,
}


class FakeClient:
    def __init__(self, jobs):
        self.jobs = {j["submission_id"]: j for j in jobs}
        self.submitted = []

    def job(self, sid):
        return self.jobs.get(sid)

    def list_jobs(self):
        return list(self.jobs.values())

    def submit(self, **kwargs):
        self.submitted.append(kwargs)
        self.jobs[kwargs["submission_id"]] = {**kwargs, "status": "PENDING", "type": "SUBMISSION"}
        return kwargs["submission_id"]


def test_a_ray_cluster_config_makes_a_ray_backend():
    config, _ = parse_cluster_config({"name": "ray-prod", "backend": "ray",
                                      "ray": {"dashboard": "http://ray-head:8265/", "gcs": "ray-head:6379"}})
    backend = config.make_backend()
    assert isinstance(backend, RayBackend) and backend.settings.dashboard == "http://ray-head:8265"


@pytest.mark.parametrize("ray, problem", [
    ({"dashbord": "http://x:8265"}, "dashbord"),
    ({"dashboard": "ray-head:8265"}, "is a URL"),
])
def test_a_wrong_ray_section_names_the_field(ray, problem):
    with pytest.raises(ClusterConfigError, match=problem):
        parse_cluster_config({"name": "r", "backend": "ray", "ray": ray}, "cluster.yaml")


def test_a_failed_job_as_a_row_and_as_ray_job_status_prints_it():
    row = parse.job_row(FAILED, {"ab" * 28: "10.0.0.5"})
    assert (row.job, row.state, row.exit_code, row.user, row.gpus, row.nodes) == (
        "raysubmit_Yx3W", "FAILED", "1", "noor", 8, ["10.0.0.5"])
    assert row.reason.startswith("Job entrypoint command failed with exit code 1")
    assert parse.status_lines(FAILED)[0] == "Status for job 'raysubmit_Yx3W': FAILED"


def test_config_and_resubmit_keep_the_entrypoint_runtime_env_and_resources():
    client = FakeClient([FAILED])
    backend = RayBackend(RaySettings(), client=client)
    config = backend.run(REGISTRY.get("job_config"), {"job": "raysubmit_Yx3W"}).config
    assert config == {"batch_size": 16, "resources_per_worker": {"memory_gb": 48},
                      "env": {"NCCL_DEBUG": "INFO"}, "entrypoint_num_gpus": 8}

    out = backend.run(REGISTRY.get("resubmit"), {
        "job": "raysubmit_Yx3W", "reason": "memory monitor", "request_id": "0f3c9a1b2c3d4e5f",
        "changes": {"resources_per_worker.memory_gb": 96, "env.NCCL_SOCKET_IFNAME": "eth0", "entrypoint_num_gpus": 4}})
    sent = client.submitted[0]
    assert out.new_job == sent["submission_id"] == "raysubmit_Yx3W-cc-0f3c9a1b2c3d4e5f"
    assert sent["entrypoint"] == "python /home/ray/train.py --batch_size=16 --resources_per_worker.memory_gb=96"
    assert sent["runtime_env"] == {"working_dir": "gcs://_ray_pkg_8673b8f9fa57162c.zip",
                                   "env_vars": {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0"}}
    assert sent["entrypoint_num_gpus"] == 4 and sent["metadata"]["crashcart_resubmit_of"] == "raysubmit_Yx3W"
    # The same request again finds the job; nothing is submitted twice.
    again = backend.run(REGISTRY.get("resubmit"), {"job": "raysubmit_Yx3W", "reason": "retry",
                                                   "request_id": "0f3c9a1b2c3d4e5f"})
    assert again.new_job == out.new_job and len(client.submitted) == 1


def test_resubmit_ids_carry_the_key_and_do_not_grow():
    assert resubmit_id("raysubmit_A", "0f3c") == "raysubmit_A-cc-0f3c"
    assert resubmit_id("raysubmit_A-cc-0f3c", "77aa") == "raysubmit_A-cc-77aa"


def test_an_unknown_job_is_an_error_naming_it():
    backend = RayBackend(RaySettings(), client=FakeClient([FAILED]))
    with pytest.raises(ToolError, match="job 'raysubmit_nope' is not known .* raysubmit_Yx3W"):
        backend.run(REGISTRY.get("ray_job_status"), {"job": "raysubmit_nope"})


def test_an_unreachable_head_is_an_error_naming_it_not_an_empty_answer():
    pytest.importorskip("ray.job_submission")
    backend = RayBackend(RaySettings(dashboard="http://127.0.0.1:9", gcs="127.0.0.1:9"))
    with pytest.raises(ToolError, match=r"Ray Jobs API connect failed \(http://127.0.0.1:9"):
        backend.run(REGISTRY.get("list_jobs"), {})


def test_kubectl_tools_on_plain_ray_say_there_is_no_kubernetes_and_kuberay_parses():
    backend = RayBackend(RaySettings(), client=FakeClient([FAILED]))
    out = backend.run(REGISTRY.get("kubectl_events"), {"object": "raysubmit_Yx3W"})
    assert out.events == [] and "not KubeRay" in out.text
    config, _ = parse_cluster_config({"name": "kuberay", "backend": "ray", "ray": {
        "dashboard": "http://raycluster-train-head-svc.ray:8265", "gcs": "raycluster-train-head-svc.ray:6379",
        "kubernetes": {"connection": {"method": "in_cluster"}, "namespaces": ["ray"]}}})
    assert config.ray.kubernetes.namespaces == ["ray"]
