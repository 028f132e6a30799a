"""Paged by Slack (issue 12, item 2): each incident `watch` opens is posted to its routed
channel, later states update that message and add to its thread, and a delivery failure is
retried, recorded and never loses the incident. slack_sdk talks to the loopback Web API
(tests/harness/slack_api.py) in Slack's wire format."""

from __future__ import annotations

import json
import sqlite3

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver
from slack_app_kit import block_texts

from crashcart.agent.guard import policy_from_dict
from crashcart.agent.notify import parse_notifiers
from crashcart.agent.policies.playbook import PlaybookPolicy
from crashcart.agent.runner import make_deps, resume_incident
from crashcart.agent.store import IncidentStore
from crashcart.agent.watch import Watcher, WatchSettings
from crashcart.evals.scenario import BUNDLED_DIR, load_scenario
from crashcart.tools.backends.fixture import FixtureBackend

SCENARIO = BUNDLED_DIR / "hardware" / "xid79-guarded-drain-needs-approval.yaml"
BAD_NODE = "sxm-h100-33"
HW_CHANNEL = "C0HARDWARE"
HW_GROUP = "S0HWTEAM01"


def _slack_entry(api, **extra):
    return {"kind": "slack", "token_env": "SLACK_BOT_TOKEN", "channel": "#oncall", "backoff_seconds": 0,
            "base_url": api.base_url + "/api/",
            "route": {"teams": {"hardware": {"channel": "#gpu-hardware", "group": HW_GROUP}},
                      "partitions": {"h100-train": "#h100-oncall"}}, **extra}


