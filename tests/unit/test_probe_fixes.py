"""A probe that can never pass: its port and its delay computed from what the container printed."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from crashcart.agent.policies.evidence import Evidence, JobFacts, TextDoc
from crashcart.agent.policies.probes import (
    observed_startup_seconds, port_the_container_serves, probe_delay_from_startup,
)

NOW = datetime(2026, 4, 2, 12, 0, tzinfo=timezone.utc)
REFUSED = ('Warning Unhealthy: Liveness probe failed: Get "http://10.4.1.9:{port}/ready": '
           'dial tcp 10.4.1.9:{port}: connect: connection refused')


def _ev(log: str, events: list[str], config: dict | None = None, attempt_log: str = "") -> Evidence:
    ev = Evidence(now=NOW, trigger={"kind": "job_failed", "job": "j1"})
    ev.docs = [TextDoc("log", "job:j1", log.splitlines(), "get_logs:j1")]
    if attempt_log:
        ev.docs.append(TextDoc("attempt_log", "job:j1", attempt_log.splitlines(), "get_logs:j1#1"))
    ev.docs += [TextDoc("events", "job:j1", [e], "kubectl_events:j1") for e in events]
    ev.configs = {"j1": config or {}}
    ev.jobs = {"j1": JobFacts(job="j1", state="CrashLoopBackOff")}
    return ev


@pytest.mark.parametrize("log, probed, expected", [
    (" * Running on http://0.0.0.0:5005 (Press CTRL+C to quit)", 8080, 5005),           # Flask
    ("[2026-04-02 11:58:01 +0000] [1] [INFO] Listening at: http://0.0.0.0:7070 (1)", 8000, 7070),  # gunicorn
    ('{"level":"info","msg":"server listening on port 9443"}', 443, 9443),
    ("INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)", 8000, None),  # same port: not the cause
    ("INFO:     Uvicorn running on http://0.0.0.0:8000\nmetrics: Serving on :9100", 8080, None),  # two ports: which one?
    ("step 120 loss 2.31", 8080, None),                                                    # no server line at all
])
def test_the_probe_goes_to_the_one_port_the_server_says_it_listens_on(log, probed, expected):
    assert port_the_container_serves(_ev(log, [REFUSED.format(port=probed)]), "j1", {}, None) == expected


LOADING = """INFO 04-02 11:50:00 api_server.py:585] vLLM API server version 0.6.3
INFO 04-02 11:50:40 model_runner.py:1072] Starting to load model /models/qwen2-72b...
Loading safetensors checkpoint shards:   5% Completed | 2/37 [00:16<04:56,  8.01s/it]
Loading safetensors checkpoint shards:  11% Completed | 4/37 [00:32<04:24,  8.02s/it]"""


def test_a_loading_server_needs_its_lead_time_plus_the_bars_projection():
    # 40 s before the bar, then 32 s done and 264 s left.
    assert observed_startup_seconds(LOADING.splitlines(), NOW) == 40 + 32 + 264


def test_an_earlier_run_that_came_up_says_how_long_it_took():
    up = ("2026-03-30T08:00:05Z starting\n2026-03-30T08:00:20Z loading weights\n"
          "2026-03-30T08:07:05Z INFO Uvicorn running on http://0.0.0.0:8000")
    assert observed_startup_seconds(up.splitlines(), NOW) == 420


@pytest.mark.parametrize("probe, expected", [
    ({"initialDelaySeconds": 30, "periodSeconds": 10, "failureThreshold": 3}, 510),  # 336 s x 1.5, rounded up
    ({"initialDelaySeconds": 600, "periodSeconds": 10, "failureThreshold": 3}, None),  # it already waited longer
])
def test_the_delay_covers_the_observed_start_with_headroom(probe, expected):
    ev = _ev(LOADING, [REFUSED.format(port=8000)], {"livenessProbe": probe})
    assert probe_delay_from_startup(ev, "j1", {}, None) == expected


def test_a_start_never_observed_gives_no_delay():
    ev = _ev("INFO 04-02 11:50:00 api_server.py:585] vLLM API server version 0.6.3", [REFUSED.format(port=8000)],
             {"livenessProbe": {"initialDelaySeconds": 30}})
    assert probe_delay_from_startup(ev, "j1", {}, None) is None
