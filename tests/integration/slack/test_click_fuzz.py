"""Whatever a request to the app's URL holds, signed or not, it gets an answer (400 or 401 unsigned;
a refusal to the clicker, or Bolt's own error response, signed) and never an exception out of
the dispatch, and nothing runs: clicks are bent from the real shape (fields dropped or retyped,
values that are JSON of the wrong kind)."""

from __future__ import annotations

import json
import os
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slack_app_kit import (ALICE, BAD_NODE, CAROL, CHANNEL, JOB, SIGNING_SECRET, buttons, click_payload, make_rig,
                            signed_headers)

from crashcart.agent.interfaces.slack import incident_for_thread

EXAMPLES = int(os.environ.get("CRASHCART_FUZZ_EXAMPLES", "400")) // 8
"""Each case is a real request through Bolt and the store: an eighth of the readers' count."""
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=12),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)


@pytest.fixture(scope="module")
def rig(tmp_path_factory, _slack_servers):
    api, _ = _slack_servers
    api.reset()
    rig = make_rig(tmp_path_factory.mktemp("fuzz"), api)
    asked = rig.mention(ALICE, f"why did job {JOB} die last night?")
    reply = rig.bot_replies(asked["ts"])[0]
    return rig, reply, buttons(reply)["crashcart_approve"]["value"]


def bend(payload: dict, data) -> dict:
    """The payload with some fields dropped or replaced by any JSON, the value included."""
    out = dict(payload)
    for key in list(out):
        choice = data.draw(st.integers(0, 5))
        if choice == 0:
            del out[key]
        elif choice == 1:
            out[key] = data.draw(JSON)
    actions = out.get("actions")
    if data.draw(st.booleans()) and isinstance(actions, list) and actions and isinstance(actions[0], dict):
        out["actions"] = [{**out["actions"][0], "value": data.draw(st.one_of(st.text(max_size=40),
                                                                            JSON.map(json.dumps)))}]
    return out


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_bent_clicks_are_answered_and_run_nothing(rig, data):
    rig, reply, value = rig
    # carol is in no policy: whatever the rest of the click says, it can never approve.
    payload = click_payload(CAROL, "crashcart_approve", value, reply, rig.api.response_url())
    body = urlencode({"payload": json.dumps(bend(payload, data))})
    signed = data.draw(st.booleans())
    headers = signed_headers(body, content_type="application/x-www-form-urlencoded",
                             secret=SIGNING_SECRET if signed else "not-the-signing-secret")
    response = rig.dispatch(body, headers)
    # Unsigned: refused before anything reads it. Signed (only Slack can, and it never sends these
    # shapes): whatever Bolt answers, its own error handling, no exception escapes and nothing runs.
    assert signed or response.status in (400, 401), response.body
    assert rig.service.wait_idle(30)
    assert rig.backend.cluster.node(BAD_NODE).state not in ("drained", "draining")
    incident = rig.store.get_incident(incident_for_thread(CHANNEL, reply["thread_ts"]))
    assert not [a for a in incident.actions if a.tool == "node_drain"]
    assert incident.incident.status == "awaiting_approval"
