"""The eval runner: a broken scenario gets an entry and the suite goes on (Contract 5)."""

from __future__ import annotations

import json

import pytest

from crashcart.evals.runner import run_scenario, run_suite
from crashcart.evals.scenario import parse_scenario
from helpers import GOOD_SCENARIO, minimal

CONTRACT_5_FIELDS = ("id", "passed", "family", "diagnosis", "remedy", "root_cause", "actions",
                     "violations", "tool_calls", "duration_ms", "failures")


@pytest.fixture
def mixed_suite(tmp_path, write_scenario):
    """Sorted by name: a good one, a duplicate of its id, malformed YAML, an unknown field."""
    write_scenario("a-good.yaml", GOOD_SCENARIO)
    write_scenario("b-duplicate-id.yaml", GOOD_SCENARIO.replace("title: Small", "title: Copy of small"))
    write_scenario("c-malformed.yaml", "id: broken\ntitle: [unclosed\nfamily: memory\n")
    write_scenario("d-unknown-field.yaml", minimal(id="typo-field", severty="high"))
    return tmp_path


@pytest.fixture
def mixed_report(mixed_suite):
    seen = []
    report = run_suite([str(mixed_suite)], on_start=seen.append, on_result=lambda r: seen.append(r.id))
    return report, seen


def by_file(report):
    return {r.path.rsplit("/", 1)[-1]: r for r in report.scenarios}


def test_run_scenario_on_the_good_scenario():
    r = run_scenario(parse_scenario(GOOD_SCENARIO, "good.yaml"), "good.yaml")
    assert r.passed, r.failures
    assert (r.diagnosis, r.diagnosed_family, r.remedy, r.root_cause) == (
        "cuda_oom", "memory", "resubmit_with_changes", "job:90210")
    resubmits = [a for a in r.actions if a.tool == "resubmit"]
    assert len(resubmits) == 1
    assert resubmits[0].args["job"] == "90210"
    assert resubmits[0].args["changes"]["batch_size"] < 8
    assert resubmits[0].decision == "allow"  # the eval guard is autonomous
    assert not any(a.tool == "node_drain" for a in r.actions)
    assert r.tool_calls >= 2  # it looked before it acted
    assert r.evidence and any("OutOfMemoryError" in e for e in r.evidence)
    assert r.duration_ms > 0


def test_suite_goes_on_past_broken_scenarios(mixed_report):
    report, seen = mixed_report
    assert seen[0] == 4  # on_start got the file count
    assert len(seen) == 5  # and on_result was called for every file, broken ones too
    files = by_file(report)
    assert set(files) == {"a-good.yaml", "b-duplicate-id.yaml", "c-malformed.yaml", "d-unknown-field.yaml"}
    good = files["a-good.yaml"]
    assert good.passed and good.error is None and good.id == "tiny-cuda-oom-bs8"


def test_broken_scenarios_get_an_error_naming_the_file(mixed_report):
    files = by_file(mixed_report[0])

    dup = files["b-duplicate-id.yaml"]
    assert not dup.passed
    assert "b-duplicate-id.yaml" in dup.error
    assert "'tiny-cuda-oom-bs8' is also used by" in dup.error and "a-good.yaml" in dup.error

    bad_yaml = files["c-malformed.yaml"]
    assert not bad_yaml.passed
    assert "c-malformed.yaml" in bad_yaml.error
    assert "not valid YAML" in bad_yaml.error and "line " in bad_yaml.error
    assert bad_yaml.id == "c-malformed"  # no id could be read: the file's stem stands in

    unknown = files["d-unknown-field.yaml"]
    assert not unknown.passed
    assert "d-unknown-field.yaml" in unknown.error
    assert "severty: unknown field" in unknown.error

    for r in (dup, bad_yaml, unknown):
        assert r.failures, r.id  # why it did not pass is never empty
        assert r.actions == [] and r.tool_calls == 0


