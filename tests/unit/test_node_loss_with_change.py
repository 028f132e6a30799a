"""A node lost while a checkpoint was being written: the resume change rides on the node loss's own
actions. A dead node is drained and kept out of the rerun exactly as without the save; a reclaimed
spot node (nothing to drain) is only rerun; both resume from the newest whole checkpoint."""

from __future__ import annotations

from typing import Any

from test_playbook_policy import investigate, planned

from crashcart.tools.cluster import Cluster

SAVE_CUT_BY_NODE_FAILURE = """\
step 11990 | loss 1.512
saving checkpoint at iteration    12000 to /scratch/gpt/ckpt
srun: error: Node failure on {dead}
slurmstepd: error: *** JOB 881 ON {alive} CANCELLED AT 2026-03-02T09:31:00 DUE TO NODE FAILURE ***
"""


def _cluster(dead_node: dict[str, Any], events: list[dict[str, Any]] | None = None,
             state: str = "NODE_FAIL", log: str = SAVE_CUT_BY_NODE_FAILURE) -> Cluster:
    dead, alive = dead_node["name"], "n-alive"
    return Cluster.model_validate({
        "now": "2026-03-02T10:00:00Z",
        "nodes": [{"name": alive, "state": "idle", "partition": "a100", "gpus": 8},
                  {"partition": "a100", "gpus": 8, **dead_node},
                  {"name": "n-spare", "state": "idle", "partition": "a100", "gpus": 8}],
        "jobs": [{"id": "881", "name": "gpt-pretrain", "user": "ana", "state": state,
                  "exit_code": "0:0", "partition": "a100", "nodes": [alive, dead], "gpus": 16,
                  "submit_time": "2026-03-02T01:00:00Z", "start_time": "2026-03-02T01:01:00Z",
                  "end_time": "2026-03-02T09:31:00Z",
                  "config": {"load": "/scratch/gpt/ckpt", "ckpt_step": None},
                  "checkpoints": [
                      {"step": 11000, "time": "2026-03-02T08:40:00Z", "path": "/scratch/gpt/ckpt/iter_0011000"},
                      {"step": 12000, "time": "2026-03-02T09:30:30Z", "path": "/scratch/gpt/ckpt/iter_0012000"}],
                  "log": log.format(dead=dead, alive=alive)}],
        "events": events or [],
    })


def test_a_dead_node_under_a_save_is_drained_and_the_resumed_rerun_excludes_it():
    state = investigate(_cluster({"name": "n-dead", "state": "down", "reason": "Not responding"}), "881")
    assert state["diagnosis"]["label"] == "node_lost_during_checkpoint_save"
    assert [a["node"] for a in planned(state, "node_drain")] == ["n-dead"]
    [rerun] = planned(state, "resubmit")
    assert rerun["exclude_nodes"] == ["n-dead"]
    # The partial save (12000) is not what the rerun loads: the step before it is.
    assert 11000 in rerun["changes"].values()


def test_a_reclaimed_spot_node_under_a_save_is_only_rerun_with_the_resume_change():
    spot = {"name": "n-dead", "state": "down", "reason": "node terminated: spot interruption",
            "labels": {"karpenter.sh/capacity-type": "spot"}}
    events = [{"time": "2026-03-02T09:30:40Z", "type": "Warning", "reason": "SpotInterrupted",
               "object": "node/n-dead", "message": "Spot interruption warning: instance will be terminated in 2 minutes"}]
    state = investigate(_cluster(spot, events), "881")
    assert state["diagnosis"]["label"] == "node_lost_during_checkpoint_save"
    assert planned(state, "node_drain") == []
    [rerun] = planned(state, "resubmit")
    assert 11000 in rerun["changes"].values()


def test_a_save_cut_when_srun_aborted_the_step_before_slurm_said_node_fail_is_the_same_loss():
    # The other ranks died first: the job ends FAILED and only srun's word names the lost node.
    log = SAVE_CUT_BY_NODE_FAILURE.split("slurmstepd")[0] + "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
    dead = {"name": "n-dead", "state": "down", "reason": "Not responding"}
    state = investigate(_cluster(dead, state="FAILED", log=log), "881")
    assert state["diagnosis"]["label"] == "node_lost_during_checkpoint_save"
    assert [a["node"] for a in planned(state, "node_drain")] == ["n-dead"]
    [rerun] = planned(state, "resubmit")
    assert rerun["exclude_nodes"] == ["n-dead"] and 11000 in rerun["changes"].values()
