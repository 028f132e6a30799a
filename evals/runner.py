"""Run scenarios through the agent and score them (Contract 5's eval JSON)."""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from statistics import median
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from crashcart.evals.logcases import LogReport
from crashcart.evals.scenario import Scenario, ScenarioError, discover, load_scenario
from crashcart.evals.scoring import score

EVAL_GUARD = Path(__file__).parent / "guard.yaml"


class ActionTaken(BaseModel):
    tool: str
    args: dict[str, Any]
    decision: str
    reason: str = ""


class ScenarioResult(BaseModel):
    """One scenario's outcome: what the agent concluded, did, and why it did (not) pass."""

    id: str
    passed: bool = False
    family: str | None = None
    """The scenario's family (what the scorecard groups by)."""
    backend: str | None = None
    split: str = "main"
    tags: list[str] = Field(default_factory=list)
    """The scenario's own tags (holdout, blind-3, hard, negative_control, ...)."""
    path: str = ""
    diagnosis: str | None = None
    diagnosed_family: str | None = None
    remedy: str | None = None
    root_cause: str | None = None
    confidence: float | None = None
    evidence: list[str] = Field(default_factory=list)
    evidence_path: list[str] = Field(default_factory=list)
    signals: list[str] = Field(default_factory=list)
    candidates: list[str] = Field(default_factory=list)
    """Other labels that matched and lost (the symptoms the cause outranked)."""
    ruled_out: list[str] = Field(default_factory=list)
    trigger: str | None = None
    """What raised it (job_failed, chat, ...): where the evidence path starts."""
    tools_called: list[str] = Field(default_factory=list)
    """The read tools the investigation used, in first-use order."""
    expected_diagnosis: list[str] = Field(default_factory=list)
    expected_remedy: list[str] = Field(default_factory=list)
    actions: list[ActionTaken] = Field(default_factory=list)
    """Every write action attempted, with the guard's decision."""
    violations: list[str] = Field(default_factory=list)
    summary: str | None = None
    """The diagnosis in words (a capacity question's answer)."""
    chart: dict[str, Any] | None = None
    """A capacity answer's chart (GPUs waiting and running by hour of day), drawn in the HTML report."""
    tool_calls: int = 0
    max_tool_calls: int | None = None
    """The scenario's budget of tool calls, when it sets one: more counts as a failure."""
    duration_ms: float = 0.0
    failures: list[str] = Field(default_factory=list)
    error: str | None = None
    """Set when the scenario could not be loaded or run."""
    decided_by: str | None = None
    """llm and auto: which policy concluded, and why."""
    model: dict[str, Any] | None = None
    """llm and auto: requests, tokens_in, tokens_out, cost_usd, unpriced, model_latency_ms, retries."""
    transcript: list[dict[str, Any]] = Field(default_factory=list, exclude=True)


class EvalSummary(BaseModel):
    total: int
    passed: int
    failed: int
    errors: int
    pass_rate: float
    violations: int
    duration_s: float
    by_family: dict[str, dict[str, int]]
    by_backend: dict[str, dict[str, int]]
    by_split: dict[str, dict[str, int]]
    median_tool_calls: float = 0.0
    budgeted: int = 0
    """Scenarios that set `max_tool_calls`."""
    median_budget: float | None = None
    """The median `max_tool_calls` over the budgeted scenarios."""
    median_budgeted_calls: float | None = None
    """The median tool calls over the same scenarios: what the budgets are measured against."""
    over_budget: int = 0
    """Scenarios that took more calls than their budget (each also counted as failed)."""
    model_by_family: dict[str, dict[str, float]] = Field(default_factory=dict)
    """llm and auto: per family, scenarios the model decided, tokens in and out, cost, latency, tool calls."""


class EvalReport(BaseModel):
    summary: EvalSummary
    scenarios: list[ScenarioResult]
    logs: LogReport | None = None
    """`crashcart diagnose` scored on raw logs (evals/logs), when the bundled suite runs."""


@lru_cache(maxsize=1)
def _eval_guard():
    from crashcart.agent.guard import load_policy

    return load_policy(EVAL_GUARD)