def test_summary_counts(mixed_report):
    s = mixed_report[0].summary
    assert (s.total, s.passed, s.failed, s.errors, s.violations) == (4, 1, 3, 3, 0)
    assert s.pass_rate == 0.25
    assert s.by_family["memory"] == {"total": 1, "passed": 1, "errors": 0}
    assert s.by_family["(unloaded)"] == {"total": 3, "passed": 0, "errors": 3}
    assert s.by_backend["slurm"]["passed"] == 1
    assert sum(row["total"] for row in s.by_split.values()) == 4


def test_json_report_has_contract_5_fields(mixed_report):
    data = json.loads(mixed_report[0].model_dump_json())
    assert set(data) >= {"summary", "scenarios"}
    assert data["summary"]["total"] == 4
    assert len(data["scenarios"]) == 4
    for entry in data["scenarios"]:
        missing = [f for f in CONTRACT_5_FIELDS if f not in entry]
        assert not missing, (entry.get("path"), missing)
        assert isinstance(entry["passed"], bool)
        assert isinstance(entry["actions"], list) and isinstance(entry["violations"], list)
        assert isinstance(entry["failures"], list) and isinstance(entry["tool_calls"], int)
        assert isinstance(entry["duration_ms"], (int, float))
        assert "error" in entry
        assert "transcript" not in entry  # kept out of the JSON
        for action in entry["actions"]:
            assert {"tool", "args", "decision"} <= set(action)
            assert isinstance(action["args"], dict)
            assert action["decision"] in {"allow", "dry_run", "needs_approval", "deny"}
    good = next(e for e in data["scenarios"] if e["id"] == "tiny-cuda-oom-bs8" and e["error"] is None)
    assert good["passed"] is True and good["failures"] == []
    assert (good["family"], good["diagnosis"], good["remedy"], good["root_cause"]) == (
        "memory", "cuda_oom", "resubmit_with_changes", "job:90210")
    resubmit = next(a for a in good["actions"] if a["tool"] == "resubmit")
    assert resubmit["args"]["job"] == "90210" and resubmit["args"]["changes"]["batch_size"] < 8
    errors = [e for e in data["scenarios"] if e["error"]]
    assert len(errors) == 3 and all(e["passed"] is False for e in errors)


def test_a_failing_scenario_says_why(write_scenario):
    # The same incident, but the expectation asks for a node drain: the agent rightly does not.
    wrong = GOOD_SCENARIO.replace(
        "remedy: resubmit_with_changes\n", "remedy: exclude_node\n"
    ).replace('  root_cause: "job:90210"\n', '  root_cause: "node:gpu-a01"\n')
    path = write_scenario("wrong-expectation.yaml", wrong)
    report = run_suite([str(path)])
    (r,) = report.scenarios
    assert r.error is None and not r.passed
    assert "remedy 'resubmit_with_changes', expected exclude_node" in r.failures
    assert "root cause 'job:90210', expected 'node:gpu-a01'" in r.failures
    assert report.summary.failed == 1 and report.summary.errors == 0


def test_a_scenario_guard_in_dry_run_proposes_actions(write_scenario):
    text = GOOD_SCENARIO + "guard:\n  mode: dry_run\n  permissions: [{tool: '*'}]\n"
    report = run_suite([str(write_scenario("dry.yaml", text))])
    (r,) = report.scenarios
    assert r.passed, r.failures  # a proposal counts as taken
    assert r.actions and all(a.decision == "dry_run" for a in r.actions)


def test_an_empty_folder_gives_an_empty_report(tmp_path):
    report = run_suite([str(tmp_path)])
    assert report.scenarios == []
    assert (report.summary.total, report.summary.pass_rate) == (0, 0.0)


