"""Capacity answers name what binds, with arithmetic that holds up."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from crashcart.agent.policies.capacity import demand_forecast
from crashcart.agent.policies.constraint import binding_constraint, gpus_in, hourly_demand
from crashcart.agent.policies.evidence import Evidence, build_evidence

NOW = datetime(2026, 6, 10, 11, 0, tzinfo=timezone.utc)  # before the hours the jobs use: each hour occurs on 2 days


def job(i, day, submit_h, start_h, end_h, gpus=8, **extra):
    base = NOW.replace(hour=0) - timedelta(days=day)
    row = {"job": str(i), "state": "COMPLETED", "gpus": gpus, "user": "u1",
           "submit_time": base + timedelta(hours=submit_h), "start_time": base + timedelta(hours=start_h),
           "end_time": base + timedelta(hours=end_h)}
    row.update(extra)
    return row


def evidence(rows, nodes=4, gpus=8, text="why do our jobs wait every afternoon?", **limits):
    ev = Evidence(now=NOW, trigger={"kind": "chat", "text": text})
    ev.history_rows = rows
    ev.nodes = {f"n{i}": {"node": f"n{i}", "state": "idle", "gpus": gpus} for i in range(nodes)}
    ev.limits = limits
    return ev


def test_gpus_in_a_tres_limit():
    assert gpus_in("cpu=512,gres/gpu=48") == 48
    assert gpus_in("gres/gpu:h100=16") == 16
    assert gpus_in("cpu=64") == 0 and gpus_in(None) == 0


def test_hourly_demand_averages_each_hour_over_the_days_it_occurred():
    # Two days, one 8-GPU job waiting 13:00-15:00 on each: 8 GPUs wait at 13 and 14 on average.
    rows = [job(1, 1, 13, 15, 18), job(2, 2, 13, 15, 18)]
    d = hourly_demand(rows, NOW)
    assert d.waiting[13] == d.waiting[14] == 8.0
    assert d.waiting[12] == d.waiting[15] == 0.0
    assert d.running[16] == 8.0
    assert d.window() == "13:00-15:00 UTC"


def test_a_qos_cap_binds_while_gpus_are_free():
    rows = [job(i * 10 + k, i, 13, 13, 17, qos="team-q") for i in (1, 2) for k in range(2)]
    rows += [job(i * 10 + 5, i, 13, 16, 18, qos="team-q", reason="QOSGrpGRES") for i in (1, 2)]
    answer, lines, chart = binding_constraint(evidence(rows, qos=[{"name": "team-q", "grp_tres": "gres/gpu=16"}]))
    assert "QOS" in answer and "GrpTRES=gres/gpu=16" in answer
    assert any("16 GPUs were free" in line for line in lines)  # 32 in service, 16 held
    assert chart["capacity"] == 32 and chart["series"]["waiting"][14] == 8.0


def test_a_full_cluster_is_capacity_not_a_limit():
    rows = [job(i * 10 + k, i, 12, 12, 17) for i in (1, 2) for k in range(4)]  # 32 of 32 GPUs
    rows += [job(i * 10 + 5, i, 13, 17, 19) for i in (1, 2)]
    answer, _, _ = binding_constraint(evidence(rows, qos=[{"name": "normal"}]))
    assert "every GPU is busy" in answer and "no scheduler limit binds" in answer


def test_kueue_quota_and_autoscaler_and_fair_share_are_named():
    rows = [job(1, 1, 9, 12, 14), job(2, 2, 9, 12, 14)]
    cq = {"name": "cq-a", "flavor": "f", "resource": "nvidia.com/gpu", "nominal_quota": 8, "borrowing_limit": 0,
          "reserved": 8, "pending_workloads": 3, "admitted_workloads": 1}
    assert "ClusterQueue cq-a: 8 of 8" in binding_constraint(evidence(rows, cluster_queues=[cq]))[0]
    scaler = {"node_types": [{"name": "gpu-g", "max_workers": 2, "running": 2, "resources": {"GPU": 4}}],
              "demands": [{"resources": {"GPU": 4}, "count": 3, "kind": "tasks/actors"}]}
    assert "gpu-g runs 2 of max_workers=2" in binding_constraint(evidence(rows, autoscaler=scaler))[0]
    shares = [{"account": "bio", "user": None, "norm_shares": 0.1, "effectv_usage": 0.5, "fairshare": 0.02}]
    answer = binding_constraint(evidence(rows, text="bio jobs always wait", shares=shares))[0]
    assert "FairShare 0.02" in answer and "50%" in answer and "10% share" in answer


def test_nothing_found_is_said_as_such():
    rows = [job(1, 1, 9, 12, 14), job(2, 2, 9, 12, 14)]
    answer = binding_constraint(evidence(rows))[0]
    assert answer.startswith("could not tell what binds")


def test_forecast_without_earlier_use_claims_no_trend():
    ev = evidence([job(1, 3, 9, 9, 15), job(2, 2, 9, 9, 15)], text="how many GPUs next month?")
    summary, lines = demand_forecast(ev)
    assert "+0%" not in summary and "no trend" in summary
    assert any("no use before, so no trend" in line for line in lines)


def test_a_chat_about_one_named_job_is_not_a_capacity_review():
    from crashcart.agent.policies.matching import match_label
    from crashcart.playbooks import load_playbooks

    entry = load_playbooks()["capacity_binding_constraint"]
    rows = [job(1, 1, 13, 15, 18), job(2, 2, 13, 15, 18)]
    ev = evidence(rows, text="why do our jobs wait every afternoon?")
    assert match_label(entry, ev) is not None
    named = evidence(rows, text="why does job 2 keep waiting every afternoon?")
    named.jobs = build_evidence([{"tool": "list_jobs", "args": {}, "ok": True, "text": "",
                                  "data": {"rows": [dict(r, submit_time=r["submit_time"].isoformat(),
                                                         start_time=r["start_time"].isoformat(),
                                                         end_time=r["end_time"].isoformat()) for r in rows]}}],
                                named.trigger, NOW).jobs
    assert named.focus_jobs() == ["2"] and match_label(entry, named) is None


# --- the limit read from the waiting jobs' own pending reasons, when no limit table was read ---

def _pending(i, gpus=8, **extra):
    return {"job": str(i), "state": "PENDING", "gpus": gpus, "user": "u1",
            "submit_time": NOW - timedelta(hours=2), **extra}


def _running(i, gpus=8, **extra):
    return {"job": str(i), "state": "RUNNING", "gpus": gpus, "user": "u1",
            "submit_time": NOW - timedelta(hours=4), "start_time": NOW - timedelta(hours=4), **extra}


def test_a_group_limit_reason_bounds_the_cap_by_what_the_group_holds():
    rows = [_running(1, 16, account="nlp"), _running(2, 8, account="nlp"), _running(3, 8, account="chem")]
    rows += [_pending(4, 8, account="nlp", reason="AssocGrpGRES"), _pending(5, 16, account="nlp", reason="AssocGrpGRES")]
    answer, lines, chart = binding_constraint(evidence(rows, nodes=6))
    assert chart["binds"] == "group_limit_reason" and "account nlp" in answer and "AssocGrpGRES" in answer
    # 24 held by the account's running jobs (not chem's 8); the smallest wait asks 8.
    assert any("hold 24 GPUs" in line and "24 + 8 = 32" in line for line in lines)


def test_a_priority_or_resources_reason_is_no_group_limit():
    rows = [_running(1, 32), _pending(2, 8, reason="Resources"), _pending(3, 8, reason="Priority")]
    _, _, chart = binding_constraint(evidence(rows, nodes=4))
    assert chart["binds"] not in {"qos_cap", "group_limit_reason"}


KUEUE = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor {f}, {n} more needed"


def test_kueues_own_admission_message_names_the_queue_quota():
    rows = [_running(1, 16, partition="team-a"), _running(2, 8, partition="team-b")]
    rows += [_pending(3, 8, partition="team-a", reason="Pending: " + KUEUE.format(f="a100", n=8)),
             _pending(4, 4, partition="team-a", reason="Pending: " + KUEUE.format(f="a100", n=4))]
    answer, lines, chart = binding_constraint(evidence(rows, nodes=6))
    assert chart["binds"] == "kueue_quota_reason" and "flavor a100" in answer and "12 more needed" in answer
    assert any("hold 16 GPUs" in line for line in lines)  # team-a's admitted work, not team-b's


def test_ray_status_is_read_from_the_newest_block():
    from crashcart.agent.policies.constraint import ray_status

    text = "\n".join([
        "======== Autoscaler status: 2026-01-01 10:00:00.000000 ========", "Active:", " 2 gpu", "Usage:",
        " 1.0/16.0 GPU",
        "======== Autoscaler status: 2026-01-01 11:00:00.000000 ========", "Node status", "-" * 20, "Active:",
        " 1 head", " 4 gpu-a10g", "Pending:", " (no pending nodes)", "Recent failures:", " (no failures)", "",
        "Resources", "-" * 20, "Usage:", " 60.0/184.0 CPU", " 16.0/16.0 GPU", " 0B/700.00GiB memory", "",
        "Demands:", " {'GPU': 4.0}: 2+ pending tasks/actors",
    ])
    st = ray_status(text)
    assert st["active"] == {"head": 1, "gpu-a10g": 4} and st["pending"] == {} and st["failures"] == []
    assert st["usage"]["GPU"] == (16.0, 16.0) and st["usage"]["CPU"] == (60.0, 184.0)
    assert st["demands"] == ["{'GPU': 4.0}: 2+ pending tasks/actors"]
    assert ray_status("no status here") is None
