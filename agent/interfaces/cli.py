"""The `crashcart` command line (Contract 5). Heavy modules load inside each command."""

from __future__ import annotations

import json
from dataclasses import dataclass
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.text import Text

app = typer.Typer(
    add_completion=False, no_args_is_help=True,
    help="crashcart: an on-call agent for GPU training clusters.",
)
guard_app = typer.Typer(help="The guard: its policy and its circuit breaker.", no_args_is_help=True)
app.add_typer(guard_app, name="guard")

DEFAULT_STATE_DIR = Path(".crashcart")


def _console():
    from rich.console import Console

    return Console()


def _fail(message: str, code: int = 2) -> None:
    # One line however narrow the terminal: an error is read in logs and grepped for.
    _console().print(Text.assemble(("error:", "red"), " ", message), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@app.command("eval")
def eval_command(
    paths: list[str] = typer.Argument(None, help="Scenario files or folders (default: the bundled suite)"),
    policy: Optional[str] = typer.Option(None, help="playbook | llm | auto (default: auto with --model, else playbook)"),
    model: Optional[str] = typer.Option(None, help="llm and auto: provider:model (openai:..., anthropic:...)"),
    concurrency: int = typer.Option(4, help="llm and auto: scenarios run at the same time", min=1),
    json_file: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON here"),
    html_file: Optional[Path] = typer.Option(None, "--html", help="Write a self-contained HTML report here"),
    logs: Optional[bool] = typer.Option(None, "--logs/--no-logs", help="Also score diagnose on evals/logs (default: with the bundled suite)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the summary line"),
) -> None:
    """Run scenarios through the agent and print a scorecard."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from crashcart.agent.interfaces.scorecard import budget_line, render_scorecard
    from crashcart.evals.runner import run_suite

    policy = policy or ("auto" if model else "playbook")
    _check_policy(policy, model)
    from crashcart.evals.scenario import SCENARIO_SUFFIXES, discover

    console = _console()
    for p in paths or []:
        if not Path(p).exists():
            _fail(f"{p}: no such file or folder")
        if Path(p).is_dir() and not discover([p]):
            _fail(f"{p}: no scenario files here (*{' or *'.join(SCENARIO_SUFFIXES)})")
    for option, target in (("--json", json_file), ("--html", html_file)):
        if target is not None:
            _writable_file(option, target, create_parent=option == "--json")
    with Progress(TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=console, transient=True, disable=quiet) as progress:
        task = progress.add_task("", total=None)
        report = run_suite(
            paths or None, policy,
            on_start=lambda n: progress.update(task, total=n),
            on_result=lambda r: progress.update(task, advance=1, description=r.id),
            model=model, concurrency=concurrency,
        )
    if logs if logs is not None else not paths:
        from crashcart.evals.logcases import run_logs

        report.logs = run_logs()
    if quiet:
        s = report.summary
        console.print(f"{s.passed}/{s.total} passed ({s.pass_rate:.1%}), {s.violations} forbidden actions, {s.errors} errors")
        console.print(budget_line(s))
        if report.logs is not None:
            ls = report.logs.summary
            console.print(f"log verdicts: family {ls.family_accuracy:.1%}, remedy {ls.remedy_accuracy:.1%} on {ls.total} logs")
    else:
        render_scorecard(console, report)
    if json_file:
        json_file.parent.mkdir(parents=True, exist_ok=True)
        json_file.write_text(report.model_dump_json(indent=2))
        console.print(f"results written to {json_file}", markup=False, highlight=False)
    if html_file:
        from crashcart.evals.html_report import write_html

        write_html(report, html_file)
        console.print(f"report written to {html_file}", markup=False, highlight=False)
    if report.summary.errors:
        # A scenario that could not be loaded or run is not a result: say so in the exit code.
        console.print(Text(f"{report.summary.errors} scenario(s) could not be loaded or run", style="red"))
        raise typer.Exit(1)


def _writable_file(option: str, target: Path, create_parent: bool = False) -> None:
    """Fail before any work when an output file cannot be written where it was asked for."""
    if target.is_dir():
        _fail(f"{option} {target}: is a folder; give a file name")
    if not target.parent.is_dir():
        if create_parent and not target.parent.exists():
            return
        _fail(f"{option} {target}: the folder {target.parent} does not exist")


def _use_policy(deps, policy: Optional[str], model: Optional[str], config) -> None:
    """--policy and --model on the target's deps; with neither, auto where cluster.yaml names a model."""
    configured = (getattr(config, "llm", None) or {}).get("model")
    policy = policy or ("auto" if model or configured else "playbook")
    if policy != "playbook" or model:
        deps.policy = _model_policy(policy, model, config)


def _model_policy(policy: str, model: Optional[str], config):
    """The llm or auto policy, its model and settings from --model and cluster.yaml's llm section."""
    from crashcart.agent.policies import make_policy
    from crashcart.agent.policies.llm import LLMConfigError, parse_settings

    try:
        settings = parse_settings(getattr(config, "llm", None), "cluster.yaml: llm")
        model = model or settings.model
        _check_policy(policy, model)
        return make_policy(policy, model, settings)
    except LLMConfigError as e:
        _fail(str(e))


def _check_policy(policy: str, model: Optional[str]) -> None:
    """A policy name and, for llm and auto, a model name that can be used, or a clear error."""
    from crashcart.agent.policies import POLICIES

    if policy not in POLICIES:
        _fail(f"policy {policy!r}: one of {', '.join(POLICIES)}")
    if policy == "playbook":
        if model:
            _fail("--model goes with --policy llm or auto")
        return
    from crashcart.agent.policies.llm import LLMConfigError, split_model_name

    if not model:
        _fail(f"--policy {policy} needs --model provider:model (e.g. openai:gpt-4.1, anthropic:claude-sonnet-4-5)")
    try:
        split_model_name(model)
    except LLMConfigError as e:
        _fail(str(e))


@app.command()
def coverage(
    out: Path = typer.Option(None, help="Where to write it (default: evals/COVERAGE.md)"),
) -> None:
    """Regenerate evals/COVERAGE.md (every scenario's family, backend, diagnosis, remedy and evidence
    path, and the counts) and evals/LABELS.md (the labels, from the playbooks)."""
    from crashcart.evals.coverage import COVERAGE_FILE, LABELS_FILE, duplicates, render_coverage, render_labels
    from crashcart.evals.runner import run_suite

    report = run_suite()
    target = out or COVERAGE_FILE
    target.write_text(render_coverage(report), encoding="utf-8")
    if out is None:
        LABELS_FILE.write_text(render_labels(), encoding="utf-8")
    dupes = duplicates(report.scenarios)
    _console().print(f"{target} written: {report.summary.total} scenarios, "
                     f"{len(dupes)} groups sharing a combination and an evidence path", markup=False)


@app.command()
def diagnose(
    logfiles: list[str] = typer.Argument(..., help="Log files (.gz read through); - reads standard input"),
    as_json: bool = typer.Option(False, "--json", help="One JSON verdict per line"),
    together: bool = typer.Option(False, "--together", help="Read all the files as one incident (a job log and "
                                                             "its node's dmesg): one verdict"),
) -> None:
    """A verdict from a log alone: family, diagnosis, remedy, evidence."""
    from crashcart.agent.verdict import LogError, diagnose_lines, read_log_file

    console = _console()
    bad = 0

    def report_error(name: str, message: str) -> None:
        if as_json:
            print(json.dumps({"source": name, "error": message}))
        else:
            console.print(Text.assemble(("error: ", "red"), message))

    read: list[tuple[str, list[str] | str]] = []
    for name in logfiles:
        try:
            read.append((name, read_log_file(name, sys.stdin.buffer)))
        except LogError as e:
            bad += 1
            read.append((name, str(e)))
    if together:
        # One incident: the verdict's evidence may come from any of the files read.
        good = [(n, lines) for n, lines in read if isinstance(lines, list)]
        read = [(n, e) for n, e in read if isinstance(e, str)]
        if good:
            read.append((" + ".join(n for n, _ in good), [line for _, lines in good for line in lines]))
    for name, lines in read:
        if isinstance(lines, str):
            report_error(name, lines)
            continue
        verdict = diagnose_lines(lines, source=name)
        if as_json:
            print(verdict.model_dump_json())
            continue
        console.print(Text.assemble((name, "bold"), ": ", (verdict.diagnosis, "magenta"),
                                    f" ({verdict.family}) -> {verdict.remedy}, confidence {verdict.confidence}"))
        console.print(Text(f"  {verdict.summary}"))
        if verdict.changes:
            console.print(Text(f"  changes: {verdict.changes}"))
        for line in verdict.evidence[:6]:
            console.print(Text(f"  | {line}", style="yellow"))
    if bad:
        raise typer.Exit(1)


def _policy(guard_file: Optional[Path], fallback, mode: Optional[str]):
    """A recorded incident's guard policy: --guard, else the scenario's own, else the built-in; --mode on
    top. A scenario touches no cluster, so these flags may set any policy for it."""
    from crashcart.agent.guard import PolicyError, load_policy

    try:
        policy = load_policy(guard_file) if guard_file else fallback()
    except PolicyError as e:
        _fail(str(e))
    if mode:
        _check_mode(mode)
        policy = policy.model_copy(update={"mode": mode})
    return policy


def _check_mode(mode: str) -> None:
    from crashcart.agent.guard import MODES

    if mode not in MODES:
        _fail(f"mode {mode!r}: one of {', '.join(MODES)}")


def _cluster_policy(cluster_file: Path, own, mode: Optional[str], guard_file: Optional[Path]):
    """A live cluster's guard is the one its cluster.yaml names, and it is the ceiling: a flag may
    narrow the mode, never widen it, and no second policy file replaces it (whether one rule list
    allows no more than another cannot be checked exactly field by field, so none is taken)."""
    from crashcart.agent.guard import mode_wider

    if guard_file:
        _fail(f"--guard {guard_file}: refused with --cluster: a live cluster runs under its own guard "
              f"({cluster_file}: guard, mode {own.mode}); narrow it with --mode, or change it in {cluster_file}")
    if not mode:
        return own
    _check_mode(mode)
    if mode_wider(mode, own.mode):
        _fail(f"--mode {mode}: wider than the cluster's own guard ({cluster_file}: guard, mode {own.mode}); "
              "a flag may only narrow a live cluster's guard (autonomous -> dry_run -> observe)")
    return own.model_copy(update={"mode": mode})


def _store_path(state_dir: Path) -> str:
    state_dir.mkdir(parents=True, exist_ok=True)
    return str(state_dir / "incidents.duckdb")


def _scenario_deps(scenario_path: str, mode: Optional[str], guard_file: Optional[Path], state_dir: Path):
    from crashcart.agent.guard import load_policy, policy_from_dict, scenario_breaker
    from crashcart.agent.policies import make_policy
    from crashcart.agent.runner import make_deps
    from crashcart.agent.store import IncidentStore
    from crashcart.evals.scenario import ScenarioError, load_scenario
    from crashcart.tools.backends.fixture import FixtureBackend

    try:
        scenario = load_scenario(scenario_path)
    except ScenarioError as e:
        _fail(str(e))
    policy = _policy(guard_file, lambda: policy_from_dict(scenario.guard, source=f"{scenario_path}: guard")
                     if scenario.guard else load_policy(None), mode)
    store = IncidentStore(_store_path(state_dir))
    backend = FixtureBackend(scenario.cluster, scenario.backend)
    # Its breaker is keyed apart from any live cluster's: a scenario's --guard never trips or resets that one.
    return scenario, make_deps(backend, make_policy("playbook"), policy, store, cluster=scenario.id, notifiers=[],
                               breaker=scenario_breaker(scenario.id))


def _cluster_deps(cluster_file: Path, mode: Optional[str], guard_file: Optional[Path], state_dir: Path):
    """A live cluster from its cluster.yaml: its backend, and its own guard as the ceiling of every
    incident that acts on it. A flag that would widen it is refused before anything is written."""
    from crashcart.agent.config import ClusterConfigError, load_cluster_config
    from crashcart.agent.policies import make_policy
    from crashcart.agent.runner import make_deps
    from crashcart.agent.store import IncidentStore

    try:
        config, own = load_cluster_config(cluster_file)
    except ClusterConfigError as e:
        _fail(str(e))
    policy = _cluster_policy(cluster_file, own, mode, guard_file)
    store = IncidentStore(_store_path(state_dir))
    return config, make_deps(config.make_backend(), make_policy("playbook"), policy, store,
                             cluster=config.name, notifiers=config.notifiers, ceiling=own)


@dataclass
class _Target:
    """What a command works on: a recorded incident (scenario) or a live cluster (config)."""

    name: str
    deps: object
    scenario: object = None
    config: object = None


def _open_target(scenario: Optional[str], cluster: Optional[Path], mode: Optional[str],
                 guard: Optional[Path], state_dir: Path) -> _Target:
    if bool(scenario) == bool(cluster):
        _fail("give either a scenario file (a recorded incident) or --cluster cluster.yaml (a live cluster), not both")
    if cluster and not cluster.exists():
        _fail(f"{cluster}: no such file")
    if state_dir.exists() and not state_dir.is_dir():
        _fail(f"--state-dir {state_dir}: is a file, not a folder")
    if cluster:
        config, deps = _cluster_deps(cluster, mode, guard, state_dir)
        return _Target(config.name, deps, config=config)
    sc, deps = _scenario_deps(scenario, mode, guard, state_dir)
    return _Target(sc.id, deps, scenario=sc)


def _checkpointer(path: Path):
    from crashcart.agent.checkpointer import open_checkpointer

    return open_checkpointer(path)


@app.command()
def investigate(
    scenario: Optional[str] = typer.Argument(None, help="A scenario file (a recorded incident)"),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="A cluster.yaml: investigate on the live cluster"),
    job: Optional[str] = typer.Option(None, help="With --cluster: the job to look at"),
    node: Optional[str] = typer.Option(None, help="With --cluster: the node to look at"),
    text: Optional[str] = typer.Option(None, help="With --cluster: the question, as a person would ask it"),
    kind: Optional[str] = typer.Option(None, help="With --cluster: job_failed | job_stalled | job_pending | node_alert | chat "
                                                  "(default: from --job/--node/--text)"),
    mode: Optional[str] = typer.Option(None, help="observe | dry_run | autonomous (a scenario: sets it; "
                                                  "--cluster: may only narrow cluster.yaml's guard)"),
    guard: Optional[Path] = typer.Option(None, help="A scenario only: a guard.yaml in place of its own "
                                                    "(refused with --cluster: cluster.yaml's guard is the ceiling)"),
    state_dir: Path = typer.Option(DEFAULT_STATE_DIR, help="Where the incident store and checkpoints live"),
    approver: Optional[str] = typer.Option(None, help="Approve at a prompt as this person when the guard asks"),
    policy: Optional[str] = typer.Option(None, help="playbook | llm | auto (default: auto where a model is configured)"),
    model: Optional[str] = typer.Option(None, help="llm and auto: provider:model (default: llm.model in cluster.yaml)"),
) -> None:
    """Investigate one incident and print the transcript."""
    from crashcart.agent.interfaces.transcript import render_incident
    from crashcart.agent.runner import pending_approval, resume_incident, start_incident

    if scenario and (job or node or text or kind):
        _fail("--job, --node, --text and --kind go with --cluster; a scenario file has its own trigger")
    target = _open_target(scenario, cluster, mode, guard, state_dir)
    name, deps, sc = target.name, target.deps, target.scenario
    _use_policy(deps, policy, model, target.config)
    if cluster:
        trigger = _live_trigger(kind, job, node, text)
        title, source, again = f"{name}: {_describe(trigger)}", f"cluster:{cluster}", _target_flag(None, cluster)
    else:
        trigger = sc.trigger.model_dump()
        title, source, again = f"{name}: {sc.title}", f"scenario:{scenario}", _target_flag(scenario, None)
    saver = _checkpointer(state_dir / "checkpoints.sqlite")
    console = _console()
    live = _live_turns(deps, console, trigger, title)
    run = start_incident(deps, trigger, cluster=name, source=source, checkpointer=saver, record=True)
    if live:
        live.show_results(run.state)
    render_incident(console, run.state, title=title, shown_live=live is not None)
    if not run.interrupted:
        if run.state.get("status") == "investigation_failed":
            raise typer.Exit(3)  # "could not tell" is an answer, and not a success
        return
    waiting = pending_approval(deps, run.incident_id, saver)
    console.print(Text(f"incident {run.incident_id} waits for approval of {len(waiting)} action(s):", style="yellow"))
    for a in waiting:
        console.print(Text(f"  {a['action_id']}  {a['tool']} {a['args'].get('node') or a['args'].get('job') or ''}"))
    if approver and sys.stdin.isatty():
        from crashcart.agent.interfaces.os_user import current_os_user

        answer = typer.confirm(f"Approve as {approver}?", default=False)
        run = resume_incident(deps, run.incident_id,
                              {"approver": approver, "approved": answer, "os_user": current_os_user()}, saver)
        render_incident(console, run.state, title=f"{title} after approval")
    else:
        console.print(Text(f"approve from any terminal: {approve_command(run.incident_id, again, state_dir)}"
                           " (add --reject to refuse)"))


