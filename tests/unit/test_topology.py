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
