"""A plain Ray cluster (no KubeRay) answers a kubectl_* tool that it has no Kubernetes API: after
that answer the playbooks' kubectl steps (a pending job's cluster-wide events) are not asked again."""

from __future__ import annotations

from crashcart.agent.policies.evidence import NO_KUBERNETES_API, build_evidence
from crashcart.agent.policies.playbook import PlaybookPolicy
from crashcart.tools.backends.ray._backend import NO_KUBERNETES

JOB = "raysubmit_abc123"
TRIGGER = {"kind": "job_pending", "job": JOB, "node": None, "text": None}


def _observations(events_answer: str) -> list[dict]:
    return [
        {"tool": "ray_job_status", "args": {"job": JOB}, "ok": True,
         "text": f"Status for job '{JOB}': PENDING\nStatus message: Job has not started yet.",
         "data": {"status": "PENDING"}},
        {"tool": "kubectl_events", "args": {"object": "cpt-run"}, "ok": True, "text": events_answer,
         "data": {"events": []}},
    ]


def _next_tools(events_answer: str) -> list[str]:
    state = {"trigger": TRIGGER, "observations": _observations(events_answer)}
    return [c.tool for c in PlaybookPolicy().next_calls(state, None, "ray")]


def test_the_marker_is_the_ray_backends_own_answer():
    assert NO_KUBERNETES_API.search(f"kubectl get events: {NO_KUBERNETES}")
    assert build_evidence(_observations(f"kubectl get events: {NO_KUBERNETES}"), TRIGGER, None).no_kubernetes


def test_a_plain_ray_cluster_is_not_asked_for_its_kubernetes_events_again():
    tools = _next_tools(f"kubectl get events: {NO_KUBERNETES}")
    assert "ray_autoscaler_status" in tools
    assert not [t for t in tools if t.startswith("kubectl_")]


def test_under_kuberay_the_cluster_events_are_still_read():
    # "No resources found." is Kubernetes answering: the RayJob has no events of its own.
    assert "kubectl_events" in _next_tools("No resources found.")