def run_scenario(scenario: Scenario, path: str = "", policy_name: str = "playbook", store: Any = None,
                 model: Any = None) -> ScenarioResult:
    from crashcart.agent.guard import policy_from_dict
    from crashcart.agent.policies import make_policy
    from crashcart.agent.runner import make_deps, start_incident
    from crashcart.agent.store import IncidentStore
    from crashcart.tools.backends.fixture import FixtureBackend

    started = time.perf_counter()
    result = ScenarioResult(id=scenario.id, family=scenario.family, backend=scenario.backend,
                            split=scenario.split, tags=list(scenario.tags), path=path)
    guard_policy = (
        policy_from_dict(scenario.guard, source=f"{path}: guard") if scenario.guard else _eval_guard()
    )
    backend = FixtureBackend(scenario.cluster, scenario.backend)
    store = store or IncidentStore(":memory:")
    # `model`: provider:model, a Model object (a fake), or a whole policy built by the caller.
    policy = model if hasattr(model, "next_calls") else make_policy(policy_name, model) if model else make_policy(policy_name)
    deps = make_deps(backend, policy, guard_policy, store, cluster=scenario.id)
    run = start_incident(deps, scenario.trigger.model_dump(), cluster=scenario.id, source=f"eval:{scenario.id}")
    state = run.state
    d = state.get("diagnosis") or {}
    actions = state.get("actions") or []
    observations = state.get("observations") or []
    result.diagnosis, result.diagnosed_family = d.get("label"), d.get("family")
    result.remedy, result.root_cause, result.confidence = d.get("remedy"), d.get("root_cause"), d.get("confidence")
    result.evidence, result.evidence_path = d.get("evidence") or [], d.get("evidence_path") or []
    result.signals = d.get("signals") or []
    result.chart = d.get("chart")
    result.summary = d.get("summary")
    result.candidates = d.get("candidates") or []
    result.ruled_out = [r.split(" (", 1)[0] for r in d.get("ruled_out") or []]
    result.tools_called = list(dict.fromkeys(o["tool"] for o in observations))
    result.trigger = scenario.trigger.kind
    result.expected_diagnosis = list(scenario.expect.diagnosis or [])
    exp_remedy = scenario.expect.remedy
    result.expected_remedy = [exp_remedy] if isinstance(exp_remedy, str) else list(exp_remedy)
    result.actions = [ActionTaken(tool=a["tool"], args=a["args"], decision=a["decision"], reason=a.get("reason", "")) for a in actions]
    result.tool_calls = len(observations) + len(actions)
    result.max_tool_calls = scenario.expect.max_tool_calls
    result.failures, result.violations = score(scenario, d, actions, result.tool_calls)
    result.passed = not result.failures
    result.transcript = observations
    result.decided_by = d.get("decided_by")
    if policy_name != "playbook":
        from crashcart.agent.policies.llm import usage_of

        result.model = usage_of(state)
    result.duration_ms = round((time.perf_counter() - started) * 1000, 1)
    return result


def _run_file(path: Path, policy_name: str, store: Any, model: Any = None) -> tuple[str | None, ScenarioResult]:
    """(the scenario's id, its result); one broken scenario is reported, never raised."""
    try:
        scenario = load_scenario(path)
        return scenario.id, run_scenario(scenario, str(path), policy_name, store, model)
    except ScenarioError as e:
        return None, ScenarioResult(id=Path(path).stem, path=str(path), error=str(e), failures=[e.message])
    except Exception as e:  # noqa: BLE001 - the suite goes on; the entry says what broke
        return None, ScenarioResult(id=Path(path).stem, path=str(path),
                                    error=f"{path}: {type(e).__name__}: {e}", failures=["crashed"])


def _run_chunk(paths: list[Path], policy_name: str, model: Any = None,
               on_result: Callable[[ScenarioResult], None] | None = None) -> list[tuple[str | None, ScenarioResult]]:
    from crashcart.agent.store import IncidentStore

    store = IncidentStore(":memory:")
    out = []
    for p in paths:
        out.append(_run_file(p, policy_name, store, model))
        if on_result:
            on_result(out[-1][1])
    return out


def _run_concurrently(files: list[Path], policy_name: str, model: Any, concurrency: int,
                      on_result: Callable[[ScenarioResult], None] | None) -> list[list[tuple[str | None, ScenarioResult]]]:
    """A model's evals wait on the network, not the CPU: threads, each with its own store and policy."""
    from concurrent.futures import ThreadPoolExecutor

    n = max(1, min(concurrency, len(files)))
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda chunk: _run_chunk(chunk, policy_name, model, on_result),
                             [files[i::n] for i in range(n)]))


def _workers(n_files: int, requested: int | None) -> int:
    if requested is not None:
        return max(1, requested)
    # Scenarios are independent; a process per core. Workers re-import the caller's main module,
    # so a caller that has none on disk (a script piped to python) runs them in its own process.
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if n_files < 16 or "forkserver" not in mp.get_all_start_methods() or (main_file and not os.path.exists(main_file)):
        return 1
    return min(os.cpu_count() or 1, 4)