def _live_turns(deps, console, trigger: dict, title: str):
    """A model's investigation is printed turn by turn as it happens, not only at the end."""
    if not hasattr(deps.policy, "step"):
        return None
    from crashcart.agent.interfaces.model_turns import LiveTurns
    from crashcart.agent.interfaces.transcript import _trim, render_header

    render_header(console, trigger, title)
    deps.policy = LiveTurns(deps.policy, console, _trim)
    if hasattr(deps.policy.model, "on_text"):
        deps.policy.model.stream = True  # so the words show as they come
    return deps.policy


def approve_command(incident_id: str, target: str, state_dir: Path) -> str:
    """The exact command a person runs to approve an incident's waiting actions."""
    import shlex

    return f"crashcart approve {shlex.quote(incident_id)} {target} --approver NAME --state-dir {shlex.quote(str(state_dir))}"


def _target_flag(scenario: Optional[str], cluster: Optional[Path]) -> str:
    import shlex

    return f"--cluster {shlex.quote(str(cluster))}" if cluster else f"--scenario {shlex.quote(str(scenario))}"


TRIGGER_KINDS = ("job_failed", "job_stalled", "job_pending", "node_alert", "chat")


def _live_trigger(kind: Optional[str], job: Optional[str], node: Optional[str], text: Optional[str]) -> dict:
    if kind and kind not in TRIGGER_KINDS:
        _fail(f"--kind {kind!r}: one of {', '.join(TRIGGER_KINDS)}")
    if not (job or node or text):
        _fail("with --cluster, say what to look at: --job, --node or --text")
    kind = kind or ("chat" if text else "job_failed" if job else "node_alert")
    return {"kind": kind, "job": job, "node": node, "text": text}


