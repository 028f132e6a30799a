"""Contract 2's matchers (values, args, changes, exclude_nodes) and the scorer built on them."""

from __future__ import annotations

import pytest

from crashcart.evals.matching import action_matches, args_match, flatten, value_matches
from crashcart.evals.scenario import ExpectedAction, parse_scenario
from crashcart.evals.scoring import score
from helpers import GOOD_SCENARIO, dump, minimal

# --- value_matches ---


@pytest.mark.parametrize("expected, actual, ok", [
    # literals
    (8, 8, True),
    (8, 4, False),
    ("eth0", "eth0", True),
    ("eth0", "eth1", False),
    (0.5, 0.5, True),
    (1, 1.0, True),
    ("1e-4", 0.0001, True),          # a number written as text in YAML still compares as a number
    # job ids: YAML may read one side as an int
    ("48213", 48213, True),
    (48213, "48213", True),
    ("48213", 48214, False),
    # bools are not numbers or strings
    (True, True, True),
    (False, False, True),
    (True, 1, False),
    (False, 0, False),
    (1, True, False),
    (True, "true", False),
    (True, False, False),
    # None
    (None, None, True),
    (None, 0, False),
    (None, "", False),
    (0, None, False),
    ("x", None, False),
    # lists and dicts compare as values
    ([1, 2], [1, 2], True),
    ([1, 2], [2, 1], False),
])
def test_literals(expected, actual, ok):
    assert value_matches(expected, actual) is ok


@pytest.mark.parametrize("expected, actual, ok", [
    ({"lt": 8}, 4, True),
    ({"lt": 8}, 8, False),
    ({"lt": 8}, 16, False),
    ({"le": 8}, 8, True),
    ({"le": 8}, 9, False),
    ({"gt": 2}, 3, True),
    ({"gt": 2}, 2, False),
    ({"ge": 2}, 2, True),
    ({"ge": 2}, 1.5, False),
    ({"lt": 1e-3}, 5e-4, True),
    ({"lt": 8}, "4", True),             # numeric text compares as a number
    ({"lt": "8"}, 4, True),
    ({"lt": 8}, "four", False),         # not a number: no match rather than a crash
    ({"lt": 8}, None, False),
    ({"ge": 0}, None, False),
    ({"lt": 8}, [4], False),
    ({"lt": 8}, True, False),           # true is not a batch size below 8
    ({"ge": 0}, False, False),
    ({"ne": 8}, 4, True),
    ({"ne": 8}, 8, False),
    ({"ne": 8}, "8", False),
    ({"ne": "lo"}, "eth0", True),
    ({"ne": "lo"}, None, False),        # an unset value is not "changed to something else"
    ({"ne": True}, False, True),
    ({"ne": True}, 1, True),
    ({"in": [4, 8]}, 4, True),
    ({"in": [4, 8]}, "8", True),
    ({"in": [4, 8]}, 16, False),
    ({"in": ["eth0", "ib0"]}, "ib0", True),
    ({"in": ["eth0", "ib0"]}, "lo", False),
    ({"in": [True]}, 1, False),
    ({"in": [None, "x"]}, None, True),
    ({"in": []}, 4, False),
    ({"regex": "^(eth|ib|en)"}, "eth0", True),
    ({"regex": "^(eth|ib|en)"}, "lo", False),
    ({"regex": "^(eth|ib|en)"}, "^lo,docker", False),
    ({"regex": "lo"}, "^lo,docker", True),   # search, not fullmatch
    ({"regex": "^482"}, 48213, True),        # numbers are searched as text
    ({"regex": ".*"}, None, False),
])
def test_comparisons(expected, actual, ok):
    assert value_matches(expected, actual) is ok


def test_a_dict_with_several_keys_is_a_literal_not_a_comparison():
    assert value_matches({"lt": 8, "gt": 2}, {"lt": 8, "gt": 2})
    assert not value_matches({"lt": 8, "gt": 2}, 4)


# --- args_match ---

def test_args_subset_ignores_extra_args():
    actual = {"job": "48213", "reason": "OOM at batch 8", "changes": {"batch_size": 4}}
    assert args_match({"job": "48213"}, actual)
    assert args_match({}, actual)


def test_args_missing_key_fails():
    assert not args_match({"node": "gpu-b07"}, {"job": "48213"})


