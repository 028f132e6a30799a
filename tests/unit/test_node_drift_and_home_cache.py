"""A node whose NVIDIA driver is behind its partition's, and a cache on a full network home moved to
the large empty local disk the node's df shows."""

from __future__ import annotations

from datetime import datetime, timezone

from crashcart.agent.policies.computed import relocated_path
from crashcart.agent.policies.conditions import partition_peers
from crashcart.agent.policies.evidence import Evidence, JobFacts, TextDoc
from crashcart.agent.policies.matching import driver_versions, match_label
from crashcart.playbooks import load_playbooks
from crashcart.tools.diskfree import parse_df

T0 = datetime(2026, 5, 1, tzinfo=timezone.utc)
TOO_OLD = ("UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 12020). "
           "Please update your GPU driver")
DMESG = "[    7.402113] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {v}  Wed Oct  9 23:18:17 UTC 2024"
SMI = "| NVIDIA-SMI {v}             Driver Version: {v}   CUDA Version: 12.8     |"


def _ev(drivers: dict[str, str], partitions: dict[str, str] | None = None) -> Evidence:
    ev = Evidence(now=T0, trigger={"kind": "job_failed", "job": "j1"})
    ev.jobs = {"j1": JobFacts(job="j1", state="FAILED", nodes=["n1"], partition="p")}
    ev.docs = [TextDoc("log", "job:j1", [TOO_OLD], "get_logs:j1")]
    for i, (node, version) in enumerate(drivers.items()):
        line = (DMESG if i % 2 == 0 else SMI).format(v=version)
        ev.docs.append(TextDoc("kernel_log", f"node:{node}", [line], f"kernel_log:{node}"))
    ev.nodes = {n: {"node": n, "gpus": 8, "state": "allocated", "partition": (partitions or {}).get(n, "p")}
                for n in drivers}
    return ev


def test_driver_versions_are_read_from_dmesg_and_nvidia_smi():
    ev = _ev({"n1": "535.216.01", "n2": "560.35.03"})
    assert driver_versions(ev) == {"n1": (535, 216, 1), "n2": (560, 35, 3)}


def test_a_node_behind_its_partitions_driver_branch_is_the_nodes_fault():
    kb = load_playbooks()
    ev = _ev({"n1": "535.216.01", "n2": "560.35.03", "n3": "560.35.03"})
    match = match_label(kb["gpu_driver_older_than_peers"], ev)
    assert match is not None and match.entities("node") == ["node:n1"]


def test_a_partition_on_one_old_driver_is_the_images_fault_not_the_nodes():
    kb = load_playbooks()
    ev = _ev({"n1": "535.216.01", "n2": "535.216.01"})
    assert match_label(kb["gpu_driver_older_than_peers"], ev) is None
    assert match_label(kb["cuda_driver_too_old"], ev) is not None
    # A newer driver in another partition says nothing about this one's.
    ev = _ev({"n1": "535.216.01", "n2": "560.35.03"}, partitions={"n2": "other"})
    assert match_label(kb["gpu_driver_older_than_peers"], ev) is None
    # A patch release within the same branch is not a node left behind.
    ev = _ev({"n1": "560.28.03", "n2": "560.35.03"})
    assert match_label(kb["gpu_driver_older_than_peers"], ev) is None


def test_partition_peers_are_two_in_service_nodes_of_the_jobs_partition_not_its_own():
    ev = _ev({"n1": "1.0", "n2": "1.0", "n3": "1.0", "n4": "1.0"}, partitions={"n4": "other"})
    ev.nodes["n3"]["state"] = "drained"
    ev.nodes["n5"] = {"node": "n5", "gpus": 8, "state": "idle", "partition": "p"}
    assert partition_peers(ev) == ["n2", "n5"]


