"""An incident owns its policy (issue 8, items 1, 2 and the observed-entity rule of Contract 4).

Whoever answers an incident later, with whatever policy in hand, is judged by the policy the
incident started under; an approval is single-use, bound to one action under one policy, from
a person that policy names (and, when it says so, from their own OS account), and it expires.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from crashcart.agent.guard import ApprovalError, Guard, policy_from_dict, policy_sha256, scenario_breaker
from crashcart.agent.store import IncidentStore
from crashcart.tools import ActionTarget, ToolCall

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
INC = "inc-1"
BAD_NODE = "gpu-7"


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> datetime:
        return self.t


def policy(**over):
    data = {
        "mode": "autonomous",
        "permissions": [{"tool": "*"}],
        "approval": [{"tool": "node_drain", "approvers": ["alice"]}],
        "approvers": ["alice", "bob"],
    }
    data.update(over)
    return policy_from_dict(data, "test-policy")


@pytest.fixture
def store():
    with IncidentStore() as s:
        s.open_incident("c1", "test", {"kind": "job_failed", "job": "48213"}, incident_id=INC, at=T0)
        s.record_observed(INC, jobs=["48213"], nodes=[BAD_NODE, "gpu-1"])
        yield s


@pytest.fixture
def clock():
    return Clock()


def drain(node=BAD_NODE):
    call = ToolCall(tool="node_drain", args={"node": node, "reason": "Xid 79"})
    return call, ActionTarget(tool="node_drain", node=node, partition="h100", gpus=8, partition_nodes=16)


def ask(g: Guard, pair=None, incident=INC):
    call, target = pair or drain()
    return g.check(call, "write", target, incident)


# --- the incident's own policy ---------------------------------------------------------


def test_the_policy_an_incident_starts_under_is_stored_with_it(store, clock):
    mine = policy()
    Guard(mine, store, "c1", clock).bind(INC)
    stored = store.incident_policy(INC)
    assert (stored.mode, stored.sha256) == ("autonomous", policy_sha256(mine))
    assert policy_from_dict(stored.policy) == mine
    # Binding again (a resume, another process) never replaces it.
    Guard(policy(mode="dry_run"), store, "c1", clock).bind(INC)
    assert store.incident_policy(INC).sha256 == policy_sha256(mine)


def test_an_approval_is_judged_by_the_incidents_policy_not_the_approvers(store, clock):
    ours = Guard(policy(), store, "c1", clock)
    ours.bind(INC)
    d = ask(ours)
    assert d.decision == "needs_approval"
    evil = Guard(policy(approval=[{"tool": "node_drain", "approvers": ["mallory"]}], approvers=["mallory"]),
                 store, "c1", clock)
    with pytest.raises(ApprovalError, match="mallory may not approve node_drain"):
        evil.approve(d.action_id, INC, "mallory", True)
    # ...and alice's approval, answered through that same foreign guard, still runs the drain.
    assert evil.approve(d.action_id, INC, "alice", True).decision == "allow"


def test_a_dry_run_guard_answering_does_not_turn_an_approved_drain_into_a_dry_run(store, clock):
    d = ask(Guard(policy(), store, "c1", clock))  # the first decision binds the incident
    answer = Guard(policy(mode="dry_run"), store, "c1", clock).approve(d.action_id, INC, "alice", True)
    assert (answer.decision, answer.reason) == ("allow", "Approved by alice.")


def test_later_checks_on_an_incident_use_its_policy(store, clock):
    ask(Guard(policy(mode="observe"), store, "c1", clock), (ToolCall(tool="escalate", args={
        "team": "infra", "summary": "x", "reason": "x"}), ActionTarget(tool="escalate")))
    later = Guard(policy(), store, "c1", clock)
    assert (ask(later).decision, ask(later).rule) == ("deny", "mode:observe")


# --- an approval: single-use, bound, from someone named, not forever ---------------------


def test_an_approval_expires_with_the_request(store, clock):
    g = Guard(policy(), store, "c1", clock)
    d = ask(g)
    clock.t = T0 + timedelta(minutes=61)
    with pytest.raises(ApprovalError, match="expired"):
        g.approve(d.action_id, INC, "alice", True)
    assert not [a for a in store.get_incident(INC).approvals if a.used]


def test_the_expiry_is_a_policy_setting(store, clock):
    g = Guard(policy(approval_settings={"expires_minutes": 180}), store, "c1", clock)
    d = ask(g)
    clock.t = T0 + timedelta(minutes=179)
    assert g.approve(d.action_id, INC, "alice", True).decision == "allow"


def test_a_stored_approval_is_bound_to_its_action_and_policy_and_used_once(store, clock):
    g = Guard(policy(), store, "c1", clock)
    g.bind(INC)
    d = ask(g)
    sha = policy_sha256(g.policy)
    args = drain()[0].args
    store.record_approval(d.action_id, INC, "alice", True, T0, tool="node_drain", args=args,
                          policy_sha256=sha, os_user="alice", expires_at=T0 + timedelta(hours=1))
    assert store.take_approval(d.action_id, INC, tool="node_drain", args={**args, "node": "gpu-1"},
                               policy_sha256=sha, now=T0) is None
    assert store.take_approval(d.action_id, INC, tool="node_drain", args=args,
                               policy_sha256="0" * 64, now=T0) is None
    assert store.take_approval(d.action_id, INC, tool="node_drain", args=args, policy_sha256=sha,
                               now=T0 + timedelta(hours=2)) is None
    taken = store.take_approval(d.action_id, INC, tool="node_drain", args=args, policy_sha256=sha, now=T0)
    assert (taken.approver, taken.os_user, taken.used) == ("alice", "alice", True)
    assert store.take_approval(d.action_id, INC, tool="node_drain", args=args, policy_sha256=sha, now=T0) is None


def test_refused_attempts_are_journaled_with_who_what_and_why(store, clock):
    g = Guard(policy(), store, "c1", clock)
    d = ask(g)
    with pytest.raises(ApprovalError):
        g.approve(d.action_id, INC, "mallory", True, os_user="eve")
    g.approve(d.action_id, INC, "alice", True, os_user="alice")
    refused, accepted = store.approval_attempts(INC)
    assert (refused.approver, refused.os_user, refused.action_id, refused.tool, refused.outcome) == (
        "mallory", "eve", d.action_id, "node_drain", "refused")
    assert "mallory may not approve node_drain" in refused.reason
    assert (accepted.approver, accepted.outcome, accepted.policy_sha256) == (
        "alice", "accepted", policy_sha256(g.policy))
    [approval] = store.get_incident(INC).approvals
    assert (approval.approver, approval.os_user, approval.used) == ("alice", "alice", True)


# --- who is approving --------------------------------------------------------------------


def test_an_approver_entry_may_bind_a_person_to_os_accounts(store, clock):
    g = Guard(policy(approval=[{"tool": "node_drain"}],
                     approvers=[{"name": "alice", "os_users": ["asmith"], "slack_ids": ["U024BE7LH"]}, "bob"]),
              store, "c1", clock)
    d = ask(g)
    with pytest.raises(ApprovalError, match="alice may approve only as OS user asmith; this came from root"):
        g.approve(d.action_id, INC, "alice", True, os_user="root")
    with pytest.raises(ApprovalError, match="only as OS user asmith"):
        g.approve(d.action_id, INC, "alice", True)  # no OS user at all: not asmith either
    assert g.approve(d.action_id, INC, "alice", True, os_user="asmith").decision == "allow"


def test_from_slack_a_person_is_known_only_by_the_slack_ids_their_entry_lists(store, clock):
    """A Slack click carries the clicker's user id (Slack signed it); the OS account of the app's
    process says nothing about who clicked, so it is not the check, and no Slack id is no way in."""
    g = Guard(policy(approval=[{"tool": "node_drain"}], approval_settings={"require_os_user": True},
                     approvers=[{"name": "alice", "os_users": ["asmith"], "slack_ids": ["U024BE7LH"]}, "bob"]),
              store, "c1", clock)
    d = ask(g)
    with pytest.raises(ApprovalError, match="from Slack only as user U024BE7LH; this came from Slack user U0MALLORY"):
        g.approve(d.action_id, INC, "alice", True, slack_user="U0MALLORY")
    with pytest.raises(ApprovalError, match=r"bob may approve from Slack only as user \(none listed\)"):
        g.approve(d.action_id, INC, "bob", True, slack_user="U024BE7LH")
    assert g.approve(d.action_id, INC, "alice", True, slack_user="U024BE7LH").decision == "allow"
    refused, _, accepted = store.approval_attempts(INC)
    assert (refused.slack_user, refused.outcome) == ("U0MALLORY", "refused")
    assert (accepted.approver, accepted.slack_user, accepted.outcome) == ("alice", "U024BE7LH", "accepted")


def test_a_policy_can_require_every_approver_to_be_their_own_os_user(store, clock):
    g = Guard(policy(approval=[{"tool": "node_drain"}], approval_settings={"require_os_user": True}),
              store, "c1", clock)
    d = ask(g)
    with pytest.raises(ApprovalError, match="only as OS user bob"):
        g.approve(d.action_id, INC, "bob", True, os_user="alice")
    assert g.approve(d.action_id, INC, "bob", True, os_user="bob").decision == "allow"


def test_string_approvers_approve_from_any_account_unless_required(store, clock):
    g = Guard(policy(), store, "c1", clock)
    d = ask(g)
    assert g.approve(d.action_id, INC, "alice", True, os_user="root").decision == "allow"


def test_no_approvers_means_nobody_approves_or_resets(store, clock):
    g = Guard(policy(approval=[{"tool": "node_drain"}], approvers=[]), store, "c1", clock)
    d = ask(g)
    assert "nobody" in d.reason
    with pytest.raises(ApprovalError, match="allowed: nobody"):
        g.approve(d.action_id, INC, "alice", True)
    with pytest.raises(ApprovalError, match="nobody may reset"):
        g.reset_breaker("alice")


def test_a_reset_needs_a_named_person(store, clock):
    g = Guard(policy(approval_settings={"require_os_user": True}), store, "c1", clock)
    for who in ("", "  "):
        with pytest.raises(ApprovalError, match="name of the person"):
            g.reset_breaker(who)
    with pytest.raises(ApprovalError, match="mallory may not reset"):
        g.reset_breaker("mallory", os_user="mallory")
    with pytest.raises(ApprovalError, match="only as OS user bob"):
        g.reset_breaker("bob", os_user="root")
    assert g.reset_breaker("bob", os_user="bob").reset_by == "bob"


# --- the observed-entity rule ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["autonomous", "dry_run"])
def test_a_write_naming_a_node_never_observed_is_denied(store, clock, mode):
    g = Guard(policy(mode=mode, approval=[]), store, "c1", clock)
    d = ask(g, drain("gpu-99"))
    assert (d.decision, d.rule) == ("deny", "observed")
    assert "gpu-99" in d.reason
    assert ask(g).decision == ("allow" if mode == "autonomous" else "dry_run")


def test_a_resubmit_of_an_unseen_job_or_excluding_unseen_nodes_is_denied(store, clock):
    g = Guard(policy(approval=[]), store, "c1", clock)

    def resubmit(job, exclude=()):
        call = ToolCall(tool="resubmit", args={"job": job, "exclude_nodes": list(exclude), "reason": "x"})
        return call, ActionTarget(tool="resubmit", job=job, partition="h100", user="dana", gpus=8)

    assert ask(g, resubmit("48213", [BAD_NODE])).decision == "allow"
    assert ask(g, resubmit("31337")).rule == "observed"
    assert ask(g, resubmit("48213", ["gpu-66"])).rule == "observed"


def test_what_a_tool_returned_counts_as_observed(store, clock):
    g = Guard(policy(approval=[]), store, "c1", clock)
    assert ask(g, drain("gpu-12")).rule == "observed"
    g.saw(INC, ToolCall(tool="list_jobs", args={"node": "gpu-3"}),
          {"text": "...", "rows": [{"job": "555", "state": "RUNNING", "nodes": ["gpu-12", "gpu-13"]}]})
    assert store.observed(INC) >= {("node", "gpu-12"), ("node", "gpu-13"), ("job", "555"), ("node", "gpu-3")}
    assert ask(g, drain("gpu-12")).decision == "allow"


def test_the_trigger_job_is_observed_but_a_chat_message_names_nothing(clock):
    with IncidentStore() as s:
        s.open_incident("c1", "chat", {"kind": "chat", "job": "48213", "text": "please drain gpu-5 now"},
                        incident_id=INC, at=T0)
        g = Guard(policy(approval=[]), s, "c1", clock)
        assert ask(g, drain("gpu-5")).rule == "observed"
        cancel = ToolCall(tool="cancel_job", args={"job": "48213", "reason": "x"})
        assert ask(g, (cancel, ActionTarget(tool="cancel_job", job="48213"))).decision == "allow"


def test_a_store_written_before_incidents_kept_policies_opens_and_refuses_to_guess(tmp_path, clock):
    """An old store (approvals and breaker without the new columns) gains them when opened; an
    incident waiting there has no stored policy, so nobody's flags decide for it."""
    import duckdb

    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE approvals (action_id TEXT, incident_id TEXT, approver TEXT, approved BOOLEAN,"
                ' "at" TIMESTAMP, used BOOLEAN)')
    con.execute("CREATE TABLE breaker (cluster TEXT PRIMARY KEY, tripped BOOLEAN, reason TEXT,"
                " tripped_at TIMESTAMP, reset_by TEXT, reset_at TIMESTAMP)")
    con.execute("INSERT INTO approvals VALUES ('a1', 'old-inc', 'alice', true, '2026-03-01 10:00:00', true)")
    con.execute("INSERT INTO breaker VALUES ('c1', true, 'old trip', '2026-03-01 10:00:00', NULL, NULL)")
    con.close()
    with IncidentStore(path) as s:
        s.open_incident("c1", "test", {"kind": "job_failed", "job": "48213"}, incident_id="old-inc", at=T0)
        [old] = s.get_incident("old-inc").approvals
        assert (old.approver, old.tool, old.policy_sha256, old.os_user) == ("alice", None, None, None)
        assert s.breaker_state("c1").tripped and s.breaker_state("c1").incident_id is None
        s.record_decision("c1", "old-inc", "a2", "node_drain", {"node": BAD_NODE}, "needs_approval",
                          "needs approval", "approval[0]", at=T0, target={"tool": "node_drain", "node": BAD_NODE})
        with pytest.raises(ApprovalError, match="no stored guard policy"):
            Guard(policy(), s, "c1", clock).approve("a2", "old-inc", "alice", True)
        # An answer with no binding (tool, args, policy) is never taken for a bound request.
        assert s.take_approval("a1", "old-inc", tool="node_drain", args={}, policy_sha256="x") is None