def _describe(trigger: dict) -> str:
    what = trigger.get("job") and f"job {trigger['job']}" or trigger.get("node") and f"node {trigger['node']}" or ""
    return f"{trigger['kind']} {what}".strip()


@app.command()
def approve(
    incident: str = typer.Argument(..., help="The incident id printed by investigate or watch"),
    scenario: Optional[str] = typer.Option(None, help="The scenario the incident runs on"),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="Or the cluster.yaml of the live cluster it runs on"),
    approver: str = typer.Option(..., help="Who approves (the incident's guard policy must name them)"),
    reject: bool = typer.Option(False, "--reject", help="Reject instead of approving"),
    mode: Optional[str] = typer.Option(None, help="Not needed: the incident keeps the mode it started in (a different one is refused)"),
    guard: Optional[Path] = typer.Option(None, help="Not needed: the incident keeps its guard policy (a different one is refused)"),
    state_dir: Path = typer.Option(DEFAULT_STATE_DIR),
) -> None:
    """Approve (or reject) the actions an incident waits on, and let it finish, under the guard
    policy and mode the incident started with. Your OS account is journaled next to --approver."""
    from crashcart.agent.interfaces.approval import ApprovalRefused, answer_approval, still_waiting
    from crashcart.agent.interfaces.os_user import current_os_user
    from crashcart.agent.interfaces.transcript import render_incident

    if not (state_dir / "incidents.duckdb").exists():
        _fail(f"{state_dir / 'incidents.duckdb'}: no incident store yet")
    deps = _open_target(scenario, cluster, None, None, state_dir).deps
    given = _policy(guard, lambda: None, None) if guard else None
    try:
        run = answer_approval(deps, incident, _checkpointer(state_dir / "checkpoints.sqlite"), approver=approver,
                              approved=not reject, os_user=current_os_user(), given_policy=given, mode=mode)
    except ApprovalRefused as e:
        _fail(e.message, code=e.code)
    render_incident(_console(), run.state, title=f"{incident} after {'rejection' if reject else 'approval'} by {approver}")
    # Every waiting action was answered: one still waiting is one the guard refused the answer for.
    refused = still_waiting(run)
    if refused:
        from rich.markup import escape

        for a in refused:
            _console().print(f"[red]{escape(a['tool'])}: {escape(a['reason'])}[/]", highlight=False)
        raise typer.Exit(1)