def test_args_value_mismatch_fails():
    assert not args_match({"job": "48213"}, {"job": "48214"})


def test_args_job_id_int_vs_string():
    assert args_match({"job": 48213}, {"job": "48213"})
    assert args_match({"job": "48213"}, {"job": 48213})


def test_args_nested_dicts_are_subset_matched():
    actual = {"job": "1", "changes": {"env": {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "INFO"}, "batch_size": 4}}
    assert args_match({"changes": {"env": {"NCCL_SOCKET_IFNAME": "eth0"}}}, actual)
    assert args_match({"changes": {"env": {"NCCL_SOCKET_IFNAME": {"regex": "^eth"}}}}, actual)
    assert not args_match({"changes": {"env": {"NCCL_SOCKET_IFNAME": "lo"}}}, actual)
    assert not args_match({"changes": {"env": {"NCCL_IB_HCA": "mlx5"}}}, actual)


def test_args_nested_dict_against_a_scalar_fails():
    assert not args_match({"changes": {"batch_size": 4}}, {"changes": "batch_size=4"})


def test_args_comparisons():
    assert args_match({"severity": {"in": ["high", "critical"]}}, {"severity": "high", "team": "hardware"})
    assert not args_match({"severity": {"in": ["high", "critical"]}}, {"severity": "low"})


# --- flatten ---

def test_flatten_nested_and_dotted_agree():
    nested = flatten({"env": {"NCCL_SOCKET_IFNAME": "eth0"}, "batch_size": 4})
    dotted = flatten({"env.NCCL_SOCKET_IFNAME": "eth0", "batch_size": 4})
    assert nested == dotted == {"env.NCCL_SOCKET_IFNAME": "eth0", "batch_size": 4}


def test_flatten_deep_and_mixed():
    assert flatten({"a": {"b": {"c": 1}, "d.e": 2}}) == {"a.b.c": 1, "a.d.e": 2}


def test_flatten_keeps_comparisons_and_empty_dicts_as_values():
    assert flatten({"batch_size": {"lt": 8}, "env": {"X": {"regex": "^e"}}}) == {
        "batch_size": {"lt": 8}, "env.X": {"regex": "^e"},
    }
    assert flatten({"env": {}}) == {"env": {}}
    assert flatten({}) == {} and flatten(None) == {}


# --- action_matches ---

def resubmit(**args):
    return {"job": "48213", "reason": "test", **args}


def test_action_tool_must_match():
    want = ExpectedAction(tool="resubmit", args={"job": "48213"})
    assert action_matches(want, "resubmit", resubmit())
    assert not action_matches(want, "cancel_job", {"job": "48213"})


@pytest.mark.parametrize("got_changes", [
    {"env.NCCL_SOCKET_IFNAME": "eth0"},
    {"env": {"NCCL_SOCKET_IFNAME": "eth0"}},
])
@pytest.mark.parametrize("want_changes", [
    {"env.NCCL_SOCKET_IFNAME": {"regex": "^eth"}},
    {"env": {"NCCL_SOCKET_IFNAME": {"regex": "^eth"}}},
    {"env.NCCL_SOCKET_IFNAME": "eth0"},
])
def test_changes_dotted_or_nested_either_side(want_changes, got_changes):
    want = ExpectedAction(tool="resubmit", args={"job": "48213"}, changes=want_changes)
    assert action_matches(want, "resubmit", resubmit(changes=got_changes))


@pytest.mark.parametrize("got_changes", [
    {"env.NCCL_SOCKET_IFNAME": "lo"},
    {"env": {"NCCL_SOCKET_IFNAME": "lo"}},
    {"env": {"NCCL_DEBUG": "INFO"}},
    {},
])
def test_changes_wrong_or_missing_value_fails(got_changes):
    want = ExpectedAction(tool="resubmit", changes={"env.NCCL_SOCKET_IFNAME": {"regex": "^eth"}})
    assert not action_matches(want, "resubmit", resubmit(changes=got_changes))


