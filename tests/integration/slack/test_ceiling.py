"""The Slack app on a live cluster acts only within that cluster's own guard (cluster.yaml).

`crashcart slack SCENARIO` answers about a recorded cluster under the scenario's own guard; it
may share a state dir, a channel and a cluster name with the app on the live cluster. A button
the recorded incident posted, clicked and delivered to the live app, used to resume that
incident under its (wider) stored policy with the live app's backend: the drain ran there.
"""

from __future__ import annotations

import dataclasses

from slack_app_kit import ALICE, BAD_NODE, CHANNEL, JOB, SCENARIO, SIGNING_SECRET, SlackRig, buttons, guard_policy, make_rig

from crashcart.agent.guard import policy_from_dict
from crashcart.agent.interfaces.slack import build_app, incident_for_thread
from crashcart.evals.scenario import load_scenario
from crashcart.tools.backends.fixture import FixtureBackend


def live_rig(recorded: SlackRig, slack_api) -> SlackRig:
    """The live cluster's app on the same store and checkpoints: its own guard is dry_run."""
    from slack_sdk import WebClient

    own = policy_from_dict({**guard_policy(), "mode": "dry_run"})
    backend = FixtureBackend(load_scenario(SCENARIO).cluster, "slurm")  # stands in for the live cluster
    service = dataclasses.replace(recorded.service, backend=backend, guard_policy=own, ceiling=own)
    client = WebClient(token=slack_api.bot_token, base_url=slack_api.base_url + "/api/")
    app = build_app(service, token=slack_api.bot_token, signing_secret=SIGNING_SECRET, client=client)
    return SlackRig(app, service, backend, recorded.store, slack_api)


def test_a_click_on_a_recorded_incident_does_not_act_on_the_live_cluster(tmp_path, slack_api):
    recorded = make_rig(tmp_path, slack_api)  # autonomous; alice approves drains
    asked = recorded.mention(ALICE, f"why did job {JOB} die last night?")
    reply = recorded.bot_replies(asked["ts"])[0]
    incident = incident_for_thread(CHANNEL, asked["ts"])
    value = buttons(reply)["crashcart_approve"]["value"]

    live = live_rig(recorded, slack_api)
    assert live.click(ALICE, value, reply).status == 200
    assert live.backend.cluster.node(BAD_NODE).state not in ("drained", "draining")
    assert not [a for a in live.store.get_incident(incident).actions if a.tool == "node_drain"]
    [refused] = [a for a in live.store.approval_attempts(incident) if a.outcome == "refused"]
    assert refused.slack_user == ALICE and "nothing it asks for runs on this cluster" in refused.reason, refused
    assert live.store.get_incident(incident).incident.status == "awaiting_approval"

    # The recorded cluster's own app still answers it: its drain runs there, not on the live one.
    assert recorded.click(ALICE, value, reply).status == 200
    assert recorded.backend.cluster.node(BAD_NODE).state in ("drained", "draining")
    assert live.backend.cluster.node(BAD_NODE).state not in ("drained", "draining")


def test_crashcart_slack_on_a_live_cluster_carries_its_guard_as_the_ceiling(tmp_path):
    """What `crashcart slack --cluster` builds: the cluster's own guard is the ceiling; a recorded
    cluster (no live backend) has none, as before."""
    from crashcart.agent.interfaces.cli import _open_target
    from crashcart.agent.interfaces.slack.serve import make_service

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("name: gpu-prod\nbackend: slurm\nguard: {mode: dry_run, permissions: [{tool: '*'}]}\n")
    live = make_service(_open_target(None, cluster, None, None, tmp_path / "live"), tmp_path / "live")
    assert live.ceiling is not None and live.ceiling == live.guard_policy and live.ceiling.mode == "dry_run"
    assert live.deps().guard.ceiling == live.ceiling
    recorded = make_service(_open_target(str(SCENARIO), None, None, None, tmp_path / "rec"), tmp_path / "rec")
    assert recorded.ceiling is None
