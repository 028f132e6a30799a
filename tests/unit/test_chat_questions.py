"""A person's question (a `chat` trigger, as Slack or `investigate --text` sends it) names a job by
id or by name, or a node; what it names that the cluster has nothing called gets "could not
tell", never "healthy"."""

from __future__ import annotations

import pytest

from crashcart.agent.guard import policy_from_dict
from crashcart.agent.policies import make_policy
from crashcart.agent.policies.evidence import ENTITY_NAME
from crashcart.agent.runner import make_deps, start_incident
from crashcart.agent.store import IncidentStore
from crashcart.evals.scenario import BUNDLED_DIR, load_scenario
from crashcart.tools.backends.fixture import FixtureBackend

SCENARIO = BUNDLED_DIR / "hardware" / "xid79-guarded-drain-needs-approval.yaml"


def ask(text: str) -> dict:
    sc = load_scenario(SCENARIO)
    deps = make_deps(FixtureBackend(sc.cluster, sc.backend), make_policy("playbook"),
                     policy_from_dict({**sc.guard, "mode": "observe"}), IncidentStore(), cluster="c", notifiers=[])
    return start_incident(deps, {"kind": "chat", "text": text}, cluster="c", source="test").state


@pytest.mark.parametrize("text, names", [
    ("what killed llama-70b last night?", ["llama-70b"]),
    ("is gpu-b07 healthy?", ["gpu-b07"]),
    ("why is 48213 pending?", ["48213"]),
    ("node_12 and sxm-h100-33, since 2026-03-02 03:00", ["node_12", "sxm-h100-33"]),
    ("the A100s in fp16 with NCCL_SOCKET_IFNAME", []),
])
def test_what_a_question_names(text, names):
    assert ENTITY_NAME.findall(text) == names


def test_a_job_asked_about_by_its_name_is_investigated():
    d = ask("what killed llama3-13b-dense-pretrain last night?")["diagnosis"]
    assert (d["label"], d["root_cause"]) == ("gpu_fallen_off_bus", "node:sxm-h100-33")


def test_a_node_asked_about_by_name_is_looked_at():
    state = ask("is sxm-h100-33 healthy?")
    assert (state["diagnosis"]["label"], state["diagnosis"]["root_cause"]) == ("gpu_fallen_off_bus", "node:sxm-h100-33")
    assert {"kernel_log", "nvidia_smi_query"} <= {o["tool"] for o in state["observations"]
                                                  if o["args"].get("node") == "sxm-h100-33"}


def test_a_clean_node_asked_about_is_healthy_about_that_node():
    d = ask("is sxm-h100-31 healthy?")["diagnosis"]
    assert (d["label"], d["root_cause"]) == ("healthy", "node:sxm-h100-31")


@pytest.mark.parametrize("text, name", [("what killed llama-70b last night?", "llama-70b"),
                                        ("is gpu-b07 healthy?", "gpu-b07")])
def test_something_the_cluster_has_nothing_called_is_could_not_tell(text, name):
    d = ask(text)["diagnosis"]
    assert d["label"] == "unrecognized" and d["label"] != "healthy"
    assert name in d["summary"] and "could not tell" in d["summary"]
    assert d["confidence"] < 0.5