def _open_store(state_dir: Path):
    from crashcart.agent.store import IncidentStore

    if not state_dir.is_dir():
        _fail(f"--state-dir {state_dir}: no such folder (nothing has run with this state dir yet)")
    path = state_dir / "incidents.duckdb"
    if not path.exists():
        _fail(f"{path}: no incident store yet")
    return IncidentStore(str(path))


@app.command()
def replay(
    incident: str = typer.Argument(..., help="A recorded incident id"),
    state_dir: Path = typer.Option(DEFAULT_STATE_DIR),
) -> None:
    """Re-run the agent on an incident's tape and show where its decisions now differ."""
    from crashcart.agent.replay import replay_incident

    try:
        result = replay_incident(_open_store(state_dir), incident)
    except LookupError as e:
        _fail(str(e))
    console = _console()
    if not result.differences:
        console.print(Text.assemble((f"{incident}: the agent decides exactly as it did", "green"),
                                    f" ({result.replayed.get('label')}, {result.replayed.get('remedy')};"
                                    f" replayed with {result.policy})"))
        return
    console.print(Text(f"{incident}: {len(result.differences)} difference(s), replayed with {result.policy}",
                       style="yellow"))
    for line in result.differences:
        console.print(Text(f"  {line}"), highlight=False)
    raise typer.Exit(1)


