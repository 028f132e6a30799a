"""A silence no longer than the job's own earlier silences after the same line is that phase again."""

from datetime import datetime, timedelta, timezone

from crashcart.agent.policies.evidence import Evidence, JobFacts, TextDoc
from crashcart.agent.policies.quiet_phase import quiet_as_before, shape
from crashcart.tools.cluster import ProgressPoint

T0 = datetime(2026, 3, 4, 8, 0, tzinfo=timezone.utc)


def _stamp(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%d %H:%M:%S")


def _ev(lines: list[str], now_min: float, state: str = "RUNNING", points=()) -> Evidence:
    ev = Evidence(now=T0 + timedelta(minutes=now_min), trigger={"kind": "job_stalled", "job": "7"})
    ev.jobs["7"] = JobFacts(job="7", state=state, nodes=["n1"], gpus=8)
    ev.docs.append(TextDoc("log", "job:7", lines, "get_logs:7"))
    ev.progress["7"] = ([ProgressPoint(time=T0 + timedelta(minutes=m), step=s) for m, s in points], [])
    return ev


# An eval announced three times: the first two passes took 60 and 64 minutes.
LOG = [
    f"[{_stamp(0)}] step 1000 loss 1.20",
    f"[{_stamp(1)}] starting eval on 5000 prompts",
    f"[{_stamp(61)}] eval finished in 3600s",
    f"[{_stamp(120)}] step 2000 loss 1.10",
    f"[{_stamp(121)}] starting eval on 5000 prompts",
    f"[{_stamp(185)}] eval finished in 3840s",
    f"[{_stamp(240)}] step 3000 loss 1.05",
    f"[{_stamp(241)}] starting eval on 5000 prompts",
]


def test_numbers_do_not_change_a_lines_shape():
    assert shape("[2026-01-01 00:00:01] step 10 loss 0.5") == shape("[2026-02-03 04:05:06] step 20000 loss 1.25")
    assert shape("starting eval") != shape("eval finished")


def test_silence_as_long_as_before_is_that_phase():
    phase = quiet_as_before(_ev(LOG, 241 + 70), "7")
    assert phase is not None
    assert [round(m) for m in phase.earlier_min] == [60, 64]
    assert round(phase.silent_min) == 70 and "starting eval" in phase.line


def test_silence_far_longer_than_before_is_not():
    assert quiet_as_before(_ev(LOG, 241 + 200), "7") is None


def test_spans_where_the_step_moved_were_not_quiet():
    # An excerpt: a step line, then the next save two hours on. The log alone reads as two-hour
    # silences after each step line; the progress feed shows the step moving in between.
    log = [f"[{_stamp(0)}] step 1000 loss 1.2", f"[{_stamp(120)}] saved checkpoint 1",
           f"[{_stamp(121)}] step 2000 loss 1.1", f"[{_stamp(240)}] saved checkpoint 2",
           f"[{_stamp(241)}] step 3000 loss 1.0"]
    assert quiet_as_before(_ev(log, 241 + 50), "7") is not None
    points = [(m, 1000 + m * 10) for m in range(0, 241, 20)]
    assert quiet_as_before(_ev(log, 241 + 50, points=points), "7") is None


def test_a_job_that_is_not_running_is_not_in_a_phase():
    assert quiet_as_before(_ev(LOG, 241 + 70, state="FAILED"), "7") is None


def test_a_log_without_an_earlier_occurrence_proves_nothing():
    assert quiet_as_before(_ev(LOG[:2], 1 + 30), "7") is None


def test_periodic_lines_are_not_a_phase():
    # Step lines follow step lines: the gaps between them are training (or an excerpt), whatever their length.
    log = [f"[{_stamp(m)}] step {1000 + m * 10} loss 1.1" for m in (0, 300, 330, 360)]
    assert quiet_as_before(_ev(log, 360 + 60), "7") is None