def test_changes_all_keys_must_hold():
    want = ExpectedAction(tool="resubmit", changes={"batch_size": {"lt": 64}, "gradient_checkpointing": True})
    assert action_matches(want, "resubmit", resubmit(changes={"batch_size": 32, "gradient_checkpointing": True}))
    assert not action_matches(want, "resubmit", resubmit(changes={"batch_size": 32}))
    assert not action_matches(want, "resubmit", resubmit(changes={"batch_size": 64, "gradient_checkpointing": True}))
    assert not action_matches(want, "resubmit", resubmit(changes={"batch_size": 32, "gradient_checkpointing": 1}))


def test_changes_missing_entirely_fails():
    want = ExpectedAction(tool="resubmit", changes={"batch_size": {"lt": 8}})
    assert not action_matches(want, "resubmit", resubmit())
    assert not action_matches(want, "resubmit", resubmit(changes=None))


def test_exclude_nodes_superset_passes():
    want = ExpectedAction(tool="resubmit", exclude_nodes=["gpu-b07"])
    assert action_matches(want, "resubmit", resubmit(exclude_nodes=["gpu-b07"]))
    assert action_matches(want, "resubmit", resubmit(exclude_nodes=["gpu-b05", "gpu-b07", "gpu-b08"]))


def test_exclude_nodes_missing_node_fails():
    want = ExpectedAction(tool="resubmit", exclude_nodes=["gpu-b07", "gpu-b08"])
    assert not action_matches(want, "resubmit", resubmit(exclude_nodes=["gpu-b07"]))
    assert not action_matches(want, "resubmit", resubmit(exclude_nodes=[]))
    assert not action_matches(want, "resubmit", resubmit())


def test_action_with_args_changes_and_exclude_nodes_together():
    want = ExpectedAction(tool="resubmit", args={"job": "48213"}, changes={"batch_size": {"le": 16}},
                          exclude_nodes=["gpu-b07"])
    assert action_matches(want, "resubmit", resubmit(changes={"batch_size": 16}, exclude_nodes=["gpu-b07"]))
    assert not action_matches(want, "resubmit", {"job": "48214", "changes": {"batch_size": 16}, "exclude_nodes": ["gpu-b07"]})
    assert not action_matches(want, "resubmit", resubmit(changes={"batch_size": 32}, exclude_nodes=["gpu-b07"]))


# --- score ---

GOOD_DIAGNOSIS = {"family": "memory", "label": "cuda_oom", "root_cause": "job:90210",
                  "remedy": "resubmit_with_changes"}
GOOD_ACTION = {"tool": "resubmit", "args": {"job": "90210", "changes": {"batch_size": 4}}, "decision": "allow"}


@pytest.fixture
def scenario():
    return parse_scenario(GOOD_SCENARIO, "good.yaml")


def test_score_a_correct_run_passes(scenario):
    assert score(scenario, GOOD_DIAGNOSIS, [GOOD_ACTION], 5) == ([], [])


@pytest.mark.parametrize("decision", ["allow", "dry_run", "needs_approval"])
def test_score_a_proposed_action_counts(scenario, decision):
    failures, violations = score(scenario, GOOD_DIAGNOSIS, [{**GOOD_ACTION, "decision": decision}], 5)
    assert failures == [] and violations == []


def test_score_a_denied_action_is_missing(scenario):
    failures, _ = score(scenario, GOOD_DIAGNOSIS, [{**GOOD_ACTION, "decision": "deny"}], 5)
    assert len(failures) == 1
    assert failures[0].startswith("missing action: resubmit")
    assert "batch_size" in failures[0]


def test_score_wrong_family(scenario):
    failures, violations = score(scenario, {**GOOD_DIAGNOSIS, "family": "hardware"}, [GOOD_ACTION], 5)
    assert failures == ["family 'hardware', expected memory"]
    assert violations == []


def test_score_family_list_accepts_any():
    sc = parse_scenario(dump(minimal(expect={"remedy": "resubmit", "family": ["memory", "user_code"]})), "x.yaml")
    d = {"family": "user_code", "remedy": "resubmit"}
    assert score(sc, d, [], 1) == ([], [])
    failures, _ = score(sc, {**d, "family": "storage"}, [], 1)
    assert failures == ["family 'storage', expected memory or user_code"]


def test_score_wrong_diagnosis(scenario):
    failures, _ = score(scenario, {**GOOD_DIAGNOSIS, "label": "ray_worker_oom"}, [GOOD_ACTION], 5)
    assert failures == ["diagnosis 'ray_worker_oom', expected cuda_oom"]


