"""Approve through Slack: Approve/Reject clicks as Slack POSTs them (form-encoded block_actions,
signed with slack_sdk's SignatureVerifier), dispatched through Bolt with verification on.
Only a verified, fresh, exactly-bound click by an approver the incident's stored policy names
runs anything, once; every other click is refused in the thread, journaled, and changes nothing."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from slack_app_kit import ALICE, BAD_NODE, BOB, CAROL, CHANNEL, JOB, block_texts, buttons, make_rig

from crashcart.agent.interfaces.slack import incident_for_thread

QUESTION = f"why did job {JOB} die last night?"


@pytest.fixture
def rig(tmp_path, slack_api):
    return make_rig(tmp_path, slack_api)


def waiting_message(rig, asked):
    """The bot's answer in the thread, with the drain's Approve button, and the incident's id."""
    reply = rig.bot_replies(asked["ts"])[0]
    assert "crashcart_approve" in buttons(reply), block_texts(reply)
    return reply, incident_for_thread(CHANNEL, asked["ts"])


def drains_run(rig, incident_id):
    return [a for a in rig.store.get_incident(incident_id).actions if a.tool == "node_drain"]


def assert_nothing_ran(rig, incident_id, slack_api, user, why):
    detail = rig.store.get_incident(incident_id)
    assert not drains_run(rig, incident_id)
    assert rig.backend.cluster.node(BAD_NODE).state not in ("drained", "draining")
    assert detail.incident.status == "awaiting_approval"
    refused = [a for a in rig.store.approval_attempts(incident_id) if a.outcome == "refused"]
    assert refused and refused[-1].slack_user == user and why in refused[-1].reason, refused
    return refused[-1]


def test_the_right_person_approves_and_the_drain_runs_once(rig, slack_api):
    asked = rig.mention(ALICE, QUESTION)
    reply, incident_id = waiting_message(rig, asked)
    value = buttons(reply)["crashcart_approve"]["value"]
    response = rig.click(ALICE, value, reply)
    assert response.status == 200
    assert len(drains_run(rig, incident_id)) == 1
    assert rig.backend.cluster.node(BAD_NODE).state in ("drained", "draining")
    accepted = [a for a in rig.store.approval_attempts(incident_id) if a.outcome == "accepted"]
    assert [(a.approver, a.slack_user, a.tool) for a in accepted] == [("alice", ALICE, "node_drain")]
    shown = block_texts(rig.bot_replies(asked["ts"])[0])
    assert f"Approved by <@{ALICE}> (alice)" in shown
    assert "node_drain sxm-h100-33: done" in shown
    assert not buttons(rig.bot_replies(asked["ts"])[0]), "nothing waits any more: no buttons left"

    # The same click again (a replay, freshly signed): refused, and the drain does not run twice.
    again = rig.click(ALICE, value, reply)
    assert again.status == 200
    assert len(drains_run(rig, incident_id)) == 1
    refused = [a for a in rig.store.approval_attempts(incident_id) if a.outcome == "refused"]
    assert refused and refused[-1].slack_user == ALICE and "not waiting" in refused[-1].reason
    assert slack_api.ephemeral[-1]["user"] == ALICE and "Refused" in slack_api.ephemeral[-1]["text"]
    assert slack_api.ephemeral[-1]["thread_ts"] == asked["ts"]


def test_a_rejection_by_the_right_person_runs_nothing(rig):
    asked = rig.mention(ALICE, QUESTION)
    reply, incident_id = waiting_message(rig, asked)
    rig.click(ALICE, buttons(reply)["crashcart_reject"]["value"], reply, approve=False)
    assert not drains_run(rig, incident_id)
    assert f"Rejected by <@{ALICE}> (alice)" in block_texts(rig.bot_replies(asked["ts"])[0])
    assert rig.backend.cluster.node(BAD_NODE).state not in ("drained", "draining")


