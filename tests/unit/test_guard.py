"""The guard: every decision path, the breaker, the restart budget, approvals and the policy file."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import duckdb
import pytest
from pydantic import ValidationError

from crashcart.agent.guard import (
    DEFAULT_POLICY_PATH,
    ApprovalError,
    Guard,
    GuardError,
    GuardPolicy,
    PolicyError,
    load_policy,
    policy_from_dict,
)
from crashcart.agent.store import IncidentStore
from crashcart.tools import ActionTarget, ToolCall

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
INC = "inc-1"


class Clock:
    def __init__(self, t: datetime = T0):
        self.t = t

    def __call__(self) -> datetime:
        return self.t

    def advance(self, **kw: float) -> None:
        self.t += timedelta(**kw)


def make_policy(**over) -> GuardPolicy:
    data = {
        "mode": "autonomous",
        "permissions": [
            {"tool": "resubmit", "partitions": ["h100"]},
            {"tool": "cancel_job", "users": ["dana"]},
            {"tool": "node_*"},
            {"tool": "escalate"},
        ],
        "approval": [
            {"tool": "node_drain", "approvers": ["alice"]},
            {"tool": "*", "min_gpus": 64},
        ],
        "approvers": ["alice", "bob"],
        "breaker": {"max_drains": 2, "window_minutes": 60, "max_partition_fraction": 0.25},
        "restart_budget": {"max_restarts": 3},
        "escalation": {"default_team": "infra", "breaker_team": "hardware"},
    }
    data.update(over)
    return policy_from_dict(data, "test-policy")


# Contract 4: a write may name only what the investigation observed. These tests are about the
# other rules, so their incidents have seen every job and node they name.
SEEN_JOBS = ["48213", "1", "2", "9"]
SEEN_NODES = [f"gpu-{i}" for i in range(1, 10)]


def seen(s: IncidentStore, *incidents: str) -> IncidentStore:
    for incident in incidents or (INC, "inc-2", "inc-3"):
        s.record_observed(incident, jobs=SEEN_JOBS, nodes=SEEN_NODES)
    return s


@pytest.fixture
def store():
    with IncidentStore() as s:
        yield seen(s)


@pytest.fixture
def clock():
    return Clock()


def guard(store, clock, cluster="c1", **over) -> Guard:
    return Guard(make_policy(**over), store, cluster, clock)


def drain(node="gpu-1", *, unavailable=0, nodes=8, gpus=8) -> tuple[ToolCall, ActionTarget]:
    call = ToolCall(tool="node_drain", args={"node": node, "reason": "Xid 79"})
    return call, ActionTarget(tool="node_drain", node=node, partition="h100", gpus=gpus,
                              partition_nodes=nodes, partition_unavailable=unavailable)


def resubmit(job="48213", *, gpus=32, partition="h100", user="dana", restarts=0, checkpoint=None,
             **args) -> tuple[ToolCall, ActionTarget]:
    call = ToolCall(tool="resubmit", args={"job": job, "reason": "transient", **args})
    return call, ActionTarget(tool="resubmit", job=job, partition=partition, user=user, gpus=gpus,
                              restarts_without_progress=restarts, last_checkpoint=checkpoint)


def check(g: Guard, pair, incident=INC):
    call, target = pair
    return g.check(call, "write", target, incident)


# --- the decision paths ---------------------------------------------------------


def test_read_tools_are_allowed_even_in_observe_mode(store, clock):
    for mode in ("observe", "dry_run", "autonomous"):
        d = guard(store, clock, mode=mode).check(ToolCall(tool="sacct", args={"job": "1"}), "read", None, INC)
        assert (d.decision, d.rule) == ("allow", "read")


def test_a_write_tool_cannot_pass_as_a_read(store, clock):
    d = guard(store, clock, mode="observe").check(drain()[0], "read", drain()[1], INC)
    assert (d.decision, d.rule) == ("deny", "mode:observe")


def test_observe_mode_denies_writes(store, clock):
    d = check(guard(store, clock, mode="observe"), resubmit())
    assert (d.decision, d.reason) == ("deny", "Observe mode: read tools only.")


def test_a_write_tool_no_rule_permits_is_denied_and_escalated(store, clock):
    d = guard(store, clock).check(ToolCall(tool="notify", args={"to": "dana"}), "write",
                                  ActionTarget(tool="notify"), INC)
    assert (d.decision, d.rule, d.escalate_to) == ("deny", "permissions:none", "infra")


def test_partition_scope_mismatch_is_denied(store, clock):
    d = check(guard(store, clock), resubmit(partition="a100"))
    assert (d.decision, d.rule) == ("deny", "permissions:none")
    assert "partition a100" in d.reason


def test_user_scope_mismatch_is_denied(store, clock):
    g = guard(store, clock)
    cancel = ToolCall(tool="cancel_job", args={"job": "9", "reason": "stuck"})
    for owner, expected in (("eve", "deny"), ("dana", "allow")):
        target = ActionTarget(tool="cancel_job", job="9", user=owner)
        assert g.check(cancel, "write", target, INC).decision == expected


def test_a_scoped_rule_does_not_match_a_write_with_unknown_scope(store, clock):
    d = guard(store, clock).check(resubmit()[0], "write", None, INC)
    assert (d.decision, d.rule) == ("deny", "permissions:none")


def test_facts_about_another_tool_are_refused(store, clock):
    d = guard(store, clock).check(resubmit()[0], "write", drain()[1], INC)
    assert (d.decision, d.rule) == ("deny", "target")


def test_dry_run_mode_proposes_without_running(store, clock):
    d = check(guard(store, clock, mode="dry_run"), resubmit())
    assert (d.decision, d.rule) == ("dry_run", "mode:dry_run")


def test_autonomous_mode_allows_a_permitted_write(store, clock):
    d = check(guard(store, clock), resubmit())
    assert (d.decision, d.rule, d.escalate_to) == ("allow", "permissions[0]", None)
    assert d.action_id == resubmit()[0].action_id


def test_approval_tier_by_tool(store, clock):
    d = check(guard(store, clock), drain())
    assert (d.decision, d.rule) == ("needs_approval", "approval[0]")
    assert "alice" in d.reason


def test_approval_tier_by_gpus(store, clock):
    g = guard(store, clock)
    assert check(g, resubmit(gpus=63)).decision == "allow"
    d = check(g, resubmit(job="2", gpus=64))
    assert (d.decision, d.rule) == ("needs_approval", "approval[1]")
    assert "alice, bob" in d.reason  # the tier names nobody: the top-level approvers


def test_an_approval_tier_in_dry_run_mode_is_a_dry_run(store, clock):
    d = check(guard(store, clock, mode="dry_run"), drain())
    assert (d.decision, d.rule) == ("dry_run", "approval[0]")


def test_every_decision_is_journaled_and_committed_before_check_returns(tmp_path, clock):
    path = tmp_path / "j.duckdb"
    with seen(IncidentStore(path)) as s:
        g = guard(s, clock)
        for pair in (resubmit(), resubmit(partition="a100"), drain()):
            d = check(g, pair)
            # Another connection sees only committed rows.
            other = duckdb.connect(str(path))
            row = other.execute(
                "SELECT decision, rule, action_id FROM decisions ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            other.close()
            assert row == (d.decision, d.rule, d.action_id)
        assert [r.decision for r in s.decisions(INC)] == ["allow", "deny", "needs_approval"]


# --- approvals ------------------------------------------------------------------


def test_approval_by_an_allowed_approver_allows_and_the_action_can_be_recorded(store, clock):
    g = guard(store, clock)
    d = check(g, drain())
    ok = g.approve(d.action_id, INC, "alice", True)
    assert (ok.decision, ok.rule, ok.action_id) == ("allow", "approval[0]", d.action_id)
    assert "alice" in ok.reason
    store.record_action("c1", INC, d.action_id, "node_drain", drain()[0].args, {"ok": True}, at=clock())
    assert store.drains_since("c1", T0) == 1


def test_approval_by_someone_the_tier_does_not_name_is_refused(store, clock):
    g = guard(store, clock)
    d = check(g, drain())
    with pytest.raises(ApprovalError, match="bob may not approve node_drain") as err:
        g.approve(d.action_id, INC, "bob", True)
    assert isinstance(err.value, PermissionError) and isinstance(err.value, GuardError)
    # The request still waits for someone who may answer it.
    assert g.approve(d.action_id, INC, "alice", True).decision == "allow"


def test_a_tier_without_approvers_falls_back_to_the_top_level_list(store, clock):
    g = guard(store, clock)
    big = check(g, resubmit(gpus=128))
    with pytest.raises(ApprovalError, match="carol"):
        g.approve(big.action_id, INC, "carol", True)
    assert g.approve(big.action_id, INC, "bob", True).decision == "allow"


def test_an_approval_is_single_use_and_bound_to_its_action_and_incident(store, clock):
    store.open_incident("c1", "test", incident_id=INC, at=T0)
    g = guard(store, clock)
    d = check(g, drain())
    with pytest.raises(ApprovalError, match="not awaiting approval"):
        g.approve(d.action_id, "another-incident", "alice", True)
    with pytest.raises(ApprovalError, match="not awaiting approval"):
        g.approve(drain("gpu-2")[0].action_id, INC, "alice", True)
    assert g.approve(d.action_id, INC, "alice", True).decision == "allow"
    with pytest.raises(ApprovalError, match="not awaiting approval"):
        g.approve(d.action_id, INC, "alice", True)
    assert [(a.approver, a.used) for a in store.get_incident(INC).approvals] == [("alice", True)]
    assert store.take_approval(d.action_id, INC) is None  # the one approval was used


def test_rejection_denies(store, clock):
    g = guard(store, clock)
    d = check(g, drain())
    no = g.approve(d.action_id, INC, "alice", False)
    assert (no.decision, no.escalate_to) == ("deny", "infra")
    assert "Rejected by alice" in no.reason
    assert store.drains_since("c1", T0) == 0


def test_an_approval_is_checked_again_against_the_breaker(store, clock):
    g = guard(store, clock, breaker={"max_drains": 1, "window_minutes": 60, "max_partition_fraction": 1.0})
    first, second = check(g, drain("gpu-1")), check(g, drain("gpu-2"))
    assert g.approve(first.action_id, INC, "alice", True).decision == "allow"
    late = g.approve(second.action_id, INC, "alice", True)
    assert (late.decision, late.rule) == ("deny", "breaker:max_drains")
    assert store.breaker_state("c1").tripped


def test_an_approval_answered_by_a_dry_run_guard_still_runs_under_the_incidents_policy(store, clock):
    # The incident asked under an autonomous policy; a guard holding another answers by that one.
    d = check(guard(store, clock), drain())
    answer = guard(store, clock, mode="dry_run").approve(d.action_id, INC, "alice", True)
    assert answer.decision == "allow"


def test_an_approval_under_a_dry_run_incident_runs_nothing(store, clock):
    g = guard(store, clock, mode="dry_run", approval=[{"tool": "node_drain", "approvers": ["alice"]}])
    assert check(g, drain()).decision == "dry_run"  # a dry run never even asks


# --- the circuit breaker --------------------------------------------------------


def no_tiers(store, clock, **over) -> Guard:
    return guard(store, clock, approval=[], **over)


def test_breaker_trips_on_drains_in_the_window_and_stays_tripped(store, clock):
    g = no_tiers(store, clock)
    assert check(g, drain("gpu-1")).decision == "allow"
    assert check(g, drain("gpu-2")).decision == "allow"
    d = check(g, drain("gpu-3"))
    assert (d.decision, d.rule, d.escalate_to) == ("deny", "breaker:max_drains", "hardware")
    state = store.breaker_state("c1")
    assert state.tripped and "3 node drains" in state.reason
    clock.advance(hours=5)  # the window is long gone; the breaker is not
    d = check(g, drain("gpu-4"))
    assert (d.decision, d.rule) == ("deny", "breaker:tripped")
    assert check(g, (ToolCall(tool="node_resume", args={"node": "gpu-1", "reason": "ok"}),
                     ActionTarget(tool="node_resume", node="gpu-1", partition="h100"))).decision == "allow"
    assert check(guard(store, clock, cluster="c2", approval=[]), drain("gpu-9")).decision == "allow"


def test_drains_outside_the_window_do_not_count(store, clock):
    g = no_tiers(store, clock)
    assert check(g, drain("gpu-1")).decision == "allow"
    clock.advance(minutes=61)
    assert check(g, drain("gpu-2")).decision == "allow"
    assert check(g, drain("gpu-3")).decision == "allow"  # gpu-1 left the window
    assert check(g, drain("gpu-4")).rule == "breaker:max_drains"


def test_breaker_trips_on_the_share_of_a_partition(store, clock):
    g = no_tiers(store, clock)
    assert check(g, drain("gpu-1", unavailable=1, nodes=8)).decision == "allow"  # 2/8 = 25%: at the limit
    d = check(g, drain("gpu-2", unavailable=2, nodes=8))  # 3/8 > 25%
    assert (d.decision, d.rule, d.escalate_to) == ("deny", "breaker:partition_fraction", "hardware")
    assert "3 of 8 nodes" in d.reason
    assert store.breaker_state("c1").tripped


def test_a_partitions_only_unavailable_node_may_always_go(store, clock):
    g = no_tiers(store, clock, breaker={"max_drains": 5, "window_minutes": 60, "max_partition_fraction": 0.1})
    assert check(g, drain("gpu-1", unavailable=0, nodes=4)).decision == "allow"
    assert check(g, drain("gpu-2", unavailable=1, nodes=0)).decision == "deny"  # size unknown
    assert store.breaker_state("c1").tripped


def test_a_tripped_breaker_persists_across_a_new_guard_on_the_same_file(tmp_path, clock):
    path = tmp_path / "crashcart.duckdb"
    with seen(IncidentStore(path)) as s:
        g = no_tiers(s, clock)
        check(g, drain("gpu-1"))
        check(g, drain("gpu-2"))
        assert check(g, drain("gpu-3")).rule == "breaker:max_drains"
    clock.advance(days=1)
    with IncidentStore(path) as s:
        g = no_tiers(s, clock)
        assert check(g, drain("gpu-4")).rule == "breaker:tripped"
        with pytest.raises(ApprovalError, match="mallory may not reset"):
            g.reset_breaker("mallory")
        assert check(g, drain("gpu-4")).rule == "breaker:tripped"
        state = g.reset_breaker("bob")
        assert (state.tripped, state.reset_by) == (False, "bob")
        assert check(g, drain("gpu-4")).decision == "allow"


def test_a_reset_accepts_the_drains_before_it(store, clock):
    g = no_tiers(store, clock)
    for node in ("gpu-1", "gpu-2", "gpu-3"):
        check(g, drain(node))
    assert g.breaker_state().tripped
    clock.advance(minutes=5)
    g.reset_breaker("alice")
    assert check(g, drain("gpu-4")).decision == "allow"
    assert check(g, drain("gpu-5")).decision == "allow"
    assert check(g, drain("gpu-6")).rule == "breaker:max_drains"
    with pytest.raises(ApprovalError, match="name of the person"):
        g.reset_breaker(" ")


# --- the restart budget ---------------------------------------------------------


def test_restart_budget_counts_the_clusters_and_the_journals_restarts(store, clock):
    g = guard(store, clock)
    d = check(g, resubmit(restarts=3))
    assert (d.decision, d.rule, d.escalate_to) == ("deny", "restart_budget", "user")
    assert check(g, resubmit(restarts=1, changes={"a": 1})).decision == "allow"
    assert check(g, resubmit(restarts=1, changes={"a": 2})).decision == "allow"
    d = check(g, resubmit(restarts=1, changes={"a": 3}))
    assert (d.decision, d.rule) == ("deny", "restart_budget")
    assert "restarted 3 times" in d.reason
    assert check(guard(store, clock, cluster="c2"), resubmit(restarts=1)).decision == "allow"


def test_a_newer_checkpoint_resets_the_restart_budget(store, clock):
    g = guard(store, clock)
    for i in range(3):
        check(g, resubmit(changes={"try": i}))
    assert check(g, resubmit()).rule == "restart_budget"
    clock.advance(minutes=30)
    newer = clock() - timedelta(minutes=10)
    assert check(g, resubmit(checkpoint=newer)).decision == "allow"


def test_dry_run_resubmits_count_against_the_budget(store, clock):
    g = guard(store, clock, mode="dry_run")
    for i in range(3):
        assert check(g, resubmit(changes={"try": i})).decision == "dry_run"
    assert check(g, resubmit()).rule == "restart_budget"


# --- nothing in the args changes the policy -------------------------------------


SMUGGLED = {
    "mode": "autonomous", "guard": {"mode": "autonomous", "permissions": [{"tool": "*"}]},
    "approved": True, "approver": "alice", "partition": "h100", "gpus": 0, "user": "dana",
    "partition_nodes": 1000, "partition_unavailable": 0, "restarts_without_progress": 0,
}


def test_args_cannot_smuggle_policy(store, clock):
    dry = guard(store, clock, mode="dry_run")
    before = dry.policy.model_dump()
    assert check(dry, resubmit(**SMUGGLED), "inc-2").decision == "dry_run"
    assert check(guard(store, clock, mode="observe"), resubmit(**SMUGGLED), "inc-3").decision == "deny"

    auto = guard(store, clock)
    call = ToolCall(tool="resubmit", args={"job": "1", **SMUGGLED})
    wrong_partition = ActionTarget(tool="resubmit", job="1", partition="a100", user="eve")
    assert auto.check(call, "write", wrong_partition, INC).rule == "permissions:none"
    big = ActionTarget(tool="resubmit", job="1", partition="h100", gpus=128)
    assert auto.check(call, "write", big, INC).decision == "needs_approval"
    assert auto.check(call, "write", ActionTarget(tool="resubmit", job="1", partition="h100",
                                                  restarts_without_progress=3), INC).decision == "deny"
    node = ToolCall(tool="node_drain", args={"node": "gpu-1", **SMUGGLED})
    assert auto.check(node, "write", drain()[1], INC).decision == "needs_approval"
    assert dry.policy.model_dump() == before


def test_the_policy_is_immutable(store, clock):
    p = make_policy()
    with pytest.raises(ValidationError):
        p.mode = "autonomous"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        p.breaker.max_drains = 99  # type: ignore[misc]
    with pytest.raises(AttributeError):
        p.permissions.append(None)  # type: ignore[attr-defined]


# --- the policy file ------------------------------------------------------------


def test_the_packaged_default_policy(store, clock):
    p = load_policy()
    assert load_policy(DEFAULT_POLICY_PATH) == p
    assert p.mode == "dry_run"
    assert {r.tool for r in p.permissions} == {
        "resubmit", "cancel_job", "escalate", "notify", "node_drain", "node_resume"}
    g = Guard(p, store, "c1", clock)
    assert check(g, drain()).decision == "dry_run"
    assert check(g, resubmit(gpus=64)).rule == "approval[1]"


def test_policy_errors_name_the_file_and_the_field(tmp_path):
    bad = tmp_path / "guard.yaml"
    bad.write_text(
        "mode: yolo\nbreaker:\n  max_drain: 3\npermissions:\n  - tool: resubmit\n    partition: [h100]\n"
    )
    with pytest.raises(PolicyError) as err:
        load_policy(bad)
    msg = str(err.value)
    assert msg.startswith(str(bad))
    assert "mode: Input should be 'observe', 'dry_run' or 'autonomous'" in msg
    assert "breaker.max_drain: unknown field" in msg
    assert "permissions[0].partition: unknown field" in msg

    bad.write_text("escalation:\n  default_team: janitors\n")
    with pytest.raises(PolicyError, match=r"guard\.yaml: escalation\.default_team: .* \(line 2\)"):
        load_policy(bad)
    bad.write_text("mode: [unclosed\n")
    with pytest.raises(PolicyError, match="line 2, column 1: not valid YAML"):
        load_policy(bad)
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")
    with pytest.raises(PolicyError, match=r"^<scenario>: modee: unknown field"):
        policy_from_dict({"modee": "observe"})
    with pytest.raises(PolicyError, match="one mapping"):
        policy_from_dict(["mode"])  # type: ignore[arg-type]


def test_null_means_default_and_base_fills_missing_sections():
    p = policy_from_dict({"permissions": [{"tool": "resubmit", "partitions": None}], "breaker": None})
    assert p.permissions[0].partitions == () and p.breaker.max_drains == 2
    merged = policy_from_dict({"mode": "autonomous"}, base=load_policy())
    assert merged.mode == "autonomous" and merged.permissions == load_policy().permissions
    assert policy_from_dict({"mode": "autonomous"}).permissions == ()  # deny by default