HOME_FULL = """Filesystem                Size  Used Avail Use% Mounted on
/dev/mapper/rhel-root      80G   22G   59G  27% /
tmpfs                     252G  1.1G  251G   1% /dev/shm
/dev/nvme0n1              6.9T   41G  6.9T   1% /scratch_local
filer:/export/home         50G   50G     0 100% /home/alice
"""


def _disk_ev(df: str) -> Evidence:
    ev = Evidence(now=T0, trigger={"kind": "job_failed", "job": "j1"})
    ev.jobs = {"j1": JobFacts(job="j1", state="FAILED", nodes=["n1"])}
    ev.disks = {"n1": [m.model_dump() for m in parse_df(df)]}
    return ev


def test_a_cache_on_a_full_network_home_moves_to_the_large_empty_local_disk():
    ev = _disk_ev(HOME_FULL)
    assert relocated_path(ev, "j1", "/home/alice/.cache/huggingface") == "/scratch_local/.cache/huggingface"


def test_no_move_to_a_disk_smaller_than_what_filled_the_old_one_nor_to_ram():
    # Only a small root disk is local, with 9G free: what filled a 50G home would not fit there.
    small = HOME_FULL.replace("/dev/nvme0n1              6.9T   41G  6.9T   1% /scratch_local\n", "") \
                     .replace("80G   22G   59G  27% /", "64G   55G  9.0G  86% /")
    assert relocated_path(_disk_ev(small), "j1", "/home/alice/.cache") is None


# --- NCCL_SOCKET_IFNAME from what NCCL finds in the partition's other jobs ---------------------

def _ifname_ev(peer_logs: dict[str, str]) -> Evidence:
    from crashcart.agent.policies.computed import interface_peers_use  # noqa: F401 (import check)

    ev = Evidence(now=T0, trigger={"kind": "job_failed", "job": "j1"})
    ev.jobs = {"j1": JobFacts(job="j1", state="FAILED", nodes=["n1"], partition="p")}
    for i, (job, log) in enumerate(peer_logs.items()):
        ev.jobs[job] = JobFacts(job=job, state="RUNNING", nodes=[f"m{i}"], partition="p")
        ev.docs.append(TextDoc("log", f"job:{job}", log.splitlines(), f"get_logs:{job}"))
    ev.jobs["elsewhere"] = JobFacts(job="elsewhere", state="RUNNING", nodes=["x1"], partition="other")
    ev.docs.append(TextDoc("log", "job:elsewhere", ["x1:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>"], "get_logs:elsewhere"))
    return ev


def test_the_interface_is_the_one_nccl_uses_in_the_partitions_other_jobs():
    from crashcart.agent.policies.computed import interface_peers_use

    ev = _ifname_ev({"a": "h:1:1 [0] NCCL INFO Bootstrap : Using ens21f0np0:10.52.8.103<0>",
                     "b": "h:2:9 [0] NCCL INFO NET/Socket : Using [0]ens21f0np0:10.52.8.104<0>"})
    assert ev.partition_jobs() == ["a", "b"]
    assert interface_peers_use(ev, "j1", {}, None) == "ens21f0np0"
    ev = _ifname_ev({"a": "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB bond0:10.1.1.1<0>"})
    assert interface_peers_use(ev, "j1", {}, None) == "bond0"


def test_peers_that_disagree_or_print_nothing_give_no_interface():
    from crashcart.agent.policies.computed import interface_peers_use

    ev = _ifname_ev({"a": "h:1:1 [0] NCCL INFO Bootstrap : Using eno1:10.9.0.17<0>",
                     "b": "h:2:2 [0] NCCL INFO Bootstrap : Using ens3f0:10.9.4.2<0>"})
    assert interface_peers_use(ev, "j1", {}, None) is None
    assert interface_peers_use(_ifname_ev({"a": "step 10 loss 2.1"}), "j1", {}, None) is None


# --- a time limit during a save: resume from the newest whole checkpoint ------------------------

