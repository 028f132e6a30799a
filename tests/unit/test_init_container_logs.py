"""A failing init container is a symptom: its own log, which names the cause, is always read."""

from crashcart.playbooks import load_playbooks


def test_init_container_failure_reads_the_jobs_log_before_settling():
    label = load_playbooks()["init_container_failed"].label
    assert label.symptom, "a more specific label (credentials, missing data) must be able to win"
    assert any(step.tool == "get_logs" and step.scope == "job" for step in label.investigate)