@app.command("export")
def export_command(
    incident: str = typer.Argument(..., help="A recorded incident id"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Scenario file to write (default: stdout)"),
    state_dir: Path = typer.Option(DEFAULT_STATE_DIR),
) -> None:
    """Write a recorded incident as a scenario file that `crashcart eval` accepts."""
    from crashcart.evals.export import scenario_from_incident
    from crashcart.tools.tape import Tape

    if out is not None:
        _writable_file("--out", out)
    store = _open_store(state_dir)
    detail, text = store.get_incident(incident), store.load_tape(incident)
    if detail is None or text is None:
        _fail(f"incident {incident} is not in the store or was not recorded")
    last = {d.action_id: (d.tool, d.args, d.decision) for d in detail.decisions}
    yaml_text = scenario_from_incident(incident, Tape.from_jsonl(text, incident), detail.incident.diagnosis or {},
                                       list(last.values()))
    if out:
        out.write_text(yaml_text, encoding="utf-8")
        _console().print(f"{out} written; confirm its expect block before adding it to the suite", markup=False)
    else:
        print(yaml_text, end="")


@app.command()
def watch(
    scenario: Optional[str] = typer.Argument(None, help="A recorded cluster to watch: a scenario file (fixture backend)"),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="A cluster.yaml: watch the live cluster"),
    interval: float = typer.Option(60.0, min=0, help="Seconds between polls"),
    polls: Optional[int] = typer.Option(None, min=1, help="Stop after this many polls (default: run until stopped)"),
    stall_minutes: float = typer.Option(45.0, help="A running job without progress or log output this long is stalled"),
    lookback_minutes: float = typer.Option(60.0, min=0, help="How far back the first poll of a new store looks"),
    mode: Optional[str] = typer.Option(None, help="observe | dry_run | autonomous (a scenario: sets it; "
                                                  "--cluster: may only narrow cluster.yaml's guard)"),
    guard: Optional[Path] = typer.Option(None, help="A scenario only: a guard.yaml in place of its own "
                                                    "(refused with --cluster: cluster.yaml's guard is the ceiling)"),
    state_dir: Path = typer.Option(DEFAULT_STATE_DIR),
    policy: Optional[str] = typer.Option(None, help="playbook | llm | auto (default: auto where a model is configured)"),
    model: Optional[str] = typer.Option(None, help="llm and auto: provider:model (default: llm.model in cluster.yaml)"),
) -> None:
    """The on-call loop: poll for what changed, one incident per root cause, act through the guard."""
    from crashcart.agent.watch import Watcher, WatchSettings, lifecycle

    if stall_minutes <= 0:
        _fail(f"--stall-minutes {stall_minutes:g}: must be more than 0")
    target = _open_target(scenario, cluster, mode, guard, state_dir)
    name, deps = target.name, target.deps
    _use_policy(deps, policy, model, target.config)
    settings = WatchSettings(interval_s=interval, stall_minutes=stall_minutes, lookback_minutes=lookback_minutes)
    watcher = Watcher(deps, cluster=name, checkpointer=_checkpointer(state_dir / "checkpoints.sqlite"), settings=settings)
    console = _console()

    from crashcart.agent.interfaces.incident_view import action_views, watch_lines

    flag = _target_flag(scenario, cluster)

    def report(touched: list[str]) -> None:
        # Per incident: what it did, what it only proposed, what waits for whom and how to approve.
        for incident_id in dict.fromkeys(touched):
            detail = deps.store.get_incident(incident_id)
            views = action_views(detail, deps.store.deliveries(incident_id))
            inc = detail.incident.model_copy(update={"status": lifecycle(detail.incident.status)})
            own = (deps.guard.policy_for(incident_id) or (deps.guard.policy,))[0]  # the incident's own policy
            for line in watch_lines(inc, views, approve_command(incident_id, flag, state_dir), own):
                console.print(line, highlight=False)
        if not touched:
            console.print(Text("poll: nothing new", style="dim"))

    def trouble(error: Exception) -> None:
        console.print(Text.assemble(("poll failed:", "red"), f" {error} ", ("(retrying at the next poll)", "dim")),
                      highlight=False)

    try:
        watcher.run(polls=polls, on_poll=report, on_error=trouble)
    finally:
        close = getattr(deps.backend, "close", None)
        if close:
            close()