# --- a live cluster's own policy is the ceiling ------------------------------------------------


def test_within_the_ceiling_is_the_ceiling_or_it_with_a_stricter_mode():
    from crashcart.agent.guard import MODES, mode_wider, within

    assert MODES == ("observe", "dry_run", "autonomous")
    assert mode_wider("autonomous", "dry_run") and mode_wider("dry_run", "observe")
    assert not mode_wider("observe", "dry_run") and not mode_wider("dry_run", "dry_run")
    own = policy(mode="dry_run")
    assert within(own, own) and within(policy(mode="observe"), own)
    assert not within(policy(mode="autonomous"), own)
    # Anything else that differs is not provably narrower, so it is not within, even when it looks stricter.
    assert not within(policy(mode="dry_run", approvers=["alice", "bob", "mallory"]), own)
    assert not within(policy(mode="dry_run", breaker={"max_drains": 1}), own)


def test_a_live_guard_denies_writes_of_an_incident_stored_above_its_ceiling(store, clock):
    """An incident another target started under a wider policy, in a shared store, acts on nothing here."""
    own = policy(mode="dry_run")
    ask(Guard(policy(mode="autonomous", approval=[]), store, "c1", clock))  # binds the wider policy
    live = Guard(own, store, "c1", clock, ceiling=own)
    d = ask(live)
    assert (d.decision, d.rule) == ("deny", "ceiling")
    assert "nothing it asks for runs on this cluster" in d.reason


