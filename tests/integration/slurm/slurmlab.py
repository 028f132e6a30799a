"""Handles on the real test cluster and the loopback sshd, and the agent runs the tests make.

The conftest starts both once per session (tests/harness/*.sh); tests submit real
jobs, inject real failures, run the agent and read back what Slurm shows.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from crashcart.agent.guard import GuardPolicy, policy_from_dict
from crashcart.agent.policies import make_policy
from crashcart.agent.runner import make_deps, start_incident
from crashcart.agent.store import IncidentStore
from crashcart.tools.backends.slurm import SlurmBackend, SlurmSettings

HARNESS = Path(__file__).resolve().parents[2] / "harness"
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
         "BOOT_FAIL", "DEADLINE"}

# The guard the live tests act under: autonomous, every write permitted, no approval tiers;
# the breaker stays on but roomy enough for one drain per test.
ALLOW_ALL = {
    "mode": "autonomous", "permissions": [{"tool": "*"}], "approval": [],
    "breaker": {"max_drains": 5, "window_minutes": 60, "max_partition_fraction": 0.5},
    "restart_budget": {"max_restarts": 3},
}


@dataclass
class Sshd:
    dir: Path
    port: int

    @property
    def known_hosts(self) -> str:
        return str(self.dir / "known_hosts")

    @property
    def key(self) -> str:
        return str(self.dir / "client_ed25519")

    @property
    def encrypted_key(self) -> str:
        return str(self.dir / "client_enc_ed25519")

    @property
    def passphrase_file(self) -> str:
        return str(self.dir / "passphrase")

    def ssh(self, **over: Any) -> dict[str, Any]:
        """An `ssh:` section of the cluster config that logs in to this sshd."""
        return {"hosts": ["127.0.0.1"], "port": self.port, "user": "root", "key_file": self.key,
                "known_hosts": self.known_hosts, "connect_timeout": 30, "retries": 1,
                "backoff_seconds": 0.1, **over}


@dataclass
class SlurmLab:
    dir: Path
    jobs: Path
    """Where test jobs run (their WorkDir and logs)."""
    memory_enforcement: str
    """cgroup: OUT_OF_MEMORY is possible; none: this machine's cgroups do not allow it."""
    reserved: tuple[str, ...] = ()
    """Nodes the scheduler fills last, kept for the tests that take a node down (reserved_node)."""
    port_base: int = 0
    """The cluster's ports are offsets from it (tests/harness/slurm_local.sh)."""
    sshd: Sshd | None = None
    background: dict[str, str] = field(default_factory=dict)
    """Jobs started at session start because they take long (name -> job id)."""
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    """Before the session's first job: accounting windows that mean "this session" start here."""

    @property
    def conf(self) -> str:
        return str(self.dir / "etc" / "slurm.conf")

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": self.conf, "TZ": "UTC"}

    # --- the CLI, as a test uses it --------------------------------------------------------

    def cli(self, *argv: str, check: bool = True, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, env={**self.env, **(env or {})},
                              cwd=self.jobs, timeout=60)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def script(self, name: str, text: str) -> Path:
        path = self.jobs / name
        path.write_text(text)
        path.chmod(0o755)
        return path

    def sbatch(self, script: Path, *options: str, args: tuple[str, ...] = ()) -> str:
        return self.cli("sbatch", "--parsable", *options, str(script.name), *args).strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict (slurmctld holds jobs for MinJobAge after they end)."""
        from crashcart.tools.backends.slurm._parse import scontrol_record

        return scontrol_record(self.cli("scontrol", "show", "job", "-o", job_id).strip().splitlines()[0])

    def state(self, job_id: str) -> str:
        """The job's state in accounting ('' while accounting has no record of it yet)."""
        return self.record(job_id)[1]

    def record(self, job_id: str) -> tuple[str, str, str]:
        """(name, state, submit line) as accounting has them; empty while it has no record."""
        lines = [line for line in self.cli("sacct", "-n", "-X", "-P", "-j", job_id, "-o", "JobName,State,SubmitLine",
                                           check=False).splitlines() if line.strip()]
        if not lines:
            return "", "", ""
        name, state, submit = (lines[-1].split("|", 2) + ["", ""])[:3]
        # "CANCELLED by 0": the state is the first word.
        return name, (state.split() or [""])[0], submit

    def accounted(self, job_id: str) -> bool:
        """Accounting holds the job's whole record. It lags slurmctld by a second or more (longer
        on a busy machine): first the placeholder name `allocation`, no submit line, a
        state that trails; the agent reads accounting, so a test waits for the whole record."""
        return _whole(*self.record(job_id))

    def wait_state(self, job_id: str, wanted: set[str] | str, timeout: float = 60) -> str:
        wanted = {wanted} if isinstance(wanted, str) else wanted
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.job(job_id).get("JobState", "")
            if state in wanted:
                # accounting lags slurmctld: wait until sacct agrees, the agent reads it
                if state not in FINAL or (self.state(job_id) == state and self.accounted(job_id)):
                    return state
            elif state in FINAL:
                raise AssertionError(f"job {job_id} ended {state}, not {wanted}")
            time.sleep(0.5)
        raise AssertionError(f"job {job_id} still {state} after {timeout} s (wanted {wanted})")

    def background_ended(self) -> None:
        """Wait until the session's background jobs have ended. A test that watches a window of
        the cluster's failures starts it after they end: a failure of theirs inside it would be
        an incident (acted on) next to the test's own. Ended means gone from the queue too: a job
        Slurm is still killing is listed COMPLETING, and so is its node."""
        job = self.background["time_limit"]
        self.wait_state(job, "TIMEOUT", timeout=180)
        self.wait_for(f"job {job} to leave the queue", lambda: job not in self._queued())

    def window_start(self) -> datetime:
        """The start of a window of the cluster's failures that holds only what happens after
        this call. Accounting stamps a job's end in whole seconds and a window holds the ends
        after its start: a job that ended before this call ends at or before this second, one that
        starts after it (the call waits for the next second) ends in a later one. Half a second
        lies between the two."""
        now = datetime.now(UTC)
        start = now.replace(microsecond=0) + timedelta(milliseconds=500)
        time.sleep((now.replace(microsecond=0) + timedelta(seconds=1) - now).total_seconds())
        return start

    def wait_for(self, what: str, check, timeout: float = 60) -> Any:
        """Poll until check() is truthy (accounting and the scheduler catch up in seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {timeout} s for {what}")
            time.sleep(0.5)

    def node(self, name: str) -> tuple[str, str]:
        """(state, reason) as sinfo prints them."""
        out = self.cli("sinfo", "-h", "-N", "-n", name, "-o", "%T|%E").strip().splitlines()[0]
        state, reason = out.split("|", 1)
        return state, reason

    def settle(self, timeout: float = 90) -> None:
        """The state every test starts from, whatever earlier tests (or runs) left: no jobs but
        the session's background ones, every node in service, and accounting caught up with
        every job slurmctld knows, so a snapshot or the agent sees no record still arriving."""
        keep = set(self.background.values())
        self.cancel(*[j for j in self._queued() if j not in keep])
        for name, (state, _) in self._nodes().items():
            if not _in_service(state):
                self.resume(name)
        self.wait_for("only the background jobs in the queue", lambda: set(self._queued()) <= keep, timeout)
        self.wait_for("every node in service", lambda: all(_in_service(s) for s, _ in self._nodes().values()), timeout)
        self.wait_for("accounting to hold every job's whole record and final state",
                      lambda: not self._unsettled(keep), timeout)

    def _unsettled(self, keep: set[str]) -> dict[str, tuple[str, tuple[str, str, str]]]:
        """Jobs slurmctld holds (every job of the session: MinJobAge in the harness) whose record
        in accounting is not whole yet, or not at the end slurmctld gives them (a cancel reaches
        slurmdbd after the queue has forgotten the job; the agent reads sacct): id -> (slurmctld's
        state, accounting's (name, state, submit line))."""
        out = self.cli("scontrol", "show", "job", "-o", check=False)
        known = {j: s for j, s in re.findall(r"^JobId=(\S+) .*?\bJobState=(\S+)", out, re.M) if j not in keep}
        if not known:
            return {}
        acct: dict[str, tuple[str, str, str]] = {}
        for line in self.cli("sacct", "-n", "-X", "-P", "-a", "-j", ",".join(known), "-o",
                             "JobID,JobName,State,SubmitLine", check=False).splitlines():
            job, name, state, submit = (line.split("|", 3) + ["", "", ""])[:4]
            acct[job] = (name, (state.split() or [""])[0], submit)  # the last line is the latest
        return {j: (s, acct.get(j, ("", "", ""))) for j, s in known.items()
                if not _whole(*acct.get(j, ("", "", ""))) or (s in FINAL and acct[j][1] != s)}

    def reserved_node(self, name: str) -> str:
        """A reserved node no job of this session has run on, idle. The agent reads a lost node's
        recent history, where every job that ended badly counts (a cancel by root too: uid 0 is
        Slurm itself): three within ten minutes are a node crash with many victims, and each is a
        victim to rerun. A test that loses a node must read only its own job there."""
        assert name in self.reserved, f"{name} is not one of the reserved nodes {self.reserved}"
        ran = self.cli("sacct", "-a", "-X", "-P", "-n", "-N", name, "-S", self.started.strftime("%Y-%m-%dT%H:%M:%S"),
                       "-E", "now", "-o", "JobID,JobName,State")
        queued = self.cli("squeue", "-h", "-t", "all", "-w", name, "-o", "%i %j %T")
        assert not ran.strip() and not queued.strip(), f"jobs ran on reserved node {name}:\n{ran}{queued}"
        assert self.node(name)[0] == "idle", f"reserved node {name} is {self.node(name)}"
        return name

    def _queued(self) -> list[str]:
        return self.cli("squeue", "-h", "-o", "%i").split()

    def _nodes(self) -> dict[str, tuple[str, str]]:
        out = {}
        for line in self.cli("sinfo", "-h", "-N", "-o", "%N|%T|%E").splitlines():
            name, state, reason = line.split("|", 2)
            out[name] = (state, reason)
        return out

    def resume(self, name: str) -> None:
        self.cli("scontrol", "update", f"NodeName={name}", "State=RESUME", check=False)

    def cancel(self, *job_ids: str | None) -> None:
        ids = [j for j in job_ids if j]
        if ids:
            self.cli("scancel", *ids, check=False)

    def snapshot(self, *watched: str) -> dict[str, Any]:
        """What a change by crashcart would show: node availability and reasons, the set of
        jobs (a resubmit adds one), the queue, and the states of the `watched` jobs. Node
        allocation (idle/mixed/allocated) and other tests' jobs move on their own."""
        nodes = {name: ("in service" if _in_service(state) else state, reason)
                 for name, (state, reason) in self._nodes().items()}
        accounted = {}
        for line in self.cli("sacct", "-n", "-X", "-P", "-a", "-S", "now-1days", "-o", "JobID,State").splitlines():
            job, state = line.split("|", 1)
            accounted[job] = state
        # `squeue -t all` also lists jobs that ended in the last MinJobAge seconds from slurmctld's
        # memory: a job that just ended is known before slurmdbd has written it to accounting.
        queue = self.cli("squeue", "-h", "-t", "all", "-o", "%i|%T").splitlines()
        known = set(accounted) | {line.split("|")[0] for line in queue} | set(watched)
        # slurmctld's word for the watched jobs: accounting may not list a new one yet.
        return {"nodes": nodes, "jobs": known, "watched": {j: self.job(j).get("JobState") for j in watched}}

    # --- crashcart on this cluster ---------------------------------------------------------

    def settings(self, via: str = "local", node_access: str = "ssh", **over: Any) -> SlurmSettings:
        # Resubmitted scripts stay with the test cluster, not in root's home.
        data: dict[str, Any] = {"env": {"SLURM_CONF": self.conf}, "history_days": 1,
                                "resubmit": {"script_dir": str(self.jobs / "scripts")}}
        if "resubmit" in over:
            over = {**over, "resubmit": {**data["resubmit"], **over["resubmit"]}}
        if via == "ssh":
            data["connection"] = {"method": "ssh", "ssh": self.sshd.ssh()}
        if node_access == "ssh":
            data["node_access"] = {"method": "ssh", "ssh": self.sshd.ssh()}
        else:
            data["node_access"] = {"method": node_access}
        return SlurmSettings.model_validate({**data, **over})

    def backend(self, via: str = "local", node_access: str = "ssh", **over: Any) -> SlurmBackend:
        return SlurmBackend(self.settings(via, node_access, **over))

    def cluster_file(self, path: Path, guard: dict[str, Any], via: str = "local") -> Path:
        """A cluster.yaml for this cluster, as an operator would write it for `crashcart watch --cluster`."""
        import yaml

        slurm = self.settings(via).model_dump(mode="json", exclude_defaults=True)
        path.write_text(yaml.safe_dump({"name": "crashcart-local", "backend": "slurm", "slurm": slurm, "guard": guard}))
        return path


def _whole(name: str, state: str, submit: str) -> bool:
    """An accounting record past its placeholder (name `allocation`, no submit line, no state)."""
    return bool(state) and name != "allocation" and bool(submit)


def _in_service(state: str) -> bool:
    """Up and taking jobs; allocation (idle/mixed/allocated) moves on its own."""
    return state.rstrip("*~#!%$@^-") in {"idle", "mixed", "allocated", "completing"}


def run_agent(backend: SlurmBackend, trigger: dict[str, Any], store_path: Path,
              guard: dict[str, Any] | GuardPolicy | None = None, mode: str | None = None) -> dict[str, Any]:
    """One incident, start to report, with the playbook policy: the run's final state."""
    policy = policy_from_dict(guard or ALLOW_ALL)
    if mode:
        policy = policy.model_copy(update={"mode": mode})
    # Closed here, not at exit: its idle closer is a thread, and a test reading the file after
    # the run opens it again.
    with IncidentStore(str(store_path)) as store:
        deps = make_deps(backend, make_policy("playbook"), policy, store, cluster="crashcart-local")
        run = start_incident(deps, trigger, cluster="crashcart-local", source="test:slurm")
    assert not run.interrupted, "the test guard has no approval tiers; nothing should wait"
    return run.state


def explain(state: dict[str, Any]) -> str:
    """What the run read and concluded, for an assertion message."""
    lines = [f"diagnosis: {state.get('diagnosis')}"]
    for o in state.get("observations") or []:
        lines.append(f"--- {o['tool']} {o['args']} ok={o['ok']} {o.get('error') or ''}")
        lines += (o.get("text") or "").splitlines()[:12]
    return "\n".join(lines)


def actions(state: dict[str, Any], tool: str | None = None) -> list[dict[str, Any]]:
    return [a for a in state.get("actions") or [] if tool is None or a["tool"] == tool]


def new_job(state: dict[str, Any]) -> str:
    """The job id the run's (one) executed resubmit created."""
    done = [a for a in actions(state, "resubmit") if a["decision"] == "allow"]
    assert done, f"no resubmit was allowed: {[(a['tool'], a['decision'], a['reason']) for a in actions(state)]}"
    assert done[0]["result"], f"resubmit failed: {done[0]['error']}"
    return done[0]["result"]["new_job"]