@app.command()
def slack(
    scenario: Optional[str] = typer.Argument(None, help="A recorded cluster to answer about: a scenario file (fixture backend)"),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="A cluster.yaml with a slack: section"),
    http: bool = typer.Option(False, "--http", help="Serve Slack's request URL (/slack/events) instead of Socket Mode"),
    port: int = typer.Option(3000, min=0, max=65535, help="With --http: the port (0: a free one, named when it starts)"),
    host: str = typer.Option("0.0.0.0", help="With --http: the address to listen on"),
    state_dir: Path = typer.Option(DEFAULT_STATE_DIR),
    policy: Optional[str] = typer.Option(None, help="playbook | llm | auto (default: auto where a model is configured)"),
    model: Optional[str] = typer.Option(None, help="llm and auto: provider:model (default: llm.model in cluster.yaml)"),
) -> None:
    """The Slack app: questions answered in their thread, Approve/Reject buttons under the incident's own guard policy."""
    from crashcart.agent.interfaces.slack.serve import SlackStartError, start

    target = _open_target(scenario, cluster, None, None, state_dir)
    _use_policy(target.deps, policy, model, target.config)
    try:
        start(target, state_dir, http=http, host=host, port=port, say=lambda line: _console().print(line, markup=False))
    except SlackStartError as e:
        _fail(str(e))


