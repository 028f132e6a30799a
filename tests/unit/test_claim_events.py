"""A claim's events belong to the job whose pod spec mounts it, whatever the claim is called."""

from crashcart.agent.policies.evidence import build_evidence, mounted_claims


def test_claims_are_read_from_the_pod_specs_volumes():
    vol = [{"name": "d", "persistentVolumeClaim": {"claimName": "corpus"}}, {"name": "shm", "emptyDir": {}}]
    assert mounted_claims({"volumes": vol}) == ["corpus"]
    assert mounted_claims({"spec": {"volumes": vol}}) == ["corpus"]
    assert mounted_claims({"template": {"spec": {"volumes": vol}}}) == ["corpus"]
    assert mounted_claims({"volumes": "corpus"}) == [] and mounted_claims({}) == []


def _obs(tool, args, **data):
    return {"tool": tool, "args": args, "ok": True, "data": data, "text": ""}


def test_a_claims_events_are_about_the_job_mounting_it():
    obs = [
        _obs("kubectl_describe", {"kind": "pod", "name": "p-0"}, job={"job": "p-0", "name": "p", "state": "Pending"}),
        _obs("job_config", {"job": "p-0"}, config={"spec": {"volumes": [{"persistentVolumeClaim": {"claimName": "shared-ds"}}]}}),
        _obs("kubectl_events", {"object": "persistentvolumeclaim/shared-ds"}, events=[
            {"object": "persistentvolumeclaim/ns/shared-ds", "type": "Warning", "reason": "ProvisioningFailed",
             "message": 'storageclass.storage.k8s.io "x" not found'},
            {"object": "persistentvolumeclaim/ns/other-claim", "type": "Warning", "reason": "ProvisioningFailed",
             "message": 'storageclass.storage.k8s.io "y" not found'}]),
    ]
    ev = build_evidence(obs, {"kind": "job_pending", "job": "p-0"}, None)
    assert [d.entity for d in ev.docs if d.source == "events"] == ["job:p-0", "job:other-claim"]