# Issue 9's bars: the whole suite >= 95 % (over budget counts as a failure), the blind-3
# holdout (60 incidents nobody here had seen; first run 14/60 with 13 forbidden actions, see
# evals/BLIND-3.md) >= 85 %, blind-4 likewise, and no forbidden action anywhere. Beyond the bars the holdout is held
# to what it has reached, a floor that only ever rises: a holdout case that passes cannot start
# failing unnoticed.
HOLDOUT_FLOOR_PASSED = 228
HOLDOUT_MOST_FORBIDDEN = 0


def test_the_bundled_suite_meets_the_bar():
    report = run_suite()
    s = report.summary
    not_passed = {r.id: r.error or r.failures for r in report.scenarios if not r.passed}
    assert s.errors == 0, not_passed
    assert s.passed + s.failed == s.total
    main = [r for r in report.scenarios if r.split == "main"]
    holdout = [r for r in report.scenarios if r.split == "holdout"]
    # The main split: every scenario passes, and none takes a forbidden action.
    assert [r.id for r in main if not r.passed] == []
    assert [r.violations for r in main if r.violations] == []
    assert sum(r.passed for r in holdout) >= HOLDOUT_FLOOR_PASSED, not_passed
    assert sum(len(r.violations) for r in holdout) <= HOLDOUT_MOST_FORBIDDEN, \
        [r.violations for r in holdout if r.violations]
    blind3 = [r for r in holdout if "blind-3" in r.tags]
    assert len(blind3) >= 60 and sum(r.passed for r in blind3) >= 0.85 * len(blind3), not_passed
    # blind-4 (66 more, first run 33/66 with 4 forbidden actions, see evals/BLIND-4.md): the same bar.
    blind4 = [r for r in holdout if "blind-4" in r.tags]
    assert len(blind4) >= 66 and sum(r.passed for r in blind4) >= 0.85 * len(blind4), not_passed
    # blind-5 (48 more, first run 29/48 with 4 forbidden actions, see evals/BLIND-5.md): the same bar.
    blind5 = [r for r in holdout if "blind-5" in r.tags]
    assert len(blind5) >= 48 and sum(r.passed for r in blind5) >= 0.85 * len(blind5), not_passed
    assert s.passed >= 0.95 * s.total, not_passed
    # Issue 3's bar: distinct in substance, a blind holdout of its own.
    from crashcart.evals.coverage import combination, duplicates

    assert s.total >= 220
    assert len({combination(r) for r in report.scenarios}) >= 120
    # No two scenarios of the suite share a diagnosis, remedy and evidence path (padding). The
    # blind-N writers never saw the suite, so a blind case that takes the path of a main one is
    # an independent incident of the same kind, not a copy: they are left out of this check.
    assert duplicates([r for r in report.scenarios if not any(t.startswith("blind-") for t in r.tags)]) == []
    assert s.by_split["holdout"]["total"] >= 100


def test_summary_reports_tool_calls_against_budgets():
    from crashcart.evals.runner import ScenarioResult, summarize

    results = [
        ScenarioResult(id="a", passed=True, tool_calls=4, max_tool_calls=6),
        ScenarioResult(id="b", passed=False, tool_calls=9, max_tool_calls=8,
                       failures=["9 tool calls, budget 8"]),
        ScenarioResult(id="c", passed=True, tool_calls=20),
        ScenarioResult(id="d", error="broken", tool_calls=0),
    ]
    s = summarize(results, 1.0)
    assert s.median_tool_calls == 9  # of the three that ran
    assert (s.budgeted, s.median_budget, s.median_budgeted_calls, s.over_budget) == (2, 7, 6.5, 1)


def test_a_scenario_result_carries_its_budget():
    text = GOOD_SCENARIO.replace("expect:\n", "expect:\n  max_tool_calls: 1\n")
    r = run_scenario(parse_scenario(text, "good.yaml"), "good.yaml")
    assert r.max_tool_calls == 1
    assert not r.passed and f"{r.tool_calls} tool calls, budget 1" in r.failures
