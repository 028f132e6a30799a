"""The loopback API server speaks the wire format the official client expects: its typed
models deserialize what it sends, and selectors, watches, evictions and logs behave as on
a real API server."""

from __future__ import annotations

import threading

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

import kubeseed as k


@pytest.fixture
def v1(lab):
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(lab.kubeconfig), context="loopback", client_configuration=cfg)
    api = client.ApiClient(cfg)
    yield client.CoreV1Api(api)
    api.close()


def test_typed_models_read_seeded_objects(lab, v1):
    n = lab.add(k.node("gpu-a01"))
    lab.add(k.node("gpu-a02", ready=False))
    p = lab.add(k.pod("llama-0", state=k.waiting("CrashLoopBackOff", "back-off 5m0s restarting failed container=trainer"),
                      last_state=k.terminated("OOMKilled", 137, k.ago(minutes=9), k.ago(minutes=6)), restarts=4))
    lab.add(k.event(p, "BackOff", "Back-off restarting failed container trainer in pod llama-0_train(x)", count=12))
    nodes = v1.list_node()
    assert [x.metadata.name for x in nodes.items] == ["gpu-a01", "gpu-a02"]
    assert nodes.items[0].status.allocatable["nvidia.com/gpu"] == "8"
    assert [c.status for c in nodes.items[1].status.conditions if c.type == "Ready"] == ["Unknown"]
    assert int(nodes.metadata.resource_version) >= int(n["metadata"]["resourceVersion"])
    pod = v1.read_namespaced_pod("llama-0", "train")
    assert pod.metadata.uid and pod.metadata.creation_timestamp is not None
    cs = pod.status.container_statuses[0]
    assert (cs.last_state.terminated.reason, cs.last_state.terminated.exit_code, cs.restart_count) == ("OOMKilled", 137, 4)
    assert v1.list_namespaced_event("train").items[0].involved_object.name == "llama-0"
    assert client.VersionApi(v1.api_client).get_code().git_version.startswith("v1.")


def test_selectors_filter_and_unknown_field_labels_are_refused(lab, v1):
    lab.add(k.pod("a", node_name="gpu-a01", labels={"user": "dana", "team": "llm"}))
    lab.add(k.pod("b", node_name="gpu-a02", labels={"user": "lee"}))
    lab.add(k.pod("c", node_name=None, phase="Pending", unschedulable_message="0/2 nodes are available"))
    names = lambda r: sorted(p.metadata.name for p in r.items)  # noqa: E731
    assert names(v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-a01")) == ["a"]
    assert names(v1.list_pod_for_all_namespaces(field_selector="status.phase!=Running")) == ["c"]
    assert names(v1.list_pod_for_all_namespaces(label_selector="user in (dana,lee),!team")) == ["b", "c"]
    assert names(v1.list_pod_for_all_namespaces(label_selector="team")) == ["a"]
    with pytest.raises(ApiException) as e:
        v1.list_pod_for_all_namespaces(field_selector="spec.containers=x")
    assert e.value.status == 400 and "field label not supported" in e.value.body


def test_not_found_is_a_status(lab, v1):
    with pytest.raises(ApiException) as e:
        v1.read_namespaced_pod("nope", "train")
    assert e.value.status == 404
    assert '"reason": "NotFound"' in e.value.body and 'pods \\"nope\\" not found' in e.value.body


def test_watch_streams_changes_from_a_resource_version_with_bookmarks(lab, v1):
    lab.add(k.pod("a"))
    rv = v1.list_namespaced_pod("train").metadata.resource_version

    def during_the_watch():
        # Once the watch is open, not after a fixed delay: a loaded machine may be slower than any.
        with lab.store.cond:
            assert lab.store.cond.wait_for(lambda: lab.store.watches, timeout=60)
        lab.add(k.pod("b"))
    adder = threading.Thread(target=during_the_watch)
    adder.start()
    seen = [(e["type"], e["raw_object"]["metadata"].get("name"))
            for e in watch.Watch().stream(v1.list_namespaced_pod, "train", resource_version=rv,
                                          allow_watch_bookmarks=True, timeout_seconds=3)]
    adder.join()
    assert seen[0] == ("ADDED", "b")
    assert seen[-1][0] == "BOOKMARK"


def test_watch_from_a_compacted_version_is_410_gone(lab, v1):
    lab.add(k.pod("a"))
    rv = v1.list_namespaced_pod("train").metadata.resource_version
    lab.add(k.pod("b"))
    lab.store.compact()
    with pytest.raises(ApiException) as e:
        list(watch.Watch().stream(v1.list_namespaced_pod, "train", resource_version=rv, timeout_seconds=1))
    assert e.value.status == 410 and "Expired" in e.value.reason


def test_eviction_respects_a_disruption_budget(lab, v1):
    lab.add(k.pod("serve-0", labels={"app": "serve"}))
    lab.add(k.pdb("serve-pdb", "train", {"app": "serve"}, allowed=0))
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name="serve-0", namespace="train"))
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_pod_eviction("serve-0", "train", body)
    assert e.value.status == 429 and "DisruptionBudget" in e.value.body
    lab.update(lab.get("policy/v1", "PodDisruptionBudget", "train", "serve-pdb"),
               lambda o: o["status"].update(disruptionsAllowed=1))
    v1.create_namespaced_pod_eviction("serve-0", "train", body)
    assert lab.all("v1", "Pod") == []


def test_logs_previous_tail_and_missing_previous(lab, v1):
    lab.add(k.pod("llama-0", restarts=1, last_state=k.terminated("Error", 1, k.ago(minutes=5), k.ago(minutes=4))))
    lab.store.set_log("train", "llama-0", "step 1\nstep 2\nstep 3")
    lab.store.set_log("train", "llama-0", "Traceback (most recent call last):\nValueError: bad", previous=True)
    assert v1.read_namespaced_pod_log("llama-0", "train", tail_lines=2) == "step 2\nstep 3\n"
    assert "ValueError" in v1.read_namespaced_pod_log("llama-0", "train", previous=True)
    lab.add(k.pod("fresh"))
    with pytest.raises(ApiException) as e:
        v1.read_namespaced_pod_log("fresh", "train", previous=True)
    assert e.value.status == 400 and "previous terminated container" in e.value.body


def test_job_delete_orphans_pods_unless_propagated(lab):
    j = lab.add(k.job("etl"))
    lab.add(k.pod("etl-abcde", owner=j))
    lab.store.delete(lab.store.resource_of("batch/v1", "Job"), "train", "etl")
    assert [p["metadata"].get("ownerReferences") for p in lab.all("v1", "Pod")] == [[]]
    j2 = lab.add(k.job("etl2"))
    lab.add(k.pod("etl2-fghij", owner=j2))
    lab.store.delete(lab.store.resource_of("batch/v1", "Job"), "train", "etl2", "Background")
    assert [p["metadata"]["name"] for p in lab.all("v1", "Pod")] == ["etl-abcde"]
