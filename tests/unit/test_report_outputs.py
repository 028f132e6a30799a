"""The eval's other outputs: log-verdict scoring, the coverage page, the HTML report."""

import re
from pathlib import Path

from crashcart.evals.coverage import duplicates, evidence_path, render_coverage
from crashcart.evals.html_report import render_html
from crashcart.evals.logcases import confusion_rows, run_logs
from crashcart.evals.runner import EvalReport, ScenarioResult, run_suite, summarize

OOM_LOG = """\
[2026-03-02 10:00:01,002] INFO step 1200 loss 2.31
[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.21 GiB is free.
"""
XID_LOG = "[51234.118739] NVRM: Xid (PCI:0000:ba:00): 79, pid=41235, name=python, GPU has fallen off the bus.\n"


def _case(root: Path, family_dir: str, slug: str, log: str, yaml_text: str) -> None:
    d = root / family_dir
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{slug}.log").write_text(log)
    (d / f"{slug}.yaml").write_text(yaml_text)


def test_log_cases_score_by_family_with_a_confusion_matrix(tmp_path):
    _case(tmp_path, "memory", "oom", OOM_LOG, "family: memory\nremedy: resubmit_with_changes\nsource: \"constructed: test\"\n")
    _case(tmp_path, "hardware", "xid", XID_LOG, "family: hardware\nremedy: exclude_node\nsource: owner/repo#1\n")
    # A deliberately wrong expectation: the scorer must count it wrong, not agree with it.
    _case(tmp_path, "storage", "wrong", OOM_LOG, "family: storage\nremedy: escalate_storage\nsource: \"constructed: test\"\n")
    _case(tmp_path, "none", "broken", "x\n", "family: nonsense\nremedy: none\nsource: x\n")
    report = run_logs(tmp_path)
    s = report.summary
    assert (s.total, s.errors, s.real_excerpts) == (4, 1, 1)
    assert s.family_accuracy == round(2 / 3, 4)
    assert s.confusion["storage"] == {"memory": 1}
    assert s.by_family["hardware"] == {"total": 1, "family_ok": 1, "remedy_ok": 1}
    broken = next(c for c in report.cases if c.id == "broken")
    assert "broken.yaml" in broken.error and "family" in broken.error
    cols, rows = confusion_rows(s)
    assert "memory" in cols and ["storage"] + [1 if c == "memory" else 0 for c in cols] in rows


def _result(id_, **kw):
    base = dict(id=id_, passed=True, family="memory", backend="slurm", diagnosis="cuda_oom",
                remedy="resubmit_with_changes", expected_diagnosis=["cuda_oom"],
                expected_remedy=["resubmit_with_changes"], signals=["log#0"], trigger="job_failed",
                tools_called=["sacct", "get_logs"])
    return ScenarioResult(**{**base, **kw})


def test_coverage_flags_scenarios_that_differ_only_in_names():
    a, b = _result("a"), _result("b")
    c = _result("c", signals=["log#0", "log#1"])
    d = _result("d", backend="kubernetes")
    assert duplicates([a, b, c, d]) == [["a", "b"]]
    assert evidence_path(c) == "log#0 + log#1 via job_failed > sacct > get_logs"
    page = render_coverage(EvalReport(summary=summarize([a, b, c, d], 0.1), scenarios=[a, b, c, d]))
    assert "distinct (backend, diagnosis, remedy) combinations: **2**" in page
    assert "| a | main | memory | slurm | cuda_oom | resubmit_with_changes |" in page
    assert "- a, b" in page


def test_html_report_is_self_contained_and_shows_failures(tmp_path):
    scenario = Path(__file__).parent.parent.parent / "evals/scenarios/memory"
    good = next(scenario.glob("cuda-oom-*.yaml"))
    bad = tmp_path / "bad.yaml"
    # The same incident with a wrong expectation: it must show up as a failure with its transcript.
    bad.write_text(good.read_text().replace("id: cuda-oom", "id: wrong-cuda-oom", 1)
                   .replace("remedy: resubmit_with_changes", "remedy: escalate_user", 1))
    report = run_suite([str(good), str(bad)])
    page = render_html(report)
    assert "<svg" in page and "1/2" in page
    assert "wrong-cuda-oom" in page and "remedy &#x27;resubmit_with_changes&#x27;, expected escalate_user" in page
    assert "get_logs" in page  # the transcript of the failure
    assert "<script" not in page and not re.search(r"(src|href)=\"https?://", page)


def test_html_report_draws_a_capacity_answer_by_hour_and_the_call_budget():
    chart = {"title": "GPUs waiting and running by hour of day", "hours": list(range(24)),
             "series": {"waiting": [0.0] * 13 + [12.0] * 4 + [0.0] * 7, "running": [20.0] * 24}, "capacity": 32}
    results = [ScenarioResult(id="cap-q", passed=True, summary="a QOS cap binds", chart=chart, tool_calls=6,
                              max_tool_calls=8)]
    page = render_html(EvalReport(summary=summarize(results, 1.0), scenarios=results))
    assert "<h2>Capacity answers</h2>" in page and "a QOS cap binds" in page
    assert page.split("Capacity answers")[1].count("<rect") == 48  # two series, 24 hours
    assert "<title>14:00 waiting 12</title>" in page
    assert "median tool calls" in page and "0/1 (median 6 of 8)" in page
