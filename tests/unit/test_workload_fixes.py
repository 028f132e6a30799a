"""Kubernetes workload fixes computed from the evidence: processes per pod from the GPUs the pods
were given (a PyTorchJob's nprocPerNode is a string), and a workload its owner deleted is no fault."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from crashcart.agent.policies.evidence import Evidence, JobFacts, TextDoc
from crashcart.agent.policies.matching import match_label
from crashcart.playbooks import load_playbooks

T0 = datetime(2026, 6, 1, tzinfo=timezone.utc)
KB = load_playbooks()

ROOT_CAUSE = """[rank{r}]: RuntimeError: CUDA error: invalid device ordinal
E0601 10:00:12.330000 77 torch/distributed/elastic/multiprocessing/api.py:862] failed (exitcode: 1) local_rank: {lr} (pid: 56) of binary: /usr/bin/python3
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Root Cause (first observed failure):
[0]:
  time      : 2026-06-01_10:00:12
  host      : train-worker-1
  rank      : {r} (local_rank: {lr})
  exitcode  : 1 (pid: 56)
"""


def _ev(log: str = "", config: dict | None = None, events: list[str] | None = None,
        trigger_text: str = "", **facts) -> Evidence:
    ev = Evidence(now=T0, trigger={"kind": "job_failed", "job": "j1", "text": trigger_text})
    ev.docs = [TextDoc("log", "job:j1", log.splitlines(), "get_logs:j1")] if log else []
    ev.docs += [TextDoc("events", "job:j1", [e], "kubectl_events:j1") for e in events or []]
    ev.configs = {"j1": config or {}}
    ev.jobs = {"j1": JobFacts(job="j1", **{"state": "Failed", **facts})}
    return ev


@pytest.mark.parametrize("local_rank, nodes, gpus, fires", [
    (4, ["a", "b"], 8, True),    # 4 GPUs per pod, a local rank 4 means a fifth process
    (3, ["a", "b"], 8, False),   # local rank 3 fits in 4 GPUs: the ordinal error is something else
    (6, ["a"], 8, False),        # one pod with 8 GPUs holds local rank 6
])
def test_a_failing_local_rank_beyond_the_pods_gpus_means_too_many_processes(local_rank, nodes, gpus, fires):
    ev = _ev(ROOT_CAUSE.format(r=local_rank + 4, lr=local_rank), nodes=nodes, gpus=gpus)
    assert (match_label(KB["launch_exceeds_gpus_per_node"], ev) is not None) is fires


@pytest.mark.parametrize("nproc, fires", [("8", True), (" 4 ", False), ("auto", False), (8, True)])
def test_a_pytorchjobs_string_nproc_is_read_as_a_count(nproc, fires):
    ev = _ev("RuntimeError: CUDA error: invalid device ordinal", {"nprocPerNode": nproc}, nodes=["a", "b"], gpus=8)
    assert (match_label(KB["launch_exceeds_gpus_per_node"], ev) is not None) is fires


DELETED = ["Normal SuccessfulDeletePod: Deleted pod: j1-worker-0", "Normal Killing: Stopping container pytorch"]
SIGTERM = "W0601 torch/distributed/elastic/agent/server/api.py:704] Received Signals.SIGTERM death signal, shutting down workers"


@pytest.mark.parametrize("events, text, fires", [
    (DELETED + ["Normal Deleted: kubectl delete pytorchjob j1 -n ml (user: a@b.c, userAgent: kubectl/v1.30.5)"], "", True),
    (DELETED, "ack - I deleted it on purpose, bad shard", True),
    (DELETED, "we kubectl-deleted the job intentionally", True),
    (DELETED, "did someone delete my job?", False),           # a question is no owner's word
    (["Normal Killing: Stopping container pytorch"], "", False),  # nobody says who stopped it
    (DELETED + ["Warning BackoffLimitExceeded: Job has reached the specified backoff limit"],
     "I deleted it on purpose", False),                        # it had failed already
])
def test_a_workload_is_owner_deleted_only_when_someone_says_so_and_nothing_failed(events, text, fires):
    ev = _ev(SIGTERM, events=events, trigger_text=text, state="Terminating")
    assert (match_label(KB["workload_deleted_by_owner"], ev) is not None) is fires


# --- a missing StorageClass replaced by one that exists ------------------------------------------

def _claim_ev(peer_classes: list[str], own_claim: str = "ckpt", peer_states: str = "RUNNING") -> Evidence:
    ev = _ev(events=['Warning ProvisioningFailed: storageclass.storage.k8s.io "gp3-fast" not found'],
             config={"volumeClaimTemplates": {own_claim: {"storageClassName": "gp3-fast",
                                                          "resources": {"requests": {"storage": "2Ti"}}}}},
             state="Pending", partition="nlp", user="ana")
    for i, cls in enumerate(peer_classes):
        ev.jobs[f"p{i}"] = JobFacts(job=f"p{i}", state=peer_states, partition="nlp", user="bo")
        ev.configs[f"p{i}"] = {"volumeClaimTemplates": {"ckpt": {"storageClassName": cls}}}
    return ev


@pytest.mark.parametrize("peers, claim, state, expected", [
    (["gp3"], "ckpt", "RUNNING", "gp3"),
    (["gp3", "gp3"], "ckpt", "RUNNING", "gp3"),
    (["gp3", "io2"], "ckpt", "RUNNING", None),      # peers disagree: the owner picks
    (["gp3"], "scratch", "RUNNING", None),          # no peer has a claim of that name
    (["gp3"], "ckpt", "FAILED", None),              # a failed job's class proves nothing
    ([], "ckpt", "RUNNING", None),
])
def test_the_class_running_peers_bind_the_same_claim_with_replaces_the_missing_one(peers, claim, state, expected):
    from crashcart.agent.policies.storage_class import storage_class_that_exists

    fixed = storage_class_that_exists(_claim_ev(peers, claim, state), "j1", {}, None)
    if expected is None:
        assert fixed is None
    else:
        assert fixed == {"ckpt": {"storageClassName": expected, "resources": {"requests": {"storage": "2Ti"}}}}


# --- an image built for a newer CUDA than the driver --------------------------------------------

@pytest.mark.parametrize("image, cuda", [
    ("rayproject/ray-ml:2.40.0-py311-cu124", (12, 4)), ("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", (12, 4)),
    ("nvcr.io/nvidia/cuda:11.8.0-base", None), ("nvcr.io/nvidia/pytorch:24.10-py3", None),
    ("ghcr.io/lab/train:cu118", (11, 8)), ("registry:5000/cu124/train:latest", None),  # the tag, not the path
])
def test_an_images_cuda_is_read_from_its_tag(image, cuda):
    from crashcart.agent.policies.image_cuda import image_cuda

    assert image_cuda(image) == cuda


TOO_OLD = "RuntimeError: The NVIDIA driver on your system is too old (found version 12020). Please update your GPU driver"


@pytest.mark.parametrize("peer_image, expected", [
    ("rayproject/ray-ml:2.34.0-py311-cu121", "rayproject/ray-ml:2.34.0-py311-cu121"),
    ("rayproject/ray-ml:2.38.0-py311-cu123", None),   # newer than the driver's 12.2 as well
    ("acme/ray-ml:2.34.0-cu121", None),               # another repository: no proof for this one
])
def test_the_image_goes_back_to_a_build_of_its_repository_known_to_run_here(peer_image, expected):
    from crashcart.agent.policies.image_cuda import image_the_driver_supports

    ev = _ev(TOO_OLD, {"image": "rayproject/ray-ml:2.40.0-py311-cu124"}, partition="nlp", user="ana")
    ev.jobs["p1"] = JobFacts(job="p1", state="RUNNING", partition="nlp", user="bo")
    ev.configs["p1"] = {"image": peer_image}
    assert image_the_driver_supports(ev, "j1", {}, None) == expected


# --- one node's NFS client that lost its server ---------------------------------------------------

LOST = ("[Thu Aug 21 06:02:51 2026] nfs: server nas02 not responding, still trying\n"
        "[Thu Aug 21 06:05:58 2026] INFO: task python:2281907 blocked for more than 122 seconds.\n"
        "[Thu Aug 21 06:05:58 2026]  rpc_wait_bit_killable+0x11/0x70 [sunrpc]")
HICCUP = "[Thu Aug 21 06:02:51 2026] nfs: server nas02 not responding, still trying"


@pytest.mark.parametrize("logs, scoped", [
    ({"a": "", "b": "", "c": LOST}, "c"),
    ({"a": "", "b": "", "c": LOST + "\n[Thu Aug 21 06:31:12 2026] nfs: server nas02 OK"}, None),  # it recovered
    ({"a": LOST, "b": "", "c": LOST}, None),                      # two clients: the server
    ({"a": "", "b": "nfs: server nas02 OK", "c": LOST}, None),    # another client saw the same server falter
    ({"c": LOST}, None),                                          # no other node of the job was read
    ({"a": "", "b": "", "c": HICCUP}, None),                      # nothing hung in the client: a hiccup
])
def test_an_nfs_client_is_the_nodes_fault_only_when_it_alone_lost_the_server(logs, scoped):
    from datetime import timedelta

    from crashcart.agent.policies.scope import _client_alone

    ev = _ev(state="FAILED", nodes=["a", "b", "c"], partition="p", start_time=T0 - timedelta(hours=5), end_time=T0)
    ev.docs += [TextDoc("kernel_log", f"node:{n}", text.splitlines(), f"kernel_log:{n}") for n, text in logs.items()]
    ev.jobs["peer"] = JobFacts(job="peer", state="RUNNING", partition="p", nodes=["d"], start_time=T0 - timedelta(hours=8))
    found = _client_alone(r"nfs: server (?P<server>\S+) not responding", r"blocked for more than \d+ seconds[\s\S]{0,1500}?\b(nfs\w*|rpc_wait\w*|\[sunrpc\])", ev)
    assert (found.node if found else None) == scoped


# --- a GCS lost under fault tolerance: the shared store, unless the head's GCS was OOM-killed -------

GCS_LOST = "[2026-12-01 04:52:29,904 E 58 58] (raylet) gcs_rpc_client.h:554: Failed to connect to GCS within 60 seconds."


@pytest.mark.parametrize("config, events, fires", [
    ({"gcsFaultToleranceOptions": {"redisAddress": "redis-ha.ray-system.svc:6379"}}, [], True),
    ({"env": {"RAY_REDIS_ADDRESS": "10.0.4.2:6379"}}, [], True),
    ({"gcs_fault_tolerance": False}, [], False),                  # no external store: the head's own GCS
    ({"env": {"RAY_REDIS_ADDRESS": "10.0.4.2:6379"}},
     ["Warning OOMKilling: Memory cgroup out of memory: Killed process 211 (gcs_server)"], False),
])
def test_a_lost_gcs_points_at_the_external_store_only_with_one_and_no_head_oom(config, events, fires):
    ev = _ev(GCS_LOST, config, events=events)
    assert (match_label(KB["ray_gcs_external_store_lost"], ev) is not None) is fires
