"""The scheduler's limits: rendered like sacctmgr/sshare/kubectl/ray print them, and read back."""

from __future__ import annotations

import pytest

from crashcart.tools._spec import REGISTRY, ToolError
from crashcart.tools.backends.fixture import FixtureBackend
from crashcart.tools.backends.slurm import _limits as limits
from crashcart.tools.cluster import Cluster

CLUSTER = Cluster.model_validate({
    "now": "2026-05-04T15:00:00Z",
    "scheduler": {
        "qos": [{"name": "normal"}, {"name": "gpu-shared", "priority": 10, "grp_tres": "gres/gpu=48",
                                     "max_tres_pu": "gres/gpu=16", "max_wall": "2-00:00:00"}],
        "associations": [{"account": "vision", "share": "30", "qos": ["normal", "gpu-shared"]}],
        "shares": [{"account": "root", "raw_shares": "", "norm_shares": 0.0, "fairshare": 1.0},
                   {"account": "vision", "raw_shares": "30", "norm_shares": 0.3, "raw_usage": 81234567,
                    "effectv_usage": 0.62, "fairshare": 0.08},
                   {"account": "vision", "user": "kowalski", "raw_shares": "1", "norm_shares": 0.1,
                    "raw_usage": 40000, "effectv_usage": 0.3, "fairshare": 0.05}],
        "cluster_queues": [{"name": "cq-speech", "cohort": "ml", "flavor": "h100-80g", "nominal_quota": 24,
                            "borrowing_limit": 0, "reserved": 24, "pending_workloads": 7, "admitted_workloads": 3}],
        "autoscaler": {"node_types": [{"name": "gpu-a10g", "max_workers": 6, "running": 6,
                                       "resources": {"GPU": 4, "CPU": 48}}],
                       "demands": [{"resources": {"GPU": 4}, "count": 5}]},
    },
})


def run(kind, tool, **args):
    return FixtureBackend(CLUSTER, kind).run(REGISTRY.get(tool), args)


def test_sacctmgr_qos_prints_parsable_rows_and_reads_back():
    out = run("slurm", "sacctmgr_show", entity="qos")
    assert out.text.splitlines()[:3] == [
        "Name|Priority|GrpTRES|MaxTRESPU|MaxWall", "normal|0|||", "gpu-shared|10|gres/gpu=48|gres/gpu=16|2-00:00:00"]
    assert limits.qos_rows(out.text) == CLUSTER.scheduler.qos


def test_sacctmgr_assoc_reads_back():
    out = run("slurm", "sacctmgr_show", entity="assoc")
    assert "cluster|vision|||30||normal,gpu-shared" in out.text
    assert limits.assoc_rows(out.text) == CLUSTER.scheduler.associations


def test_sshare_indents_accounts_and_users_and_reads_back():
    out = run("slurm", "sshare")
    assert out.text.splitlines()[2] == " vision||30|0.300000|81234567|0.620000|0.080000"
    assert out.text.splitlines()[3].startswith("  vision|kowalski|")
    assert [r.fairshare for r in limits.sshare_rows(out.text)] == [1.0, 0.08, 0.05]


def test_a_foreign_header_or_a_short_line_is_an_error_naming_the_command():
    with pytest.raises(ToolError, match="sshare printed an unexpected header"):
        limits.sshare_rows("Account|User|FairShare\nvision||0.1\n")
    with pytest.raises(ToolError, match="sacctmgr show qos printed a line"):
        limits.qos_rows("Name|Priority|GrpTRES|MaxTRESPU|MaxWall\nnormal|0\n")


def test_kueue_cluster_queue_shows_quota_reservation_and_waiting_workloads():
    text = run("kubernetes", "kueue_cluster_queues").text
    assert "Nominal Quota:  24" in text and "Total:     24" in text and "Pending Workloads:  7" in text


def test_ray_status_shows_the_type_at_its_maximum_and_the_demands():
    text = run("ray", "ray_autoscaler_status").text
    assert " 6 gpu-a10g" in text
    assert " {'GPU': 4.0}: 5+ pending tasks/actors" in text
    assert "gpu-a10g: min_workers=0 max_workers=6" in text


def test_no_autoscaler_and_no_queues_say_so():
    empty = Cluster.model_validate({"now": "2026-05-04T15:00:00Z"})
    assert "No autoscaler" in FixtureBackend(empty, "ray").run(REGISTRY.get("ray_autoscaler_status"), {}).text
    assert FixtureBackend(empty, "kubernetes").run(REGISTRY.get("kueue_cluster_queues"), {}).text == "No resources found"


def test_sprio_lists_each_pending_jobs_factors_and_reads_back():
    cluster = Cluster.model_validate({"now": "2026-05-04T15:00:00Z", "scheduler": {"priorities": [
        {"job": 880990, "partition": "h100", "user": "ayoung", "priority": 1361, "age": 22, "fairshare": 39,
         "jobsize": 300, "partition_factor": 1000}]}})
    out = FixtureBackend(cluster, "slurm").run(REGISTRY.get("sprio"), {})
    assert out.text.splitlines() == ["JOBID|PARTITION|USER|PRIORITY|AGE|FAIRSHARE|JOBSIZE|PARTITION|QOS",
                                     "880990|h100|ayoung|1361|22|39|300|1000|0"]
    assert limits.sprio_rows(out.text) == cluster.scheduler.priorities
    with pytest.raises(ToolError, match="sprio printed a line"):
        limits.sprio_rows(out.text.splitlines()[0] + "\n880990|h100|ayoung\n")