def test_a_step_key_declared_empty_gets_the_whole_checkpoints_step_and_a_run_directory_is_left_alone():
    from crashcart.agent.policies.evidence import Checkpoint
    from crashcart.agent.policies.remedy import compute_changes

    ev = Evidence(now=T0, trigger={"kind": "job_failed", "job": "j1"})
    ev.jobs = {"j1": JobFacts(job="j1", state="TIMEOUT", nodes=["n1"])}
    ev.configs = {"j1": {"load": "/ckpt/run", "ckpt_step": None}}
    ev.progress = {"j1": ([], [Checkpoint(step=s, time=T0, path=f"/ckpt/run/iter_{s:07d}") for s in (34000, 35000, 36000)])}
    remedy = load_playbooks()["timeout_during_checkpoint_save"].label.remedy
    assert compute_changes(remedy, ev, "j1", {})[0] == {"ckpt_step": 35000}
    ev.configs = {"j1": {"resume_from_checkpoint": "/ckpt/run/checkpoint-8000"}}
    ev.progress = {"j1": ([], [Checkpoint(step=s, time=T0, path=f"/ckpt/run/checkpoint-{s}") for s in (11000, 12000)])}
    assert compute_changes(remedy, ev, "j1", {})[0] == {"resume_from_checkpoint": "/ckpt/run/checkpoint-11000"}


def test_a_save_that_finished_before_the_time_limit_is_not_a_cut_save():
    kb = load_playbooks()
    ev = Evidence(now=T0, trigger={"kind": "job_failed", "job": "j1"})
    ev.jobs = {"j1": JobFacts(job="j1", state="TIMEOUT", nodes=["n1"])}
    cut = ["saving checkpoint at iteration   36000 to /ckpt in torch format",
           "slurmstepd: error: *** JOB 9 ON n1 CANCELLED AT 2026-11-21T08:06:02 DUE TO TIME LIMIT ***"]
    ev.docs = [TextDoc("log", "job:j1", cut, "get_logs:j1")]
    assert match_label(kb["timeout_during_checkpoint_save"], ev) is not None
    done = cut[:1] + ["  successfully saved checkpoint from iteration   36000 to /ckpt"] + cut[1:]
    ev.docs = [TextDoc("log", "job:j1", done, "get_logs:j1")]
    assert match_label(kb["timeout_during_checkpoint_save"], ev) is None


# --- a capacity question asked while jobs wait -------------------------------------------------

def test_the_binding_constraint_answer_is_wait_only_when_asked_while_jobs_pend():
    kb = load_playbooks()
    remedy = kb["capacity_binding_constraint"].label.remedy
    assert remedy.kind == "none" and remedy.while_jobs_wait == "wait"


# --- a node that rejects the scheduler's credentials -------------------------------------------

def _cred_ev(failures: dict[str, str]) -> Evidence:
    ev = Evidence(now=T0, trigger={"kind": "job_failed", "job": "j1"})
    for job, node in failures.items():
        ev.jobs[job] = JobFacts(job=job, state="FAILED", nodes=[node, "ok1"] if job == "j1" else [node])
        line = f"srun: error: Task launch for StepId={job}.0 failed on node {node}: Invalid job credential"
        ev.docs.append(TextDoc("log", f"job:{job}", [line], f"get_logs:{job}"))
    return ev


def test_credentials_refused_on_one_node_blame_it_and_on_several_the_cluster():
    kb = load_playbooks()
    one = _cred_ev({"j1": "bad1", "j0": "bad1"})
    match = match_label(kb["node_rejects_job_credential"], one)
    assert match is not None and match.entities("node") == ["node:bad1"]
    assert match_label(kb["cluster_rejects_job_credentials"], one) is None
    many = _cred_ev({"j1": "bad1", "j0": "bad2"})
    assert match_label(kb["node_rejects_job_credential"], many) is None
    assert match_label(kb["cluster_rejects_job_credentials"], many) is not None