@pytest.fixture
def paging(slack_api, tmp_path, monkeypatch):
    """A watcher on the xid79 scenario whose drain needs alice's approval, paging through Slack."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", slack_api.bot_token)
    slack_api.workspace.add_channel(HW_CHANNEL, "gpu-hardware")
    slack_api.workspace.add_channel("C0H100ONCL", "h100-oncall")
    sc = load_scenario(SCENARIO)
    guard = policy_from_dict({**sc.guard, "approval": [{"tool": "node_drain", "approvers": ["alice"]}]})

    def make(notifier_extra=None, waits=None):
        store = IncidentStore(tmp_path / "incidents.duckdb")
        saver = SqliteSaver(sqlite3.connect(str(tmp_path / "checkpoints.sqlite"), check_same_thread=False))
        backend = FixtureBackend(sc.cluster, sc.backend)
        deps = make_deps(backend, PlaybookPolicy(), guard, store, cluster="gpu-prod",
                         notifiers=parse_notifiers([_slack_entry(slack_api, **(notifier_extra or {}))]))
        deps.notifier.sleep = (waits if waits is not None else []).append
        return Watcher(deps, cluster="gpu-prod", checkpointer=saver, settings=WatchSettings(interval_s=0)), saver

    return make


def _texts(blocks) -> str:
    return block_texts({"blocks": blocks})


def test_a_watch_incident_is_posted_once_then_updated_in_place_and_in_its_thread(slack_api, paging):
    watcher, saver = paging()
    [incident] = watcher.poll_once()
    store = watcher.deps.store
    assert store.get_incident(incident).incident.status == "awaiting_approval"

    top = [m for m in slack_api.messages(HW_CHANNEL) if "thread_ts" not in m or m["thread_ts"] == m["ts"]]
    assert len(top) == 1, slack_api.messages(HW_CHANNEL)
    page = top[0]
    shown = _texts(page["blocks"])
    assert "*awaiting_approval*" in shown and incident in shown
    assert f"<!subteam^{HW_GROUP}>" in shown  # the hardware group is paged: people are needed
    assert "NVRM: Xid (PCI:0000:9b:00): 79, pid=2207733, name=python3, GPU has fallen off the bus." in shown
    assert f"node_drain {BAD_NODE}: waiting for approval" in shown and "escalate hardware: done" in shown
    assert f"Waiting for alice: `crashcart approve {incident}`" in shown
    assert slack_api.messages("C0ONCALL01") == []  # routed by team, not to the default channel
    saved = store.page(incident, "slack")
    assert (saved.channel, saved.ts, saved.status) == (HW_CHANNEL, page["ts"], "awaiting_approval")

    # alice approves (the path `crashcart approve` takes): the same message changes, the thread grows.
    resume_incident(watcher.deps, incident, {"approver": "alice", "approved": True}, saver)
    final = store.get_incident(incident).incident.status
    assert final != "awaiting_approval"
    [update] = slack_api.calls("chat.update")
    assert (update.params["channel"], update.params["ts"]) == (HW_CHANNEL, page["ts"])
    shown = _texts(update.params["blocks"])
    assert f"*{final}*" in shown and "Waiting for" not in shown
    assert f"node_drain {BAD_NODE}: done" in shown and f"node_drain {BAD_NODE}: approved by alice" in shown
    replies = [m for m in slack_api.messages(HW_CHANNEL) if m.get("thread_ts") == page["ts"] and m["ts"] != page["ts"]]
    assert any(f"awaiting_approval → {final}" in r["text"] for r in replies), replies
    assert len([m for m in slack_api.messages(HW_CHANNEL) if m.get("thread_ts") in (None, m["ts"])]) == 1
    assert store.page(incident, "slack").status == final

    # Nothing new: no new message, no update.
    calls = len(slack_api.calls())
    assert watcher.poll_once() == []
    watcher.deps.notifier.page(incident)
    assert len(slack_api.calls()) == calls


def test_a_rate_limit_is_waited_out_and_the_page_goes_through(slack_api, paging):
    waits: list[float] = []
    watcher, _ = paging(waits=waits)
    slack_api.fail("chat.postMessage", "ratelimited", times=2, retry_after=3)
    [incident] = watcher.poll_once()
    assert waits[:2] == [3.0, 3.0]  # Slack's Retry-After, not the (zero) backoff
    statuses = [c.status for c in slack_api.calls("chat.postMessage")]
    assert statuses[:3] == [429, 429, 200]
    # The first delivery (the escalation, which opens the page so that it lands in its thread) waited.
    rows = [d for d in watcher.deps.store.deliveries(incident) if d.notifier == "slack"]
    assert [(d.status, d.attempts) for d in rows] == [("delivered", 3)]
    assert watcher.deps.store.page(incident, "slack") is not None


def test_a_page_that_cannot_be_delivered_is_a_dead_letter_and_the_next_state_posts_it(slack_api, paging):
    watcher, saver = paging({"retries": 2})
    slack_api.fail("chat.postMessage", "ratelimited", times=50, retry_after=0)
    [incident] = watcher.poll_once()
    store = watcher.deps.store
    rows = {d.action_id: d for d in store.deliveries(incident) if d.notifier == "slack"}
    escalation = next(a for a in rows if a != "page")
    assert {a: (d.status, d.attempts) for a, d in rows.items()} == {"page": ("dead_letter", 3),
                                                                    escalation: ("dead_letter", 3)}
    assert "ratelimited" in rows["page"].error and rows["page"].payload["status"] == "awaiting_approval"
    assert rows[escalation].payload["team"] == "hardware"  # what it would have said waits in the record
    assert store.undelivered_counts([incident]) == {incident: 2}
    assert store.page(incident, "slack") is None
    # The incident itself is whole in the store, whatever Slack did.
    detail = store.get_incident(incident)
    assert detail.incident.diagnosis["label"] and detail.incident.status == "awaiting_approval"

    slack_api.reset()
    slack_api.workspace.add_channel(HW_CHANNEL, "gpu-hardware")
    resume_incident(watcher.deps, incident, {"approver": "alice", "approved": True}, saver)
    [posted] = [c for c in slack_api.calls("chat.postMessage") if "blocks" in c.params]
    shown = _texts(posted.params["blocks"])
    assert f"node_drain {BAD_NODE}: approved by alice" in shown and "escalate hardware: done" in shown
    assert store.page(incident, "slack").ts == posted.answer["ts"]
    # The resumed run delivers what failed before: the escalation lands in the new message's thread.
    assert store.undelivered_counts([incident]) == {}
    [escalated] = [c for c in slack_api.calls("chat.postMessage") if "escalation to hardware" in c.params["text"]]
    assert escalated.params["thread_ts"] == posted.answer["ts"] and f"<!subteam^{HW_GROUP}>" in escalated.params["text"]


def test_a_permanent_error_is_not_retried_and_names_the_channel(slack_api, paging):
    watcher, _ = paging({"retries": 3, "route": {}, "channel": "#no-such-channel"})
    [incident] = watcher.poll_once()
    rows = [d for d in watcher.deps.store.deliveries(incident) if d.action_id == "page"]
    assert [(d.status, d.attempts) for d in rows] == [("dead_letter", 1)]
    assert rows[0].error == "Slack chat.postMessage to #no-such-channel: channel_not_found"


def test_a_revoked_token_is_a_dead_letter_that_does_not_show_the_token(slack_api, paging, monkeypatch):
    watcher, _ = paging()
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-revoked-9f8e7d")
    [incident] = watcher.poll_once()
    rows = [d for d in watcher.deps.store.deliveries(incident) if d.notifier == "slack"]
    assert rows and all(d.status == "dead_letter" for d in rows)
    assert all("invalid_auth" in d.error for d in rows)
    assert "xoxb-revoked-9f8e7d" not in json.dumps([d.model_dump(mode="json") for d in rows])


def test_a_deleted_message_is_posted_again(slack_api, paging):
    watcher, saver = paging()
    [incident] = watcher.poll_once()
    first = watcher.deps.store.page(incident, "slack")
    channel = slack_api.workspace.channel(HW_CHANNEL)
    channel["messages"] = [m for m in channel["messages"] if m["ts"] != first.ts]  # someone deleted it
    resume_incident(watcher.deps, incident, {"approver": "alice", "approved": True}, saver)
    [update] = slack_api.calls("chat.update")
    assert update.answer["error"] == "message_not_found"
    again = watcher.deps.store.page(incident, "slack")
    assert again.ts != first.ts and any(m["ts"] == again.ts and "blocks" in m for m in channel["messages"])


def test_the_next_poll_tries_an_undelivered_page_again(slack_api, paging):
    watcher, _ = paging({"retries": 0})
    slack_api.fail("chat.postMessage", "service_unavailable", times=2, status=503)  # the escalation, the page
    [incident] = watcher.poll_once()
    store = watcher.deps.store
    assert store.page(incident, "slack") is None and store.undelivered_counts([incident])
    assert store.get_incident(incident).incident.status == "awaiting_approval"  # waiting, and nobody paged yet

    assert watcher.poll_once() == []  # nothing new on the cluster, but the page goes out now
    page = store.page(incident, "slack")
    assert page is not None and page.status == "awaiting_approval"
    [message] = [m for m in slack_api.messages(HW_CHANNEL) if m["ts"] == page.ts]
    assert f"node_drain {BAD_NODE}: waiting for approval" in _texts(message["blocks"])
    rows = [d for d in store.deliveries(incident) if d.action_id == "page"]
    assert [d.status for d in rows] == ["dead_letter", "delivered"]


def test_a_page_that_keeps_failing_the_same_way_is_recorded_once(slack_api, paging):
    watcher, _ = paging({"retries": 0, "route": {}, "channel": "#no-such-channel"})
    [incident] = watcher.poll_once()
    for _ in range(3):
        watcher.poll_once()
    rows = [d for d in watcher.deps.store.deliveries(incident) if d.action_id == "page"]
    assert [d.status for d in rows] == ["dead_letter"]
    tried = [c for c in slack_api.calls("chat.postMessage") if c.params["channel"] == "#no-such-channel"]
    assert len(tried) >= 4  # tried at every poll all the same


def test_a_page_is_approved_with_its_own_buttons_and_only_by_the_policys_approver(tmp_path, slack_api, monkeypatch):
    """The Slack app (agent/interfaces/slack) honours a click on the page `watch` posted, like one
    in a chat thread: signed, bound to the action and the policy, by someone the policy names."""
    from slack_app_kit import ALICE, CAROL, buttons, make_rig

    monkeypatch.setenv("SLACK_BOT_TOKEN", slack_api.bot_token)
    rig = make_rig(tmp_path, slack_api)  # the app, its store and checkpoints in tmp_path
    deps = make_deps(rig.backend, PlaybookPolicy(), rig.service.deps().guard.policy, rig.store, cluster=rig.service.cluster,
                     notifiers=parse_notifiers([_slack_entry(slack_api, route={})]))
    watcher = Watcher(deps, cluster=rig.service.cluster, checkpointer=rig.service.checkpointer,
                      settings=WatchSettings(interval_s=0))
    [incident] = watcher.poll_once()
    page = rig.store.page(incident, "slack")
    [message] = [m for m in slack_api.messages(page.channel) if m["ts"] == page.ts]
    approve = buttons(message)["crashcart_approve"]["value"]
    assert json.loads(approve)["incident"] == incident

    rig.click(CAROL, approve, message)  # in no policy: refused, nothing runs
    assert [a.tool for a in rig.store.get_incident(incident).actions].count("node_drain") == 0
    refused = rig.store.approval_attempts(incident)[-1]
    assert refused.outcome == "refused" and "is not an approver" in refused.reason

    rig.click(ALICE, approve, message)
    detail = rig.store.get_incident(incident)
    assert [a.tool for a in detail.actions].count("node_drain") == 1
    assert rig.backend.cluster.node(BAD_NODE).state in ("drained", "draining")
    [accepted] = [a for a in rig.store.approval_attempts(incident) if a.outcome == "accepted"]
    assert (accepted.approver, accepted.slack_user) == ("alice", ALICE)


@pytest.mark.parametrize("own_token", [False, True])
def test_the_page_goes_out_with_the_slack_sections_token_unless_the_notifier_has_its_own(
        slack_api, tmp_path, monkeypatch, own_token):
    """One place for the token (the `slack:` section), and a notifier's own setting still wins:
    the token that is not meant to be used is a revoked one, which the Web API refuses."""
    from crashcart.agent.config import parse_cluster_config

    good, revoked = slack_api.bot_token, "xoxb-revoked-0000"
    monkeypatch.setenv("APP_BOT_TOKEN", revoked if own_token else good)
    monkeypatch.setenv("PAGER_TOKEN", good)
    entry = {k: v for k, v in _slack_entry(slack_api, route={}).items() if k != "token_env"}
    if own_token:
        entry["token_env"] = "PAGER_TOKEN"
    config, _ = parse_cluster_config({"name": "gpu-prod", "backend": "slurm", "notifiers": [entry],
                                      "slack": {"bot_token_env": "APP_BOT_TOKEN"}}, "cluster.yaml")
    sc = load_scenario(SCENARIO)
    guard = policy_from_dict({**sc.guard, "approval": [{"tool": "node_drain", "approvers": ["alice"]}]})
    deps = make_deps(FixtureBackend(sc.cluster, sc.backend), PlaybookPolicy(), guard,
                     IncidentStore(tmp_path / "incidents.duckdb"), cluster="gpu-prod", notifiers=config.notifiers)
    [incident] = Watcher(deps, cluster="gpu-prod", settings=WatchSettings(interval_s=0)).poll_once()
    assert [(d.action_id == "page", d.status) for d in deps.store.deliveries(incident) if d.notifier == "slack"] == [
        (False, "delivered")]  # the escalation; it opened the page in passing, so the page is up to date
    page = deps.store.page(incident, "slack")
    assert page is not None and page.channel == "C0ONCALL01"  # "#oncall", the default channel
    assert {c.token for c in slack_api.calls("chat.postMessage")} == {good}


def test_a_failed_page_is_delivered_once_the_message_shows_its_state(slack_api, paging):
    """Another send opened the incident's message (an escalation posts it before its reply): the
    next page has nothing new to send, and its record says delivered, not still dead-lettered."""
    watcher, _ = paging({"retries": 0})
    slack_api.fail("chat.postMessage", "service_unavailable", times=2, status=503)  # the escalation, the page
    [incident] = watcher.poll_once()
    store, dispatcher = watcher.deps.store, watcher.deps.notifier
    assert store.page(incident, "slack") is None
    [slack] = [s for s in dispatcher.settings if s.kind == "slack"]
    assert slack.build_for(store).page(incident)  # posted, as an escalation's send does in passing
    calls = len(slack_api.calls())
    dispatcher.page(incident)
    assert len(slack_api.calls()) == calls  # nothing new to show
    rows = [d.status for d in store.deliveries(incident) if d.action_id == "page"]
    assert rows == ["dead_letter", "delivered"]