incidents_app = typer.Typer(help="What the incident store holds: a list, or one incident in full.")
app.add_typer(incidents_app, name="incidents")


@incidents_app.callback(invoke_without_command=True)
def incidents(
    ctx: typer.Context,
    state_dir: Path = typer.Option(DEFAULT_STATE_DIR),
    limit: int = typer.Option(20, min=1, help="How many incidents, newest first"),
    history: Optional[str] = typer.Option(None, help="Show one incident's life as states"),
) -> None:
    """List incidents in the store (`incidents show INCIDENT`: one incident in full)."""
    ctx.obj = state_dir
    if ctx.invoked_subcommand:
        return
    from rich.table import Table

    from crashcart.agent.watch import lifecycle

    store = _open_store(state_dir)
    if history:
        states = store.incident_history(history)
        if not states:
            _fail(f"incident {history} is not in the store")
        for status, at in states:
            _console().print(f"{at:%Y-%m-%d %H:%M:%S}  {lifecycle(status)}", highlight=False, markup=False)
        return
    table = Table(title="incidents")
    table.add_column("id", no_wrap=True)
    for col in ("cluster", "status", "diagnosis", "opened", "delivery"):
        table.add_column(col)
    found = store.list_incidents(limit=limit)
    undelivered = store.undelivered_counts([i.id for i in found])
    for inc in found:
        label = (inc.diagnosis or {}).get("label", "") if isinstance(inc.diagnosis, dict) else ""
        missing = undelivered.get(inc.id)
        table.add_row(Text(inc.id), Text(inc.cluster), Text(lifecycle(inc.status)), Text(label), Text(str(inc.opened_at)),
                      Text(f"{missing} undelivered", style="red") if missing else Text(""))
    _console().print(table)


@incidents_app.command("show")
def incidents_show(
    ctx: typer.Context,
    incident: str = typer.Argument(..., help="An incident id"),
    state_dir: Optional[Path] = typer.Option(None, help="Where the store is (default: .crashcart)"),
) -> None:
    """One incident after the fact: trigger, diagnosis, evidence, every action with its decision,
    approver and result, and where its escalations were delivered."""
    from crashcart.agent.interfaces.incident_view import render_incident_detail

    store = _open_store(state_dir or ctx.obj or DEFAULT_STATE_DIR)
    detail = store.get_incident(incident)
    if detail is None:
        _fail(f"incident {incident} is not in the store")
    render_incident_detail(_console(), detail, store.incident_history(incident), store.deliveries(incident),
                           store.policy_notes(incident))


