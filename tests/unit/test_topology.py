"""Which nodes share a rack or a switch: the label keys that say so, and the peers of a fault on two nodes."""

import pytest

from crashcart.agent.policies.evidence import Evidence
from crashcart.agent.policies.topology import TopologyTableError, load_topology_keys, rack_peers


def _ev(labels: dict[str, dict[str, str]]) -> Evidence:
    ev = Evidence(now=None, trigger={"kind": "job_failed", "job": "j"})
    ev.nodes = {name: {"node": name, "labels": lab} for name, lab in labels.items()}
    return ev


@pytest.mark.parametrize("key", ["rack", "topology.example.com/rack", "ib-leaf", "topology.example.net/leaf-switch",
                                 "tor", "cloud.google.com/gce-topology-subblock", "topology.k8s.aws/network-node-layer-3"])
def test_rack_and_switch_keys_are_shared_ones(key):
    assert load_topology_keys().shared({key: "x"}) == {key: "x"}


@pytest.mark.parametrize("key", ["topology.kubernetes.io/zone", "topology.kubernetes.io/region", "pool",
                                 "nvidia.com/gpu.product", "feature.node.kubernetes.io/rdma.available", "track"])
def test_zones_and_other_labels_are_not(key):
    assert load_topology_keys().shared({key: "x"}) == {}


def test_peers_share_the_value_two_suspects_share():
    ev = _ev({
        "a1": {"rack": "a", "topology.kubernetes.io/zone": "z"}, "a2": {"rack": "a", "topology.kubernetes.io/zone": "z"},
        "a3": {"rack": "a", "topology.kubernetes.io/zone": "z"}, "b1": {"rack": "b", "topology.kubernetes.io/zone": "z"},
        "c1": {},
    })
    assert rack_peers(["a1", "a2"], ev) == ["a3"]


def test_suspects_in_different_racks_have_no_peers():
    ev = _ev({"a1": {"rack": "a"}, "b1": {"rack": "b"}, "a2": {"rack": "a"}, "b2": {"rack": "b"}})
    assert rack_peers(["a1", "b1"], ev) == []


def test_a_bad_table_is_a_clear_error(tmp_path):
    bad = tmp_path / "topology_labels.yaml"
    bad.write_text("keys: ['rack(']\n")
    with pytest.raises(TopologyTableError, match="does not compile"):
        load_topology_keys(str(bad))


FLAP = "mlx5_core 0000:3c:00.0 ibp60s0: Link down\nmlx5_core 0000:3c:00.0 ibp60s0: Link up\nmlx5_core 0000:3c:00.0 ibp60s0: Link down\n"


def _obs(tool, args, text="", **data):
    return {"tool": tool, "args": args, "ok": True, "data": data, "text": text}


def _flap_state(flapping: list[str], listed: bool) -> dict:
    from datetime import datetime, timezone
    pod = {"job": "lm-0", "name": "lm", "state": "Failed", "nodes": ["a1", "a2", "b1"], "gpus": 24,
           "end_time": datetime(2026, 1, 1, 10, tzinfo=timezone.utc).isoformat()}
    obs = [_obs("kubectl_describe", {"kind": "pod", "name": "lm-0"}, "Name: lm-0", job=pod),
           _obs("get_logs", {"job": "lm-0"}, "NCCL WARN NET/IB : Got async event : port error\n")]
    obs += [_obs("kernel_log", {"node": n}, FLAP if n in flapping else "clean\n") for n in ("a1", "a2", "b1")]
    if listed:
        rows = [{"node": n, "state": "idle", "gpus": 8, "labels": {"rack": n[0]}} for n in ("a1", "a2", "a3", "a4", "b1", "b2")]
        obs.append(_obs("kubectl_get_nodes", {}, "NAME", rows=rows))
    return {"observations": obs, "trigger": {"kind": "job_failed", "job": "lm-0"}, "backend": "kubernetes"}


def _next(state):
    from crashcart.agent.policies.playbook import PlaybookPolicy
    return [(c.tool, c.args) for c in PlaybookPolicy().next_calls(state, None, "kubernetes")]


def test_two_flapping_nodes_of_a_rack_read_the_rest_of_it_and_list_no_victims_yet():
    assert ("kubectl_get_nodes", {}) in _next(_flap_state(["a1", "a2"], listed=False))
    calls = _next(_flap_state(["a1", "a2"], listed=True))
    assert ("kernel_log", {"node": "a3"}) in calls and ("kernel_log", {"node": "a4"}) in calls
    assert not any(t == "list_jobs" or a.get("node", "").startswith("b") for t, a in calls)


def test_one_flapping_node_reads_no_rack_peers():
    calls = _next(_flap_state(["a1"], listed=False))
    assert ("kubectl_get_nodes", {}) not in calls
    assert not any(t == "kernel_log" for t, _ in calls)
