"""Handles on the real local Ray head, and the agent runs the tests make."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from crashcart.agent.guard import policy_from_dict
from crashcart.agent.policies import make_policy
from crashcart.agent.runner import make_deps, start_incident
from crashcart.agent.store import IncidentStore
from crashcart.tools.backends.ray import RayBackend, RaySettings

FINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
CLUSTER = "ray-local"

# Autonomous, every write permitted, no approval tiers (as in the Slurm lab).
ALLOW_ALL = {
    "mode": "autonomous", "permissions": [{"tool": "*"}], "approval": [],
    "breaker": {"max_drains": 5, "window_minutes": 60, "max_partition_fraction": 1.0},
    "restart_budget": {"max_restarts": 3},
}


@dataclass
class RayLab:
    head: Any
    scripts: Path

    def __post_init__(self) -> None:
        self.scripts.mkdir(parents=True, exist_ok=True)
        # This process is a Ray client too: the same loopback settings as the head's.
        os.environ.update(self.head.client_env())

    def settings(self) -> RaySettings:
        return RaySettings(dashboard=self.head.dashboard_url, gcs=self.head.gcs_address)

    def backend(self) -> RayBackend:
        return RayBackend(self.settings())

    @property
    def jobs(self):
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.head.dashboard_url)

    def script(self, name: str, text: str) -> Path:
        path = self.scripts / name
        path.write_text(text)
        return path

    def submit(self, script: Path, *args: str, env: dict[str, str] | None = None, **options: Any) -> str:
        entry = " ".join(["python", str(script), *args])
        return self.jobs.submit_job(entrypoint=entry, runtime_env={"env_vars": env or {}},
                                    metadata={"user": "dana"}, **options)

    def wait(self, job: str, *states: str, timeout: float = 90) -> str:
        wanted = set(states) or FINAL
        deadline = time.monotonic() + timeout
        status = ""
        while time.monotonic() < deadline:
            status = str(self.jobs.get_job_status(job).value)
            if status in wanted:
                return status
            time.sleep(0.5)
        raise AssertionError(f"job {job} is {status} after {timeout:.0f} s, not {sorted(wanted)}")

    def wait_for(self, what: str, check, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if found := check():
                return found
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")

    def snapshot(self, *jobs: str) -> list[tuple[str, str, str]]:
        """The test's own jobs, and every job resubmitted from one of them, with status and
        entrypoint: what a write of the agent on them would change. Only these: the shared head
        also holds earlier tests' jobs, and a stop of theirs still under way is not this test's."""
        own = set(jobs)
        return sorted((j.submission_id or "", str(j.status.value), j.entrypoint) for j in self.jobs.list_jobs()
                      if j.submission_id in own or (j.metadata or {}).get("crashcart_resubmit_of") in own)

    def window_start(self) -> datetime:
        """The start of a window of the head's failures that holds only what ends after this call:
        a watch cursor set here never sees an earlier test's failure. The Jobs API stamps a job's
        end in whole milliseconds, truncated, so one that ended before this call ends before
        this instant and one submitted after it ends after it."""
        return datetime.now(UTC)

    def stop(self, *jobs: str | None) -> None:
        """Stop the jobs and wait until they have stopped: a stop still under way would change a
        later test's snapshot of the head under it."""
        for job in jobs:
            if job:
                try:
                    self.jobs.stop_job(job)
                except Exception:
                    pass
        for job in jobs:
            if job:
                self.wait(job)


def run_agent(backend: RayBackend, trigger: dict[str, Any], store_path: Path, mode: str | None = None) -> dict[str, Any]:
    """One incident, start to report, with the playbook policy: the run's final state."""
    policy = policy_from_dict(ALLOW_ALL)
    if mode:
        policy = policy.model_copy(update={"mode": mode})
    deps = make_deps(backend, make_policy("playbook"), policy, IncidentStore(str(store_path)), cluster=CLUSTER)
    run = start_incident(deps, trigger, cluster=CLUSTER, source="test:ray")
    assert not run.interrupted, "the test guard has no approval tiers; nothing should wait"
    return run.state


def actions(state: dict[str, Any], tool: str | None = None) -> list[dict[str, Any]]:
    return [a for a in state.get("actions") or [] if tool is None or a["tool"] == tool]


def new_job(state: dict[str, Any]) -> str:
    done = [a for a in actions(state, "resubmit") if a["decision"] == "allow"]
    assert done, f"no resubmit was allowed: {[(a['tool'], a['decision'], a.get('reason')) for a in actions(state)]}"
    assert done[0]["result"], f"resubmit failed: {done[0].get('error')}"
    return done[0]["result"]["new_job"]


def kubernetes_settings(data: dict[str, Any]):
    """The `ray.kubernetes` section of a KubeRay cluster's config, validated."""
    from crashcart.tools.backends.kubernetes import KubernetesSettings

    return KubernetesSettings.model_validate(data)