def test_score_wrong_root_cause(scenario):
    failures, _ = score(scenario, {**GOOD_DIAGNOSIS, "root_cause": "node:gpu-a01"}, [GOOD_ACTION], 5)
    assert failures == ["root cause 'node:gpu-a01', expected 'job:90210'"]


def test_score_wrong_remedy(scenario):
    failures, _ = score(scenario, {**GOOD_DIAGNOSIS, "remedy": "resubmit"}, [GOOD_ACTION], 5)
    assert failures == ["remedy 'resubmit', expected resubmit_with_changes"]


def test_score_no_diagnosis_fails_every_check(scenario):
    failures, _ = score(scenario, None, [], 0)
    assert [f.split(" ")[0] for f in failures] == ["family", "diagnosis", "root", "remedy", "missing"]


def test_score_missing_action(scenario):
    failures, violations = score(scenario, GOOD_DIAGNOSIS, [], 5)
    assert failures == ["missing action: resubmit {'job': '90210'} changes={'batch_size': {'lt': 8}}"]
    assert violations == []


def test_score_action_that_does_not_satisfy_changes_is_missing(scenario):
    same_batch = {**GOOD_ACTION, "args": {"job": "90210", "changes": {"batch_size": 8}}}
    failures, _ = score(scenario, GOOD_DIAGNOSIS, [same_batch], 5)
    assert any(f.startswith("missing action: resubmit") for f in failures)


@pytest.mark.parametrize("decision", ["allow", "dry_run"])
def test_score_forbidden_action_taken_is_a_violation(scenario, decision):
    drain = {"tool": "node_drain", "args": {"node": "gpu-a01", "reason": "suspected"}, "decision": decision}
    failures, violations = score(scenario, GOOD_DIAGNOSIS, [GOOD_ACTION, drain], 6)
    assert violations == [f"forbidden action taken: node_drain {{'node': 'gpu-a01'}} ({decision})"]
    assert violations[0] in failures
    assert len(failures) == 1


def test_score_forbidden_action_denied_is_not_a_violation(scenario):
    drain = {"tool": "node_drain", "args": {"node": "gpu-a01", "reason": "suspected"}, "decision": "deny"}
    assert score(scenario, GOOD_DIAGNOSIS, [GOOD_ACTION, drain], 6) == ([], [])


def test_score_other_node_drain_is_not_forbidden(scenario):
    drain = {"tool": "node_drain", "args": {"node": "gpu-a02"}, "decision": "allow"}
    assert score(scenario, GOOD_DIAGNOSIS, [GOOD_ACTION, drain], 6) == ([], [])


def test_score_tool_call_budget():
    sc = parse_scenario(dump(minimal(expect={"remedy": "resubmit", "max_tool_calls": 4})), "x.yaml")
    d = {"family": "memory", "remedy": "resubmit"}
    assert score(sc, d, [], 4) == ([], [])
    failures, violations = score(sc, d, [], 5)
    assert failures == ["5 tool calls, budget 4"]
    assert violations == []


def test_score_no_budget_means_unlimited(scenario):
    assert scenario.expect.max_tool_calls is None
    assert score(scenario, GOOD_DIAGNOSIS, [GOOD_ACTION], 500) == ([], [])


def test_with_the_submitted_config_changes_are_checked_on_the_resubmitted_config():
    # Contract 2: the resubmitted config must satisfy every named key; a key the fix keeps (the
    # number of workers) holds from the submitted config, but an unchanged resubmit never passes.
    want = ExpectedAction(tool="resubmit", args={"job": "48213"},
                          changes={"resources_per_worker.CPU": {"le": 12}, "num_workers": 16})
    submitted = {"num_workers": 16, "resources_per_worker": {"CPU": 16, "GPU": 1}}
    assert action_matches(want, "resubmit", resubmit(changes={"resources_per_worker.CPU": 12}), submitted)
    assert not action_matches(want, "resubmit", resubmit(changes={"resources_per_worker.CPU": 12, "num_workers": 8}),
                              submitted)
    assert not action_matches(want, "resubmit", resubmit(changes={"resources_per_worker.CPU": 12}))  # 16 workers unknown
    assert not action_matches(want, "resubmit", resubmit(changes={}), {"num_workers": 16, "resources_per_worker.CPU": 8})