@guard_app.command("reset")
def guard_reset(
    cluster: str = typer.Option(..., help="A live cluster's cluster.yaml (its own guard decides who may), "
                                          "or a recorded scenario's id"),
    person: str = typer.Option(..., help="Who resets it: a person its guard policy names (journaled with your OS account)"),
    state_dir: Path = typer.Option(DEFAULT_STATE_DIR),
) -> None:
    """Reset a tripped blast-radius breaker (a person's decision, journaled). A live cluster's
    (--cluster cluster.yaml): who may is what its own guard names, never an incident's. A recorded
    scenario's (--cluster SCENARIO_ID): what the policy of the incident that tripped it names."""
    from crashcart.agent.guard import ApprovalError
    from crashcart.agent.interfaces.os_user import current_os_user

    path = Path(cluster).expanduser()
    if path.is_dir():
        _fail(f"--cluster {cluster}: is a folder; give a cluster.yaml (a live cluster) or a scenario id")
    if path.is_file() or path.suffix in (".yaml", ".yml") or "/" in cluster:
        if not path.is_file():
            _fail(f"--cluster {cluster}: no such file")
        guard, name = _live_breaker_guard(path, state_dir)
    else:
        guard, name = _scenario_breaker_guard(cluster, state_dir)
    try:
        state = guard.reset_breaker(person, os_user=current_os_user())
    except ApprovalError as e:
        _fail(str(e), code=1)
    _console().print(f"breaker for {name}: tripped={state.tripped} (reset by {person})", highlight=False,
                     markup=False, soft_wrap=True)


def _live_breaker_guard(path: Path, state_dir: Path):
    """A live cluster's breaker, judged by its cluster.yaml's guard (the ceiling): a scenario run
    under its name with a wider --guard may have tripped it, and must not say who resets it."""
    from crashcart.agent.config import ClusterConfigError, load_cluster_config
    from crashcart.agent.guard import Guard

    try:
        config, own = load_cluster_config(path)
    except ClusterConfigError as e:
        _fail(str(e))
    store = _open_store(state_dir)
    return Guard(own, store, config.name, ceiling=own), config.name


def _scenario_breaker_guard(name: str, state_dir: Path):
    """A recorded scenario's breaker (keyed apart from live clusters'), judged by the policy of the
    incident that tripped it, else the scenario's latest incident's. The name form never reaches a
    live cluster's breaker: that one is reset with its cluster.yaml."""
    from crashcart.agent.guard import SCENARIO_BREAKER_PREFIX, Guard, policy_from_dict, scenario_breaker

    store = _open_store(state_dir)
    name = name.removeprefix(SCENARIO_BREAKER_PREFIX)
    key = scenario_breaker(name)
    known = store.known_clusters()
    if key not in known:
        scenarios = [c.removeprefix(SCENARIO_BREAKER_PREFIX) for c in known if c.startswith(SCENARIO_BREAKER_PREFIX)]
        if name in known:
            _fail(f"--cluster {name}: the store's breaker of that name is a live cluster's (or from before scenario "
                  "breakers were kept apart); reset it with --cluster path/to/its cluster.yaml, so that its own "
                  "guard decides who may")
        _fail(f"--cluster {name}: no cluster.yaml of that name and no recorded scenario's breaker (the store has "
              f"scenario breakers: {', '.join(scenarios) or 'none'}); a live cluster's is reset with --cluster cluster.yaml")
    state = store.breaker_state(key)
    stored = (store.incident_policy(state.incident_id) if state.incident_id else None) or store.latest_cluster_policy(name)
    if stored is None:
        _fail(f"no incident of scenario {name} stored a guard policy, so nobody is named to reset its breaker")
    policy = policy_from_dict(stored.policy, source=f"incident {stored.incident_id}: its stored guard policy")
    return Guard(policy, store, name, breaker=key), f"scenario {name}"


@guard_app.command("check")
def guard_check(path: Path = typer.Argument(..., help="A guard.yaml to validate")) -> None:
    """Validate a guard policy file."""
    from crashcart.agent.guard import PolicyError, load_policy

    try:
        policy = load_policy(path)
    except PolicyError as e:
        _fail(str(e))
    _console().print(f"{path}: ok (mode {policy.mode}, {len(policy.permissions)} permission rules)", markup=False)
    approvers = ", ".join(a.name for a in policy.approvers) or "nobody (nobody can approve or reset the breaker)"
    _console().print(f"approvers: {approvers}", highlight=False, markup=False)


def main() -> None:
    # A broken playbook or guard file is the operator's to fix: say which file and field,
    # never a traceback.
    try:
        app()
    except Exception as e:
        from crashcart.agent.guard import PolicyError
        from crashcart.playbooks import PlaybookError
        from crashcart.tools.yamlio import FileError

        from crashcart.agent.store import StoreBusy

        if not isinstance(e, (PlaybookError, PolicyError, FileError, StoreBusy)):
            raise
        _console().print(Text.assemble(("error:", "red"), f" {e}"), highlight=False)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