def test_a_forged_signature_is_refused_and_journaled(rig, slack_api):
    asked = rig.mention(ALICE, QUESTION)
    reply, incident_id = waiting_message(rig, asked)
    response = rig.click(ALICE, buttons(reply)["crashcart_approve"]["value"], reply, secret="a-guessed-secret")
    assert response.status == 401
    attempt = assert_nothing_ran(rig, incident_id, slack_api, ALICE, "does not verify")
    assert attempt.reason.startswith("signature check failed")


def test_a_stale_timestamp_is_refused_and_journaled(rig, slack_api):
    asked = rig.mention(ALICE, QUESTION)
    reply, incident_id = waiting_message(rig, asked)
    six_minutes_ago = int(time.time()) - 6 * 60
    response = rig.click(ALICE, buttons(reply)["crashcart_approve"]["value"], reply, timestamp=six_minutes_ago)
    assert response.status == 401
    assert_nothing_ran(rig, incident_id, slack_api, ALICE, "more than five minutes")


def test_someone_the_policy_does_not_name_is_refused(rig, slack_api):
    asked = rig.mention(ALICE, QUESTION)
    reply, incident_id = waiting_message(rig, asked)
    assert rig.click(CAROL, buttons(reply)["crashcart_approve"]["value"], reply).status == 200
    assert_nothing_ran(rig, incident_id, slack_api, CAROL, "is not an approver")
    assert slack_api.ephemeral[-1]["user"] == CAROL


def test_an_approver_of_something_else_is_refused_by_the_guard(rig, slack_api):
    """bob is in the policy, but the drain's tier names only alice: the guard itself refuses him."""
    asked = rig.mention(ALICE, QUESTION)
    reply, incident_id = waiting_message(rig, asked)
    rig.click(BOB, buttons(reply)["crashcart_approve"]["value"], reply)
    assert_nothing_ran(rig, incident_id, slack_api, BOB, "bob may not approve node_drain")


def test_a_click_on_an_action_from_another_incident_is_refused(rig, slack_api):
    first = rig.mention(ALICE, QUESTION)
    first_reply, first_id = waiting_message(rig, first)
    second = rig.mention(ALICE, f"job {JOB} again: what happened?")
    _, second_id = waiting_message(rig, second)
    assert first_id != second_id
    # The first thread's button, made to name the second incident (same drain, same policy).
    value = json.loads(buttons(first_reply)["crashcart_approve"]["value"])
    rig.click(ALICE, json.dumps({**value, "incident": second_id}), first_reply)
    assert_nothing_ran(rig, second_id, slack_api, ALICE, "another incident's thread")
    # ... and an action id the incident does not have.
    rig.click(ALICE, json.dumps({**value, "action": "0123456789abcdef"}), first_reply)
    assert_nothing_ran(rig, first_id, slack_api, ALICE, "has no action 0123456789abcdef")


def test_a_button_bound_to_other_arguments_or_another_policy_is_refused(rig, slack_api):
    asked = rig.mention(ALICE, QUESTION)
    reply, incident_id = waiting_message(rig, asked)
    value = json.loads(buttons(reply)["crashcart_approve"]["value"])
    rig.click(ALICE, json.dumps({**value, "args": "0" * 64}), reply)
    assert_nothing_ran(rig, incident_id, slack_api, ALICE, "other arguments")
    rig.click(ALICE, json.dumps({**value, "policy": "f" * 64}), reply)
    assert_nothing_ran(rig, incident_id, slack_api, ALICE, "another guard policy")


def test_an_expired_request_is_refused(rig, slack_api):
    asked = rig.mention(ALICE, QUESTION)
    reply, incident_id = waiting_message(rig, asked)
    later = rig.backend.now() + timedelta(minutes=61)  # the policy's default expiry is 60 minutes
    rig.service.clock = lambda: later
    rig.click(ALICE, buttons(reply)["crashcart_approve"]["value"], reply)
    assert_nothing_ran(rig, incident_id, slack_api, ALICE, "expired after 60 minutes")
    assert "expired" in slack_api.ephemeral[-1]["text"]

