"""What the command line shows a person (issue 8, item 7): outside text is never Rich markup,
`incidents show` tells one incident after the fact, `watch` says what waits for whom and how to
approve, and observe/dry-run incidents say "proposed, not done"."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from crashcart.agent.interfaces.cli import app
from crashcart.agent.store import IncidentStore
from helpers import GOOD_SCENARIO

ENV = {"COLUMNS": "240", "NO_COLOR": "1", "TERM": "dumb"}
CHAT = "why did [/red] job 90210 die? [bold]it was fine yesterday"
APPROVAL_GUARD = {"mode": "autonomous", "permissions": [{"tool": "*"}],
                  "approval": [{"tool": "resubmit", "approvers": ["alice", "bob"]}]}


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env=ENV)


def scenario(tmp_path, **changes):
    data = yaml.safe_load(GOOD_SCENARIO)
    data.update(changes)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def only_incident(state):
    with IncidentStore(state / "incidents.duckdb") as store:
        [inc] = store.list_incidents()
    return inc


def test_chat_text_with_markup_does_not_crash_and_bracketed_log_prefixes_show(tmp_path):
    path = scenario(tmp_path, title="OOM [/red] on [slurm] partition a100",
                    trigger={"kind": "chat", "job": "90210", "text": CHAT})
    out = invoke("investigate", path, "--state-dir", tmp_path / "state", "--mode", "autonomous")
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    assert out.exit_code == 0, out.output
    assert CHAT in out.output
    assert "[rank2]" in out.output and "[slurm]" in out.output
    # After the actions ran the transcript still renders: the resubmit is shown executed.
    assert "executed:" in out.output


def test_an_error_message_naming_a_path_with_brackets_is_shown_as_is(tmp_path):
    out = invoke("eval", tmp_path / "[/red]missing[rank0]")
    assert out.exit_code == 2
    assert "[/red]missing[rank0]: no such file or folder" in out.output


def test_dry_run_ends_proposed_not_closed(tmp_path):
    out = invoke("investigate", scenario(tmp_path), "--state-dir", tmp_path / "state")
    assert out.exit_code == 0, out.output
    assert "status proposed" in out.output and "proposed, not done" in out.output
    assert only_incident(tmp_path / "state").status == "proposed"
    shown = invoke("incidents", "show", only_incident(tmp_path / "state").id, "--state-dir", tmp_path / "state")
    assert "proposed, not done" in shown.output and "closed" not in shown.output


def test_incidents_show_tells_trigger_diagnosis_evidence_and_each_action_with_approver_and_result(tmp_path):
    state = tmp_path / "state"
    path = scenario(tmp_path, guard=APPROVAL_GUARD)
    first = invoke("investigate", path, "--state-dir", state)
    assert "waits for approval" in first.output
    inc = only_incident(state)
    approved = invoke("approve", inc.id, "--scenario", path, "--approver", "alice", "--state-dir", state)
    assert approved.exit_code == 0, approved.output
    out = invoke("incidents", "show", inc.id, "--state-dir", state)
    assert out.exit_code == 0, out.output
    text = out.output
    assert inc.id in text
    assert "trigger job_failed" in text and "job='90210'" in text
    assert "diagnosis cuda_oom" in text and "family=memory" in text
    assert "torch.OutOfMemoryError: CUDA out of memory" in text  # evidence, brackets and all
    assert "[rank2]" in text
    resubmit = next(line for line in text.splitlines() if line.startswith("│ resubmit"))
    assert "allow" in resubmit and "alice approved" in resubmit
    assert "remediated" in text
    assert "life: detected" in text and "awaiting_approval" in text


def test_incidents_show_an_unknown_incident_is_a_clear_error(tmp_path):
    invoke("investigate", scenario(tmp_path), "--state-dir", tmp_path / "state")
    out = invoke("incidents", "show", "inc-nope", "--state-dir", tmp_path / "state")
    assert out.exit_code == 2 and "incident inc-nope is not in the store" in out.output


def test_watch_says_what_waits_for_whom_with_the_exact_approve_command(tmp_path):
    state = tmp_path / "state"
    path = scenario(tmp_path, guard=APPROVAL_GUARD)
    out = invoke("watch", path, "--polls", "1", "--interval", "0", "--state-dir", state, "--lookback-minutes", "1440")
    assert out.exit_code == 0, out.output
    inc = only_incident(state)
    assert inc.status == "awaiting_approval"
    assert "waits for alice, bob to approve resubmit 90210" in out.output
    command = f"crashcart approve {inc.id} --scenario {path} --approver NAME --state-dir {state}"
    assert f"approve: {command}" in out.output
    # The printed command works as printed (NAME filled in).
    approved = invoke(*command.replace("NAME", "alice").split()[1:])
    assert approved.exit_code == 0, approved.output
    assert only_incident(state).status == "remediated"


def test_watch_in_dry_run_says_proposed_not_done(tmp_path):
    out = invoke("watch", scenario(tmp_path), "--polls", "1", "--interval", "0", "--state-dir", tmp_path / "state",
                 "--lookback-minutes", "1440")
    assert out.exit_code == 0, out.output
    assert "proposed, not done: resubmit 90210" in out.output


def test_incidents_limit_must_be_positive_and_the_state_dir_must_exist(tmp_path):
    invoke("investigate", scenario(tmp_path), "--state-dir", tmp_path / "state")
    out = invoke("incidents", "--limit", "-1", "--state-dir", tmp_path / "state")
    assert out.exit_code == 2 and "--limit" in out.output and "Traceback" not in out.output
    missing = invoke("incidents", "--state-dir", tmp_path / "nowhere")
    assert missing.exit_code == 2 and f"--state-dir {tmp_path / 'nowhere'}: no such folder" in missing.output
