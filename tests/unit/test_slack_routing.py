"""The `slack` notifier's settings: where a page goes (team, partition, cluster, default), and
a broken entry named by file and field; pages render outside text as data."""

from __future__ import annotations

import pytest

from crashcart.agent.config import ClusterConfigError, parse_cluster_config
from crashcart.agent.notify import parse_notifiers
from crashcart.agent.notify.slack import answered, partition_of

ROUTED = {"kind": "slack", "token_env": "SLACK_BOT_TOKEN", "channel": "#gpu-oncall", "route": {
    "teams": {"hardware": {"channel": "#gpu-hardware", "group": "S0HWTEAM01"}, "network": {"group": "S0NETTEAM1"}},
    "partitions": {"h100": "#h100-oncall"},
    "clusters": {"gpu-prod": "#prod-oncall"},
}}


@pytest.mark.parametrize("cluster, partition, team, expected", [
    ("gpu-prod", "h100", "hardware", ("#gpu-hardware", "S0HWTEAM01")),  # the team first
    ("gpu-prod", "h100", "network", ("#h100-oncall", "S0NETTEAM1")),    # a team with a group only
    ("gpu-prod", "h100", None, ("#h100-oncall", None)),
    ("gpu-prod", "a100", "user", ("#prod-oncall", None)),
    ("gpu-dev", None, None, ("#gpu-oncall", None)),
])
def test_a_page_goes_to_its_team_then_partition_then_cluster_then_the_default(cluster, partition, team, expected):
    [settings] = parse_notifiers([ROUTED])
    assert settings.channel_for(cluster, partition, team) == expected


def test_the_base_teams_filter_keeps_its_meaning():
    """`teams:` (every notifier's filter) still limits which escalations it takes; routing is `route.teams`."""
    [settings] = parse_notifiers([{**ROUTED, "teams": ["hardware"]}])
    assert settings.teams == ["hardware"] and set(settings.route.teams) == {"hardware", "network"}


@pytest.mark.parametrize("change, message", [
    ({"channel": "general"}, "notifiers[0].channel"),
    ({"token_env": None}, "give the bot token as token_env or token_file"),
    ({"token_file": "/run/secrets/slack"}, "give the bot token as token_env or token_file"),
    ({"route": {"teams": {"hardware": {"group": "hardware-team"}}}}, "notifiers[0].route.teams.hardware.group"),
    ({"route": {"partitions": {"h100": "H100 on-call"}}}, "not a channel"),
    ({"route": {"team": {}}}, "notifiers[0].route.team: unknown field"),
    ({"base_url": "ftp://slack.example.org/api/"}, "is not an http(s) URL"),
    ({"bot_token": "xoxb-1234"}, "notifiers[0].bot_token: unknown field"),
])
def test_a_broken_slack_entry_names_the_file_and_the_field(change, message):
    entry = {k: v for k, v in {**ROUTED, **change}.items() if v is not None}
    with pytest.raises(ClusterConfigError) as info:
        parse_cluster_config({"name": "c", "backend": "slurm", "notifiers": [entry]}, "cluster.yaml")
    assert str(info.value).startswith("cluster.yaml: ") and message in str(info.value)
    assert "xoxb-1234" not in str(info.value)


def test_the_partition_is_the_trigger_jobs_as_the_investigation_saw_it():
    state = {"observations": [
        {"tool": "list_jobs", "data": {"rows": [{"job": "7", "partition": "a100"}, {"job": "48213", "partition": "h100"}]}},
    ]}
    assert partition_of(state, {"kind": "job_failed", "job": "48213"}) == "h100"
    assert partition_of(state, {"kind": "node_alert", "node": "gpu-b07"}) is None
    assert partition_of(None, {"job": "48213"}) is None


def test_an_answer_reads_as_a_sentence():
    assert answered("node_drain gpu-b07", "alice approved") == "node_drain gpu-b07: approved by alice"


def test_a_page_keeps_outside_text_as_data():
    from crashcart.agent.interfaces.slack.blocks import page_blocks, page_text

    hostile = "<!channel> *drain everything* <@U0ADMIN> & approve"
    diagnosis = {"label": "unknown", "family": "unknown", "summary": hostile, "evidence": [hostile]}
    blocks = page_blocks("inc-1", "escalated", diagnosis, [], cluster="c", mention="<!subteam^S0HWTEAM01>")
    mrkdwn = [b for b in blocks if b["type"] == "context" for e in b["elements"] if e["type"] == "mrkdwn"]
    assert all(hostile not in e["text"] for b in mrkdwn for e in b["elements"])
    plain_texts = [b["text"]["text"] for b in blocks if b["type"] == "section" and b["text"]["type"] == "plain_text"]
    assert hostile in plain_texts  # shown as typed, in text Slack never parses
    [evidence] = [b for b in blocks if b["type"] == "rich_text"]
    assert evidence["elements"][0]["elements"][0]["text"] == hostile
    text = page_text("inc-1", "escalated", {**diagnosis, "label": "<!channel>"}, "<!subteam^S0HWTEAM01>")
    assert text.startswith("<!subteam^S0HWTEAM01> ") and "&lt;!channel&gt;" in text and "<!channel>" not in text


APP = {"bot_token_env": "CRASHCART_SLACK_BOT", "channel": "#gpu-oncall", "api_url": "https://slack-proxy.example.org/api/"}
PAGER = {"kind": "slack", "channel": "#gpu-oncall"}


def _notifier(entry, slack=None):
    data = {"name": "c", "backend": "slurm", "notifiers": [entry], **({"slack": slack} if slack is not None else {})}
    config, _ = parse_cluster_config(data, "cluster.yaml")
    return config.notifiers[0]


@pytest.mark.parametrize("slack, token_env, token_file, base_url", [
    (APP, "CRASHCART_SLACK_BOT", None, "https://slack-proxy.example.org/api/"),
    ({"bot_token_file": "/run/secrets/slack-bot"}, None, "/run/secrets/slack-bot", "https://slack.com/api/"),
    ({}, "SLACK_BOT_TOKEN", None, "https://slack.com/api/"),  # the app's own default, Bolt's name
])
def test_a_slack_notifier_without_a_token_uses_the_slack_sections(slack, token_env, token_file, base_url):
    pager = _notifier(PAGER, slack)
    assert (pager.token_env, pager.token_file, pager.base_url) == (token_env, token_file, base_url)


@pytest.mark.parametrize("own", [{"token_env": "PAGER_TOKEN"}, {"token_file": "/run/secrets/pager"}])
def test_a_slack_notifiers_own_token_and_url_win_over_the_slack_sections(own):
    pager = _notifier({**PAGER, **own, "base_url": "http://127.0.0.1:9/api/"}, APP)
    assert (pager.token_env, pager.token_file) == (own.get("token_env"), own.get("token_file"))
    assert pager.base_url == "http://127.0.0.1:9/api/"


def test_a_slack_notifier_with_no_token_anywhere_is_named():
    with pytest.raises(ClusterConfigError) as info:
        parse_cluster_config({"name": "c", "backend": "slurm", "notifiers": [PAGER]}, "cluster.yaml")
    assert "notifiers[0]: give the bot token as token_env or token_file" in str(info.value)
    assert "slack: section" in str(info.value)
