"""A shared-storage error confined to one node is that node's fault, not a storage outage.

Every job that shows the error ran on one common node, and jobs on other nodes of the same
partition ran fine over the same hours: the policy drains that node and reruns elsewhere instead
of paging storage. One more victim on another node, no healthy witness, a single victim, or a
label that does not allow the scoping keeps the verdict where it was.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from crashcart.agent.policies.evidence import build_evidence
from crashcart.agent.policies.matching import match_label
from crashcart.agent.policies.playbook import PlaybookPolicy
from crashcart.agent.policies.scope import error_jobs, one_node
from crashcart.playbooks import load_playbooks
from crashcart.playbooks._model import OneNode

NOW = datetime(2027, 3, 9, 12, 0, tzinfo=timezone.utc)
ENOTCONN = "OSError: [Errno 107] Transport endpoint is not connected: '/mnt/data/shard-{n}.tar'"
ESTALE = "OSError: [Errno 116] Stale file handle: '/nfs/data/part-{n}.parquet'"


def _row(job: str, nodes: list[str], state: str = "FAILED", partition: str = "gpu",
         started_h: float = 5, ended_h: float | None = 1) -> dict[str, Any]:
    row = {"job": job, "state": state, "partition": partition, "nodes": nodes,
           "start_time": (NOW - timedelta(hours=started_h)).isoformat()}
    if ended_h is not None:
        row["end_time"] = (NOW - timedelta(hours=ended_h)).isoformat()
    return row


def _state(rows: list[dict[str, Any]], logs: dict[str, str], kernel: dict[str, str] | None = None,
           focus: str = "a") -> dict[str, Any]:
    obs = [{"tool": "list_jobs", "args": {"partition": "gpu"}, "ok": True, "data": {"rows": rows}, "text": ""}]
    obs += [{"tool": "get_logs", "args": {"job": j}, "ok": True, "data": {}, "text": t} for j, t in logs.items()]
    obs += [{"tool": "kernel_log", "args": {"node": n}, "ok": True, "data": {}, "text": t}
            for n, t in (kernel or {}).items()]
    return {"observations": obs, "trigger": {"kind": "job_failed", "job": focus}, "backend": "slurm"}


def _diagnose(state: dict[str, Any]):
    return PlaybookPolicy().diagnose(state, NOW)


def _drained(actions) -> list[str]:
    return [c.args["node"] for c in actions if c.tool == "node_drain"]


# Job a (3 nodes) and job b (n3 only) fail reading the mount; job c on n4 finished fine meanwhile.
CONFINED = [_row("a", ["n1", "n2", "n3"]), _row("b", ["n3"], started_h=3, ended_h=2.5),
            _row("c", ["n4"], state="COMPLETED", started_h=4, ended_h=2)]


def test_fuse_error_confined_to_one_node_drains_that_node():
    diagnosis, actions = _diagnose(_state(CONFINED, {"a": ENOTCONN.format(n=1), "b": ENOTCONN.format(n=2)}))
    assert diagnosis.label == "mount_unresponsive"
    assert (diagnosis.root_cause, diagnosis.remedy) == ("node:n3", "exclude_node")
    assert _drained(actions) == ["n3"]
    resubmit = next(c for c in actions if c.tool == "resubmit")
    assert resubmit.args["job"] == "a" and resubmit.args["exclude_nodes"] == ["n3"]
    assert any(c.tool == "escalate" and c.args["team"] == "storage" for c in actions)
    assert "every job with this error ran on n3" in diagnosis.evidence[0]


def test_the_same_error_on_another_node_is_an_outage():
    rows = CONFINED + [_row("d", ["n5"], started_h=2, ended_h=1.5)]
    logs = {"a": ENOTCONN.format(n=1), "b": ENOTCONN.format(n=2), "d": ENOTCONN.format(n=3)}
    diagnosis, actions = _diagnose(_state(rows, logs))
    assert (diagnosis.root_cause, diagnosis.remedy) == ("cluster", "escalate_storage")
    assert _drained(actions) == []


def test_without_a_healthy_job_elsewhere_the_node_is_not_blamed():
    rows = [r for r in CONFINED if r["job"] != "c"]
    diagnosis, actions = _diagnose(_state(rows, {"a": ENOTCONN.format(n=1), "b": ENOTCONN.format(n=2)}))
    assert diagnosis.root_cause == "cluster" and _drained(actions) == []


@pytest.mark.parametrize("witness", [
    _row("c", ["n4"], state="COMPLETED", started_h=30, ended_h=20),           # done before the victims ran
    _row("c", ["n4"], state="COMPLETED", partition="cpu", started_h=4, ended_h=2),  # other partition
    _row("c", ["n4"], state="FAILED", started_h=4, ended_h=2),                # not healthy itself
    _row("c", ["n3"], state="COMPLETED", started_h=4, ended_h=2),             # on the suspect node
])
def test_a_witness_must_be_healthy_off_the_node_in_the_same_partition_and_window(witness):
    rows = [r for r in CONFINED if r["job"] != "c"] + [witness]
    diagnosis, _ = _diagnose(_state(rows, {"a": ENOTCONN.format(n=1), "b": ENOTCONN.format(n=2)}))
    assert diagnosis.root_cause == "cluster"


def test_a_running_job_elsewhere_is_a_witness():
    rows = [r for r in CONFINED if r["job"] != "c"] + [_row("c", ["n4"], state="RUNNING", started_h=4, ended_h=None)]
    diagnosis, _ = _diagnose(_state(rows, {"a": ENOTCONN.format(n=1), "b": ENOTCONN.format(n=2)}))
    assert diagnosis.root_cause == "node:n3"


def test_one_job_on_one_node_proves_nothing_about_the_node():
    rows = [_row("a", ["n3"]), _row("c", ["n4"], state="COMPLETED", started_h=4, ended_h=2)]
    diagnosis, actions = _diagnose(_state(rows, {"a": ENOTCONN.format(n=1)}))
    assert diagnosis.root_cause == "cluster" and _drained(actions) == []


def test_kernel_messages_alone_do_not_scope():
    # The server's hiccup printed on one node only, and no job's own output shows an error:
    # a node's kernel log cannot tell a dead client from a server only it mounts.
    kernel = {"n3": "[811.2] nfs: server filer1 not responding, still trying\n", "n1": "[5.1] Link up\n"}
    rows = CONFINED
    state = _state(rows, {"a": "step 100 loss 2.0", "b": "step 5 loss 3.1"}, kernel)
    diagnosis, actions = _diagnose(state)
    assert diagnosis.label == "mount_unresponsive"
    assert diagnosis.root_cause == "cluster" and _drained(actions) == []


def test_stale_handles_every_one_on_one_node_drain_it_instead_of_rerunning_there():
    diagnosis, actions = _diagnose(_state(CONFINED, {"a": ESTALE.format(n=1), "b": ESTALE.format(n=2)}))
    assert diagnosis.label == "stale_file_handle"
    assert (diagnosis.root_cause, diagnosis.remedy) == ("node:n3", "exclude_node")
    assert _drained(actions) == ["n3"]


def test_a_stale_handle_in_one_job_is_still_a_replaced_file():
    diagnosis, actions = _diagnose(_state(CONFINED, {"a": ESTALE.format(n=1), "b": "done"}))
    assert (diagnosis.label, diagnosis.root_cause, diagnosis.remedy) == ("stale_file_handle", "job:a", "resubmit")


def test_a_label_without_one_node_is_never_scoped():
    full = "OSError: [Errno 28] No space left on device: '/lustre/proj/ckpt-{n}.pt'"
    state = _state(CONFINED, {"a": full.format(n=1), "b": full.format(n=2)})
    ev = build_evidence(state["observations"], state["trigger"], NOW)
    match = match_label(load_playbooks()["shared_storage_full"], ev)
    assert match is not None and error_jobs(match) == ["a", "b"]
    assert one_node(match, ev) is None


def test_the_suspect_must_be_in_the_path_of_the_job_asked_about():
    # Two peers fail on n9, the job asked about (which ran on n1) shows the error too: no common node.
    rows = [_row("a", ["n1"]), _row("b", ["n9"], started_h=3, ended_h=2.5), _row("e", ["n9"], started_h=3, ended_h=2),
            _row("c", ["n4"], state="COMPLETED", started_h=4, ended_h=2)]
    logs = {"b": ENOTCONN.format(n=2), "e": ENOTCONN.format(n=3), "a": "ok"}
    state = _state(rows, logs)
    ev = build_evidence(state["observations"], state["trigger"], NOW)
    match = match_label(load_playbooks()["mount_unresponsive"], ev)
    assert match is not None and one_node(match, ev) is None


def test_mount_labels_look_at_the_peers_that_share_the_mount():
    state = _state(CONFINED, {"a": ENOTCONN.format(n=1)})
    ev = build_evidence(state["observations"], state["trigger"], NOW)
    match = match_label(load_playbooks()["mount_unresponsive"], ev)
    calls = PlaybookPolicy()._steps(match, ev, "slurm")
    assert any(c.tool == "list_jobs" and c.args == {"partition": "gpu"} for c in calls)
    assert any(c.tool == "get_logs" and c.args == {"job": "b"} for c in calls)


def test_one_node_needs_at_least_two_jobs():
    with pytest.raises(ValidationError):
        OneNode(min_jobs=1, remedy={"kind": "exclude_node"})


def test_victims_sharing_two_nodes_do_not_name_one():
    rows = [_row("a", ["n2", "n3"]), _row("b", ["n2", "n3"], started_h=3, ended_h=2.5),
            _row("c", ["n4"], state="COMPLETED", started_h=4, ended_h=2)]
    diagnosis, actions = _diagnose(_state(rows, {"a": ENOTCONN.format(n=1), "b": ENOTCONN.format(n=2)}))
    assert diagnosis.root_cause == "cluster" and _drained(actions) == []


# --- node-local evidence: the client died in one node's own kernel log -------------------------

OOM_KILLED_FUSE = ("[702114.221002] Out of memory: Killed process 3811 (mount-s3) total-vm:41877264kB, "
                   "anon-rss:29611520kB, file-rss:2176kB, shmem-rss:0kB, UID:0 pgtables:61244kB oom_score_adj:0")


def test_one_job_is_enough_when_the_nodes_own_kernel_log_shows_its_client_killed():
    rows = [_row("a", ["n1", "n2"]), _row("c", ["n4"], state="RUNNING", ended_h=None)]
    diagnosis, actions = _diagnose(_state(rows, {"a": ENOTCONN.format(n=1)}, kernel={"n1": "", "n2": OOM_KILLED_FUSE}))
    assert (diagnosis.root_cause, diagnosis.remedy) == ("node:n2", "exclude_node")
    assert _drained(actions) == ["n2"]


def test_a_client_killed_on_two_nodes_is_not_one_nodes_fault():
    rows = [_row("a", ["n1", "n2"]), _row("c", ["n4"], state="RUNNING", ended_h=None)]
    diagnosis, actions = _diagnose(_state(rows, {"a": ENOTCONN.format(n=1)},
                                          kernel={"n1": OOM_KILLED_FUSE, "n2": OOM_KILLED_FUSE}))
    assert diagnosis.root_cause == "cluster" and not _drained(actions)


def test_node_local_evidence_still_needs_a_healthy_job_elsewhere():
    rows = [_row("a", ["n1", "n2"])]
    diagnosis, actions = _diagnose(_state(rows, {"a": ENOTCONN.format(n=1)}, kernel={"n2": OOM_KILLED_FUSE}))
    assert diagnosis.root_cause == "cluster" and not _drained(actions)


def test_node_evidence_must_be_a_regex():
    with pytest.raises(ValidationError, match="node_evidence does not compile"):
        OneNode.model_validate({"node_evidence": "(unclosed", "remedy": {"kind": "exclude_node"}})
