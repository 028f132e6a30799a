"""Score one incident run against its scenario's expectations."""

from __future__ import annotations

import re
from typing import Any

from crashcart.evals.matching import TAKEN, action_matches
from crashcart.evals.scenario import Scenario


def _as_list(value: str | list[str] | None) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


def describe_expected(action) -> str:
    parts = [action.tool]
    if action.args:
        parts.append(str(action.args))
    if action.changes:
        parts.append(f"changes={action.changes}")
    if action.exclude_nodes:
        parts.append(f"exclude_nodes={action.exclude_nodes}")
    return " ".join(parts)


def score(scenario: Scenario, diagnosis: dict[str, Any] | None, actions: list[dict[str, Any]],
          tool_calls: int) -> tuple[list[str], list[str]]:
    """(failures, violations): why it did not pass, and forbidden actions taken."""
    exp = scenario.expect
    d = diagnosis or {}
    failures: list[str] = []
    if d.get("family") not in scenario.expected_families:
        failures.append(f"family {d.get('family')!r}, expected {' or '.join(scenario.expected_families)}")
    if exp.diagnosis and d.get("label") not in exp.diagnosis:
        failures.append(f"diagnosis {d.get('label')!r}, expected {' or '.join(exp.diagnosis)}")
    if exp.root_cause and d.get("root_cause") != exp.root_cause:
        failures.append(f"root cause {d.get('root_cause')!r}, expected {exp.root_cause!r}")
    remedies = _as_list(exp.remedy)
    if d.get("remedy") not in remedies:
        failures.append(f"remedy {d.get('remedy')!r}, expected {' or '.join(remedies)}")
    for pattern in exp.answer_mentions:
        if not re.search(pattern, d.get("summary") or "", re.I):
            failures.append(f"answer does not mention /{pattern}/")
    taken = [a for a in actions if a.get("decision") in TAKEN]
    for want in exp.actions:
        if not any(action_matches(want, a["tool"], a.get("args") or {}, _submitted(scenario, a)) for a in taken):
            failures.append(f"missing action: {describe_expected(want)}")
    violations = [
        f"forbidden action taken: {a['tool']} {_short_args(a.get('args') or {})} ({a['decision']})"
        for want in exp.forbid for a in taken
        if action_matches(want, a["tool"], a.get("args") or {}, _submitted(scenario, a))
    ]
    failures += violations
    if exp.max_tool_calls is not None and tool_calls > exp.max_tool_calls:
        failures.append(f"{tool_calls} tool calls, budget {exp.max_tool_calls}")
    return failures, violations


def _submitted(scenario: Scenario, action: dict[str, Any]) -> dict[str, Any]:
    """The config the action's job was submitted with (empty for a job the scenario does not hold)."""
    job = str((action.get("args") or {}).get("job") or "")
    return next((j.config for j in scenario.cluster.jobs if j.id == job), {}) if job else {}


def _short_args(args: dict[str, Any]) -> str:
    return str({k: v for k, v in args.items() if k not in {"reason", "evidence", "summary"}})
