"""`crashcart incidents show` after approving through Slack: every refused click (who, when, why,
their Slack user id) and, beside the approved action, the Slack user id the approval came from."""

from __future__ import annotations

import re

from slack_app_kit import ALICE, BAD_NODE, CAROL, CHANNEL, JOB, buttons, make_rig
from typer.testing import CliRunner

from crashcart.agent.interfaces.cli import app
from crashcart.agent.interfaces.slack import incident_for_thread

ENV = {"COLUMNS": "250", "NO_COLOR": "1", "TERM": "dumb"}


def _rows(output: str, title: str) -> list[list[str]]:
    """The cells of a Rich table printed under `title` (one list per row, box characters dropped)."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if title in line)
    rows = []
    for line in lines[start + 1:]:
        if not line.strip() or not line.lstrip().startswith(("│", "┃", "┏", "┡", "└", "├")):
            break
        cells = [c.strip() for c in re.split(r"[│┃]", line)[1:-1]]
        if cells and any(cells):
            rows.append(cells)
    return rows


def test_incidents_show_lists_refused_clicks_and_the_approvers_slack_id(tmp_path, slack_api):
    rig = make_rig(tmp_path, slack_api)
    asked = rig.mention(ALICE, f"why did job {JOB} die last night?")
    reply = rig.bot_replies(asked["ts"])[0]
    incident = incident_for_thread(CHANNEL, asked["ts"])
    approve = buttons(reply)["crashcart_approve"]["value"]
    rig.click(CAROL, approve, reply)  # in no policy
    assert rig.click(ALICE, approve, reply, secret="a-guessed-secret").status == 401  # a forged request
    rig.click(ALICE, approve, reply)  # the real one
    assert [a.tool for a in rig.store.get_incident(incident).actions].count("node_drain") == 1

    shown = CliRunner().invoke(app, ["incidents", "show", incident, "--state-dir", str(tmp_path)], env=ENV)
    assert shown.exit_code == 0, shown.output
    [drain] = [r for r in _rows(shown.output, "write actions") if r[0] == "node_drain"]
    assert (drain[1], drain[2]) == (f"node='{BAD_NODE}'", "allow")
    assert drain[4] == f"alice approved (Slack {ALICE})"
    refused = _rows(shown.output, "refused approval attempts")
    header, body = refused[0], refused[1:]
    assert header == ["when", "answer", "approver", "Slack user", "OS user", "why refused"]
    assert [(r[2], r[3]) for r in body] == [("-", CAROL), ("-", ALICE)]
    carol, forged = body
    assert carol[1].startswith("approve node_drain ") and "is not an approver" in carol[5]
    assert forged[5].startswith("signature check failed")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", carol[0])
