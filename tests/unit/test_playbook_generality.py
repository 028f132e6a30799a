"""Playbook signals are the general form of an error, never one incident's names.

A signal that mentions a node, a job id or a user from a bundled scenario would pass that
scenario by memorising it; these tests fail the moment one does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from crashcart.evals.scenario import discover, load_scenario
from crashcart.playbooks import load_playbooks
from crashcart.playbooks._model import Signal
from crashcart.tools.cluster import Job


SHARED_ACCOUNTS = {"system", "root", "admin", "default", "nobody", "slurm", "ray"}


@dataclass(frozen=True)
class Literal:
    kind: str
    value: str
    scenario: str


def _job_literals(job: Job, scenario: str) -> list[Literal]:
    found = [Literal("job id", job.id, scenario)]
    if job.user:
        found.append(Literal("user", job.user, scenario))
    found += [Literal("node", n, scenario) for n in job.nodes]
    for attempt in job.attempts:
        found += _job_literals(attempt, scenario)
    return found


def scenario_literals() -> list[Literal]:
    """Every node name, job id and user any bundled scenario mentions (attempts included)."""
    found: list[Literal] = []
    for path in discover():
        sc = load_scenario(path)
        found += [Literal("node", n.name, sc.id) for n in sc.cluster.nodes]
        for job in sc.cluster.jobs:
            found += _job_literals(job, sc.id)
        if sc.trigger.job:
            found.append(Literal("job id", sc.trigger.job, sc.id))
        if sc.trigger.node:
            found.append(Literal("node", sc.trigger.node, sc.id))
    # Accounts every cluster has are words of the error texts themselves ("unhandled system
    # error"), not names a scenario made up.
    found = [lit for lit in found if lit.value.lower() not in SHARED_ACCOUNTS]
    unique = {(lit.kind, lit.value.lower()): lit for lit in found}
    return sorted(unique.values(), key=lambda lit: (lit.kind, lit.value))


def _signal_texts(sig: Signal) -> list[str]:
    """What a signal matches on: its pattern, its exact values, its config values."""
    texts = [sig.pattern] if sig.pattern else []
    texts += [sig.newest_of] if sig.newest_of else []
    texts += [str(v) for v in sig.values or []]
    texts += [str(v) for v in sig.config_values or []]
    return texts


def _names_pattern(literals: list[Literal]) -> re.Pattern[str]:
    """Every literal as a name of its own, not inside a longer word: a user `bea` is not in
    `heartbeats`, but a node `gpu-b07` is in `(gpu-b07|...)` or `on gpu-b07:`. One pattern for
    all of them: thousands of names against hundreds of signals must stay quick."""
    names = sorted({lit.value for lit in literals}, key=len, reverse=True)
    return re.compile(r"(?<![A-Za-z0-9])(" + "|".join(map(re.escape, names)) + r")(?![A-Za-z0-9])", re.I)


def offending(signals: list[tuple[str, int, Signal]], literals: list[Literal]) -> list[str]:
    by_name: dict[str, list[Literal]] = {}
    for lit in literals:
        by_name.setdefault(lit.value.lower(), []).append(lit)
    names = _names_pattern(literals)
    problems = []
    for label, idx, sig in signals:
        for text in _signal_texts(sig):
            # Overlapping names (gpu-b0 and gpu-b07) are all found: search from each start.
            found = {m.group(1).lower() for i in range(len(text)) if (m := names.match(text, i))}
            for name in sorted(found):
                for lit in by_name[name]:
                    problems.append(f"{label} signal {idx} ({sig.where}) names {lit.kind} {lit.value!r} "
                                    f"from scenario {lit.scenario}: {text!r}")
    return problems


def all_signals() -> list[tuple[str, int, Signal]]:
    return [(entry.name, i, sig) for entry in load_playbooks() for i, sig in enumerate(entry.label.signals)]


@pytest.fixture(scope="module")
def literals() -> list[Literal]:
    return scenario_literals()


def test_the_scenarios_give_names_to_look_for(literals):
    kinds = {lit.kind for lit in literals}
    assert kinds == {"node", "job id", "user"}
    assert sum(lit.kind == "node" for lit in literals) >= 50
    assert sum(lit.kind == "job id" for lit in literals) >= 50
    assert sum(lit.kind == "user" for lit in literals) >= 20


def test_no_signal_names_a_scenario_node_job_or_user(literals):
    signals = all_signals()
    assert sum(1 for _, _, s in signals if s.pattern) >= 50
    problems = offending(signals, literals)
    assert not problems, "scenario-specific signals:\n" + "\n".join(problems)


@pytest.mark.parametrize("pattern, caught", [
    (r"NVRM: Xid .* on gpu-b07", True),                  # a node name
    (r"srun: error: (gpu-b07|gpu-b08): task \d+", True),  # inside an alternation
    (r"job 48213 failed", True),                         # a job id
    (r"DANA's job", True),                               # a user, any case
    (r"missed too many heartbeats", False),              # a user name inside a word is not a mention
    (r"Xid \(PCI:[0-9a-f:.]+\): 79\b", False),           # the general form
])
def test_the_check_catches_memorised_names(pattern, caught):
    literals = [Literal("node", "gpu-b07", "s"), Literal("job id", "48213", "s"),
                Literal("user", "dana", "s"), Literal("user", "bea", "s")]
    sig = Signal(where="log", pattern=pattern)
    assert bool(offending([("probe", 0, sig)], literals)) is caught
