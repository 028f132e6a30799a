"""The slurm backend over a scripted transport: the commands it sends and how it reads the answers.

The real cluster is in tests/integration/slurm; here each command's output is canned
(recorded from Slurm 22.05), so the exact argv of a drain or a resubmit can be checked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import pytest

from crashcart.tools import REGISTRY, ToolCall, ToolError
from crashcart.tools.backends.base import acting_for
from crashcart.tools.backends.slurm import SlurmBackend, SlurmSettings
from crashcart.tools.backends.slurm import _parse as parse
from crashcart.tools.transport import CommandResult, Transport

SINFO = {"nodes": [
    {"name": f"gpu-b0{i}", "state": "down" if i == 7 else "allocated", "state_flags": [], "partitions": ["h100"],
     "gres": "gpu:h100:8", "reason": "Not responding" if i == 7 else "", "address": f"10.0.0.{i}", "hostname": f"gpu-b0{i}"}
    for i in range(5, 9)
]}
SUBMIT = ("sbatch -J pretrain -N 2 --gres=gpu:8 -w gpu-b0[5-6] --export=ALL,NCCL_DEBUG=WARN "
          "-o %x-%j.out train.sh --batch_size=16 --lr 3e-4")
SCONTROL = ("JobId=48213 JobName=pretrain UserId=dana(1000) JobState=FAILED Reason=NonZeroExitCode "
            "Dependency=(null) Restarts=0 ExitCode=1:0 Partition=h100 NodeList=gpu-b0[5-6] "
            "TRES=cpu=64,mem=512G,node=2,billing=64,gres/gpu=16 Command=/home/dana/run/train.sh --batch_size=16 --lr 3e-4 "
            "WorkDir=/home/dana/run Comment= StdErr=/home/dana/run/pretrain-48213.out "
            "StdOut=/home/dana/run/pretrain-48213.out SubmitTime=2026-03-01T20:00:00 "
            "StartTime=2026-03-01T20:02:00 EndTime=2026-03-02T09:41:00")
ROW = ("48213|pretrain|h100|dana|FAILED|1:0|2026-03-01T20:02:00|2026-03-02T09:41:00|13:39:00|gpu-b0[5-6]|None|"
       "2026-03-01T20:00:00|billing=64,cpu=64,gres/gpu=16,mem=512G,node=2")


class Scripted(Transport):
    """Answers each command from a list of (prefix, answer) pairs; records every argv."""

    where = "scripted"

    def __init__(self, answers: list[tuple[tuple[str, ...], str | Callable[[Sequence[str]], CommandResult]]]):
        super().__init__({})
        self.answers = answers
        self.sent: list[tuple[str, ...]] = []

    def run(self, argv, *, input=None, timeout=None, retry=True):
        argv = tuple(argv)
        self.sent.append(argv)
        bare = argv[argv.index("sbatch"):] if argv[0] == "env" and "sbatch" in argv else argv
        for prefix, answer in self.answers:
            if bare[: len(prefix)] == prefix:
                return answer(argv) if callable(answer) else CommandResult(argv, 0, answer, "")
        return CommandResult(argv, 1, "", f"unexpected command {argv}")


def cluster(*extra) -> Scripted:
    return Scripted([
        *extra,
        (("sinfo", "--version"), "slurm-wlm 22.05.8\n"),
        (("sinfo", "--json"), json.dumps(SINFO)),
        (("scontrol", "show", "job", "-o", "48213"), SCONTROL + "\n"),
        (("scontrol", "show", "job"), lambda a: CommandResult(a, 1, "", "slurm_load_jobs error: Invalid job id specified")),
        (("sacct", "-P", "-n", "-X", "-j", "48213"), f"48213|/home/dana/run||{SUBMIT}\n"),
        (("sacct", "-P", "-o"), f"{'|'.join(parse.SACCT_FIELDS)}\n{ROW}\n"),
        (("scontrol", "write", "batch_script"), "#!/bin/bash\n#SBATCH --time=24:00:00\nsrun python train.py \"$@\"\n"),
        (("sh", "-c"), "/home/crashcart/.crashcart/scripts/48213-resubmit.sh"),
        (("squeue", "-h", "-t", "all", "-o", "%i|%k"), ""),
        (("sacct", "-X", "-P", "-n", "-a"), ""),
        (("sbatch",), "48250\n"),
        (("scontrol", "update"), ""),
    ])


def backend(transport: Scripted, **settings) -> SlurmBackend:
    return SlurmBackend(SlurmSettings(**settings), transport=transport)


def test_resubmit_sends_the_jobs_own_options_with_the_changes():
    t = cluster()
    with acting_for("inc-7"):
        out = backend(t).run(REGISTRY.get("resubmit"), {
            "job": "48213", "reason": "xid 79 on gpu-b06", "exclude_nodes": ["gpu-b06"], "request_id": "r1",
            "changes": {"env.NCCL_SOCKET_IFNAME": "^lo,docker", "batch_size": 8, "mem_gb": 64}})
    assert out.ok and out.new_job == "48250"
    sbatch = next(a for a in t.sent if "sbatch" in a)
    # A value with a comma cannot go through --export in Slurm 22.05: sbatch's own env carries it.
    assert sbatch[:3] == ("env", "NCCL_SOCKET_IFNAME=^lo,docker", "sbatch")
    opts = set(sbatch[4:-4])
    assert opts == {
        "--job-name=pretrain", "--nodes=2", "--gres=gpu:8", "--output=%x-%j.out", "--chdir=/home/dana/run",
        "--mem=65536M", "--export=ALL,NCCL_DEBUG=WARN,NCCL_SOCKET_IFNAME", "--exclude=gpu-b06",
        "--nodelist=gpu-b05",  # the pin keeps only what is not excluded
        "--comment=crashcart: resubmit of 48213 (inc-7; request r1)"}
    assert sbatch[-4:] == ("/home/crashcart/.crashcart/scripts/48213-resubmit.sh", "--batch_size=8", "--lr", "3e-4")


def test_a_request_already_served_is_not_submitted_again():
    t = cluster((("squeue", "-h", "-t", "all", "-o", "%i|%k"), "48250|crashcart: resubmit of 48213 (inc-7; request r1)\n"))
    out = backend(t).run(REGISTRY.get("resubmit"), {"job": "48213", "reason": "x", "request_id": "r1"})
    assert out.new_job == "48250" and "Already submitted" in out.message
    assert not [a for a in t.sent if "sbatch" in a]


def test_drain_reason_names_crashcart_and_the_incident():
    t = cluster()
    with acting_for("inc-42"):
        out = backend(t).run(REGISTRY.get("node_drain"), {"node": "gpu-b07", "reason": "crashcart: gpu_fallen_off_bus: Xid 79"})
    assert ("scontrol", "update", "NodeName=gpu-b07", "State=DRAIN",
            "Reason=crashcart inc-42: gpu_fallen_off_bus: Xid 79") in t.sent
    assert out.ok


def test_a_garbage_sacct_line_is_a_tool_error_not_a_traceback():
    t = cluster((("sacct", "-P", "-o"), f"{'|'.join(parse.SACCT_FIELDS)}\n48213|pretrain|h100|da\n"))
    with pytest.raises(ToolError, match=r"sacct printed a line crashcart cannot read.*48213\|pretrain\|h100\|da"):
        backend(t).run(REGISTRY.get("sacct"), {"job": "48213"})


def test_unknown_node_and_job_are_named():
    t = cluster((("sacct", "-P", "-o"), f"{'|'.join(parse.SACCT_FIELDS)}\n"),
                (("sacct", "-P", "-n", "-X", "-j", "777"), ""))
    b = backend(t)
    with pytest.raises(ToolError, match=r"node 'gpu-z1' is not in this Slurm cluster \(known: gpu-b05, gpu-b06"):
        b.run(REGISTRY.get("kernel_log"), {"node": "gpu-z1"})
    with pytest.raises(ToolError, match="job '777' is not known"):
        b.target(ToolCall(tool="cancel_job", args={"job": "777", "reason": "x"}))
    with pytest.raises(ToolError, match="not a Slurm job id"):
        b.run(REGISTRY.get("get_logs"), {"job": "48213; rm -rf /"})


def test_guard_facts_for_a_node_and_a_job():
    b = backend(cluster())
    node = b.target(ToolCall(tool="node_drain", args={"node": "gpu-b07", "reason": "x"}))
    assert (node.partition, node.partition_nodes, node.partition_unavailable, node.node_unavailable, node.gpus) == (
        "h100", 4, 1, True, 8)
    job = b.target(ToolCall(tool="resubmit", args={"job": "48213", "reason": "x"}))
    assert (job.partition, job.user, job.gpus, job.restarts_without_progress) == ("h100", "dana", 16, 0)


def test_tools_of_other_backends_are_refused():
    with pytest.raises(ToolError, match="not available on a slurm cluster"):
        backend(cluster()).run(REGISTRY.get("kubectl_events"), {})


def test_node_commands_switched_off_say_so():
    out = backend(cluster(), node_access={"method": "none"}).run(REGISTRY.get("nvidia_smi_query"), {"node": "gpu-b05"})
    assert out.gpus == [] and "switched off" in out.text


def _running(job: str, started: str, out: str, workdir: str = "/home/dana/run") -> str:
    return (f"JobId={job} JobName=pretrain-{job} UserId=dana(1000) JobState=RUNNING Reason=None BatchFlag=1 "
            f"Partition=h100 NodeList=gpu-b05 TRES=cpu=8,gres/gpu=8 StartTime={started} WorkDir={workdir} "
            f"StdOut={out} StdErr={out}")


def test_a_running_job_whose_log_stopped_growing_is_stalled():
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC).replace(microsecond=0)
    long_ago = (now - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%S")
    just_now = (now - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S")
    jobs = "\n".join([
        _running("101", long_ago, "/scratch/hung-101.out"),      # silent for an hour
        _running("102", long_ago, "/scratch/busy-102.out"),      # wrote a minute ago
        _running("103", just_now, "/scratch/young-103.out"),     # started 5 min ago: too young to judge
        _running("104", long_ago, "/node-local/104.out"),        # its log is not on this filesystem
        "JobId=105 JobName=queued UserId=dana(1000) JobState=PENDING Reason=Resources BatchFlag=1 StartTime=Unknown",
    ])
    stamp = lambda minutes: int((now - timedelta(minutes=minutes)).timestamp())  # noqa: E731
    stat = (f"{stamp(61)}|/scratch/hung-101.out\n{stamp(1)}|/scratch/busy-102.out\n{stamp(50)}|/scratch/young-103.out\n")
    t = cluster(
        (("scontrol", "show", "job", "-o"), jobs + "\n"),
        (("stat",), lambda a: CommandResult(a, 1, stat, "stat: cannot statx '/node-local/104.out': No such file or directory")),
    )
    backend = SlurmBackend(SlurmSettings(), transport=t)
    stalled = backend.stalled_jobs(now, timedelta(minutes=45))
    assert [r.job for r in stalled] == ["101"]
    stats = [a for a in t.sent if a[0] == "stat"]
    assert len(stats) == 1, "one stat for every running job's logs, however many run"
    assert "/scratch/hung-101.out" in stats[0] and "/node-local/104.out" in stats[0]


PARTITION = ("PartitionName=h100 AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES QoS=N/A "
             "DefaultTime=04:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED "
             "MaxTime=2-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=gpu-b0[5-8] PriorityJobFactor=1 "
             "PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP "
             "TotalCPUs=256 TotalNodes=4 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED "
             "MaxMemPerNode=UNLIMITED TRES=cpu=256,mem=2000G,node=4,billing=256,gres/gpu=32")


def test_partition_info_reads_maxtime_from_scontrol():
    t = cluster((("scontrol", "show", "partition", "-o", "h100"), PARTITION + "\n"))
    out = backend(t).run(REGISTRY.get("partition_info"), {"partition": "h100"})
    assert (out.partition, out.max_time) == ("h100", "2-00:00:00")
    missing = cluster((("scontrol", "show", "partition"),
                       lambda a: CommandResult(a, 1, "", "slurm_load_partitions: Invalid partition name specified")))
    with pytest.raises(ToolError, match="Invalid partition name"):
        backend(missing).run(REGISTRY.get("partition_info"), {"partition": "nope"})


def test_a_time_limit_change_becomes_sbatch_time_not_a_script_argument():
    t = cluster()
    with acting_for("inc-8"):
        backend(t).run(REGISTRY.get("resubmit"), {
            "job": "48213", "reason": "PartitionTimeLimit", "request_id": "r2", "changes": {"time_limit": "2-00:00:00"}})
    sbatch = next(a for a in t.sent if "sbatch" in a)
    assert "--time=2-00:00:00" in sbatch
    assert not any("time_limit" in word for word in sbatch)


DF_OUT = ("Filesystem      Size  Used Avail Use% Mounted on\n/dev/root       194G  186G  8.1G  96% /\n"
          "/dev/nvme1n1    3.5T   41G  3.3T   2% /mnt/local_nvme\n")


def test_disk_usage_runs_df_on_the_node_and_reads_its_rows():
    t = cluster((("srun",), DF_OUT), (("squeue", "--json"), json.dumps({"jobs": []})))
    out = backend(t).run(REGISTRY.get("disk_usage"), {"node": "gpu-b05"})
    srun = next(a for a in t.sent if a[0] == "srun")
    assert "--nodelist=gpu-b05" in srun and "df -hP" in srun[-1]
    assert [m.mounted_on for m in out.mounts] == ["/", "/mnt/local_nvme"]


def test_disk_usage_without_node_access_says_so_and_invents_nothing():
    out = backend(cluster(), node_access={"method": "none"}).run(REGISTRY.get("disk_usage"), {"node": "gpu-b05"})
    assert out.mounts == [] and "node_access: none" in out.text
def test_job_config_of_a_job_that_just_ended_waits_for_its_submit_line(monkeypatch):
    # Accounting lags slurmctld: first the placeholder record without a submit line, then the
    # whole one. Read during the lag, the memory the job asked for was missing (a flaky live test).
    monkeypatch.setattr("crashcart.tools.backends.slurm._actions.time.sleep", lambda s: None)
    calls = []

    def accounting(argv):
        calls.append(argv)
        line = "48213|/home/dana/run||" + (SUBMIT.replace(" train.sh", " --mem=100M train.sh") if len(calls) > 1 else "")
        return CommandResult(argv, 0, line + "\n", "")

    t = cluster((("sacct", "-P", "-n", "-X", "-j", "48213"), accounting))
    out = backend(t).run(REGISTRY.get("job_config"), {"job": "48213"})
    assert out.config["mem_gb"] == pytest.approx(0.0977, abs=1e-3), out.text
    assert out.config["batch_size"] == 16 and len(calls) >= 2

# `sacctmgr -P show qos format=...` and `sshare -a -P -o ...` as Slurm 22.05 prints them.
SACCTMGR_QOS = ("Name|Priority|GrpTRES|MaxTRESPU|MaxWall\nnormal|0|||\n"
                "speech-a|10|gres/gpu=32||2-00:00:00\ndebug|50||gres/gpu=2|01:00:00\n")
SSHARE = ("Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare\n"
          "root|||0.000000|912344871|1.000000|1.000000\n"
          " speech||40|0.400000|401221977|0.440000|0.460000\n"
          "  speech|ilaria|1|0.133333|120110401|0.131000|0.410000\n")


def test_sacctmgr_and_sshare_are_read_parsable_and_typed():
    t = cluster((("sacctmgr", "-P", "show", "qos"), SACCTMGR_QOS), (("sshare", "-a", "-P"), SSHARE))
    b = backend(t)
    qos = b.run(REGISTRY.get("sacctmgr_show"), {"entity": "qos"})
    assert [(q.name, q.grp_tres) for q in qos.qos] == [("normal", None), ("speech-a", "gres/gpu=32"), ("debug", None)]
    assert ("sacctmgr", "-P", "show", "qos", "format=Name,Priority,GrpTRES,MaxTRESPU,MaxWall") in t.sent
    shares = b.run(REGISTRY.get("sshare"), {"account": "speech"})
    assert [(s.account, s.user, s.fairshare) for s in shares.shares] == [
        ("root", None, 1.0), ("speech", None, 0.46), ("speech", "ilaria", 0.41)]
    assert t.sent[-1][-2:] == ("-A", "speech")


HELD = (SCONTROL.replace("JobState=FAILED Reason=NonZeroExitCode", "JobState=PENDING Reason=launch_failed_requeued_held")
        .replace("Restarts=0", "Restarts=1 ExcNodeList=gpu-b08"))


@pytest.mark.parametrize("reason, changes, released", [
    ("launch_failed_requeued_held", {}, True),
    # A config change needs the script again: a copy (the planner cancels the held one first).
    ("launch_failed_requeued_held", {"batch_size": 8}, False),
    # A person's hold is theirs to lift.
    ("JobHeldUser", {}, False),
])
def test_a_job_held_after_a_failed_launch_is_released_not_copied(reason, changes, released):
    line = HELD.replace("launch_failed_requeued_held", reason)
    t = cluster((("scontrol", "show", "job", "-o", "48213"), line + "\n"), (("scontrol", "release"), ""))
    out = backend(t).run(REGISTRY.get("resubmit"), {
        "job": "48213", "reason": "prolog failed on gpu-b06", "exclude_nodes": ["gpu-b06"], "changes": changes})
    sbatch = [a for a in t.sent if "sbatch" in a]
    if released:
        # The nodes it already excluded stay excluded.
        assert ("scontrol", "update", "JobId=48213", "ExcNodeList=gpu-b[06,08]") in t.sent
        assert ("scontrol", "release", "48213") in t.sent
        assert out.new_job == "48213" and not sbatch and "released" in out.message
    else:
        assert sbatch and out.new_job == "48250"
        assert ("scontrol", "release", "48213") not in t.sent