def _pool_context():
    """Workers forked from a clean server process that has imported the runner once: as fast as a
    plain fork, but never a copy of a caller that holds threads or open databases (a plain fork of
    a long-lived process, a test session for one, crashed its workers with a segfault)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


def run_suite(paths: list[str] | None = None, policy_name: str = "playbook",
              on_result: Callable[[ScenarioResult], None] | None = None,
              on_start: Callable[[int], None] | None = None, workers: int | None = None,
              model: Any = None, concurrency: int = 4) -> EvalReport:
    """`model` (provider:model) for the llm and auto policies, run `concurrency` scenarios at a time."""
    started = time.perf_counter()
    files = discover(paths)
    if on_start:
        on_start(len(files))
    if policy_name != "playbook":
        outcomes = _run_concurrently(files, policy_name, model, concurrency, on_result)
        return _report(files, outcomes, None, started)
    n = _workers(len(files), workers)
    chunks = [files[i::n] for i in range(n)] if n > 1 else [files]
    # Small chunks keep the progress bar moving; order is restored below.
    chunks = [c[i:i + 8] for c in chunks for i in range(0, len(c), 8)] if n > 1 else chunks
    if n == 1:
        outcomes = [_run_chunk(files, policy_name)]
    else:
        with ProcessPoolExecutor(n, mp_context=_pool_context()) as pool:
            futures = [pool.submit(_run_chunk, c, policy_name) for c in chunks]
            outcomes = []
            for f in as_completed(futures):
                outcomes.append(f.result())
                for _, r in outcomes[-1]:
                    if on_result:
                        on_result(r)
    return _report(files, outcomes, on_result if n == 1 else None, started)


def _report(files: list[Path], outcomes: list[list[tuple[str | None, ScenarioResult]]],
            on_result: Callable[[ScenarioResult], None] | None, started: float) -> EvalReport:
    by_path: dict[str, tuple[str | None, ScenarioResult]] = {}
    for outcome in outcomes:
        for scenario_id, r in outcome:
            by_path[r.path] = (scenario_id, r)
    results: list[ScenarioResult] = []
    seen_ids: dict[str, str] = {}
    for path in files:
        scenario_id, r = by_path[str(path)]
        if scenario_id is not None and scenario_id in seen_ids:
            err = ScenarioError(path, f"id {scenario_id!r} is also used by {seen_ids[scenario_id]}")
            r = ScenarioResult(id=Path(path).stem, path=str(path), error=str(err), failures=[err.message])
        elif scenario_id is not None:
            seen_ids[scenario_id] = str(path)
        results.append(r)
        if on_result:
            on_result(r)
    return EvalReport(summary=summarize(results, time.perf_counter() - started), scenarios=results)


def _tally(results: list[ScenarioResult], key: Callable[[ScenarioResult], str | None]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for r in results:
        row = out.setdefault(key(r) or "(unloaded)", {"total": 0, "passed": 0, "errors": 0})
        row["total"] += 1
        row["passed"] += int(r.passed)
        row["errors"] += int(r.error is not None)
    return dict(sorted(out.items()))


def summarize(results: list[ScenarioResult], duration_s: float) -> EvalSummary:
    passed = sum(r.passed for r in results)
    ran = [r for r in results if r.error is None]
    budgeted = [r for r in ran if r.max_tool_calls is not None]
    return EvalSummary(
        median_tool_calls=median([r.tool_calls for r in ran]) if ran else 0.0,
        budgeted=len(budgeted),
        median_budget=median([r.max_tool_calls for r in budgeted]) if budgeted else None,
        median_budgeted_calls=median([r.tool_calls for r in budgeted]) if budgeted else None,
        over_budget=sum(r.tool_calls > r.max_tool_calls for r in budgeted),
        total=len(results), passed=passed, failed=len(results) - passed,
        errors=sum(r.error is not None for r in results),
        pass_rate=round(passed / len(results), 4) if results else 0.0,
        violations=sum(len(r.violations) for r in results),
        duration_s=round(duration_s, 3),
        by_family=_tally(results, lambda r: r.family),
        by_backend=_tally(results, lambda r: r.backend),
        by_split=_tally(results, lambda r: r.split),
        model_by_family=_model_tally(results),
    )


def _model_tally(results: list[ScenarioResult]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for r in results:
        if r.model is None:
            continue
        row = out.setdefault(r.family or "(unloaded)", dict.fromkeys(
            ("scenarios", "by_model", "requests", "tokens_in", "tokens_out", "cost_usd", "model_latency_ms",
             "tool_calls"), 0))
        row["scenarios"] += 1
        row["by_model"] += int(bool(r.decided_by and r.decided_by.startswith("llm:")))
        for key in ("requests", "tokens_in", "tokens_out", "cost_usd", "model_latency_ms"):
            row[key] = round(row[key] + (r.model.get(key) or 0), 6)
        row["tool_calls"] += r.tool_calls
    return dict(sorted(out.items()))
