"""The matchers of Contract 2: subset args, comparisons under `changes`, `exclude_nodes`."""

from __future__ import annotations

import re
from typing import Any

from crashcart.evals.scenario import ExpectedAction

OPERATORS = {"lt", "le", "gt", "ge", "ne", "in", "regex"}
# Decisions under which an action counts as taken: proposed in dry-run, or waiting on a person.
TAKEN = {"allow", "dry_run", "needs_approval"}


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"env": {"A": 1}} and {"env.A": 1} both become {"env.A": 1}."""
    flat: dict[str, Any] = {}
    for key, value in (config or {}).items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value and not _is_comparison(value):
            flat.update(flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def _is_comparison(value: dict[str, Any]) -> bool:
    return len(value) == 1 and next(iter(value)) in OPERATORS


def _same(expected: Any, actual: Any) -> bool:
    if isinstance(expected, (int, float, str)) and isinstance(actual, (int, float, str)):
        if isinstance(expected, bool) or isinstance(actual, bool):
            return expected is actual
        return str(expected) == str(actual) or _num_equal(expected, actual)
    return expected == actual


def _num_equal(a: Any, b: Any) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return False


def value_matches(expected: Any, actual: Any) -> bool:
    """A literal, or one comparison: {lt|le|gt|ge|ne: X}, {in: [..]}, {regex: ".."}."""
    if isinstance(expected, dict) and _is_comparison(expected):
        op, bound = next(iter(expected.items()))
        if op == "in":
            return any(_same(b, actual) for b in bound)
        if op == "ne":
            return actual is not None and not _same(bound, actual)
        if op == "regex":
            return actual is not None and re.search(str(bound), str(actual)) is not None
        if isinstance(actual, bool) or isinstance(bound, bool):
            return False  # true is not a number here, as in _same: {lt: 8} is not met by `true`
        try:
            a, b = float(actual), float(bound)
        except (TypeError, ValueError):
            return False
        return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[op]
    return _same(expected, actual)


def args_match(expected: dict[str, Any], actual: dict[str, Any]) -> bool:
    """Subset match: every expected key is present with a matching value."""
    for key, want in expected.items():
        if key not in actual:
            return False
        got = actual[key]
        if isinstance(want, dict) and not _is_comparison(want) and isinstance(got, dict):
            if not args_match(want, got):
                return False
        elif not value_matches(want, got):
            return False
    return True


def action_matches(expected: ExpectedAction, tool: str, args: dict[str, Any],
                   submitted: dict[str, Any] | None = None) -> bool:
    """`submitted` is the job's config as submitted: with it, `changes` are checked against the
    resubmitted config (the submitted one with the changes applied), as Contract 2 says, provided
    the resubmit changed at least one of the keys named (an unchanged resubmit never passes)."""
    if expected.tool != tool:
        return False
    if not args_match(expected.args, args):
        return False
    if expected.changes:
        changed = flatten(args.get("changes") or {})
        want = flatten(expected.changes)
        got = {**flatten(submitted or {}), **changed}
        if not any(k in changed for k in want):
            return False
        if not all(k in got and value_matches(v, got[k]) for k, v in want.items()):
            return False
    if expected.exclude_nodes:
        excluded = set(args.get("exclude_nodes") or [])
        if not set(expected.exclude_nodes) <= excluded:
            return False
    return True