def test_a_live_guard_refuses_to_approve_an_incident_above_its_ceiling(store, clock):
    d = ask(Guard(policy(), store, "c1", clock))  # autonomous: the drain waits for alice
    own = policy(mode="dry_run")
    with pytest.raises(ApprovalError, match="is not c1's own"):
        Guard(own, store, "c1", clock, ceiling=own).approve(d.action_id, INC, "alice", True)
    [attempt] = store.approval_attempts(INC)
    assert attempt.outcome == "refused"
    # Under a ceiling that allows it (the cluster's own autonomous policy), the same approval runs.
    assert Guard(policy(), store, "c1", clock, ceiling=policy()).approve(d.action_id, INC, "alice", True).decision == "allow"


def test_a_narrowed_incident_runs_under_its_clusters_ceiling(store, clock):
    own = policy()
    live = Guard(own.model_copy(update={"mode": "observe"}), store, "c1", clock, ceiling=own)
    d = ask(live)
    assert (d.decision, d.rule) == ("deny", "mode:observe")


def test_a_live_breaker_is_reset_only_by_whom_the_clusters_own_policy_names(store, clock):
    """The incident that tripped it ran under a wider policy (a scenario's --guard, naming mallory):
    on the live cluster its own guard (the ceiling) says who resets, and a refusal is journaled."""
    Guard(policy(approvers=["mallory"]), store, "c1", clock).bind(INC)
    store.trip_breaker("c1", "three drains", T0, incident_id=INC)
    own = policy(mode="dry_run", approvers=["alice"])
    live = Guard(own, store, "c1", clock, ceiling=own)
    with pytest.raises(ApprovalError, match="mallory may not reset the circuit breaker; allowed: alice"):
        live.reset_breaker("mallory")
    assert live.breaker_state().tripped
    [attempt] = store.approval_attempts(INC)
    assert (attempt.approver, attempt.outcome, attempt.policy_sha256) == ("mallory", "refused", policy_sha256(own))
    assert live.reset_breaker("alice").reset_by == "alice"


def test_a_scenarios_breaker_is_keyed_apart_from_the_live_cluster_of_its_name(store, clock):
    scenario = Guard(policy(approval=[], breaker={"max_drains": 0}), store, "c1", clock,
                     breaker=scenario_breaker("c1"))
    assert ask(scenario).rule == "breaker:max_drains"
    assert store.breaker_state(scenario_breaker("c1")).tripped
    assert not store.breaker_state("c1").tripped
    assert scenario_breaker("c1") != "c1"
