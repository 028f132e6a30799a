"""Write tools on a real Slurm cluster, and the facts the guard decides on (ActionTarget).

- node_drain / node_resume: `scontrol update NodeName=X State=DRAIN|RESUME`; the drain
  reason names crashcart and the incident, so `sinfo -R` tells a person who did it and why.
- resubmit: the job's own batch script (`scontrol write batch_script`, else the script
  file it was submitted from) submitted again with its original sbatch options and the
  changes applied; the new job's comment names the job it replaces, which is how
  job_history and the restart budget find earlier attempts. A job slurmctld requeued and
  held after a failed launch, resubmitted without changes, is released instead
  (`scontrol update JobId=X ExcNodeList=...`, `scontrol release X`): it is still queued.
- cancel_job: scancel. escalate / notify: recorded and returned; delivering them is
  the notifier's job, not the backend's.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

import yaml

from crashcart.tools._spec import ToolCall, ToolError
from crashcart.tools.backends.base import (
    ActionTarget, PeopleActions, current_incident, held_after_failed_launch, set_dotted,
)
from crashcart.tools.backends.slurm._parse import ACTIVE, UNAVAILABLE, nodes_of
from crashcart.tools.backends.slurm._submit import export_option, render_options, set_args
from crashcart.tools.catalog import ActionOutput, CancelInput, NodeWriteInput, ResubmitInput
from crashcart.tools.render import compress_hostlist

if TYPE_CHECKING:
    from crashcart.tools.backends.slurm._backend import JobInfo, SlurmBackend

# Options that describe one submission, not the job: never carried into a resubmit.
_NOT_CARRIED = ("parsable", "wrap", "dependency", "comment", "export", "exclude", "chdir", "hold",
                "wait", "test-only", "verbose", "quiet", "help", "version", "uid", "gid")
_SAVE = ('umask 077; case "$1" in "~"/*) d="$HOME/${1#"~/"}";; *) d="$1";; esac; '
         'mkdir -p "$d" && cat > "$d/$2" && printf %s "$d/$2"')
SACCT_WAIT = (1, 2, 3, 4)
"""Seconds to wait, in turn, for accounting to record a job's submit line."""


def drain_reason(reason: str) -> str:
    """`crashcart <incident>: <reason>` on one line, short enough for sinfo -R."""
    text = re.sub(r"^\s*crashcart\s*:\s*", "", " ".join(reason.split()))
    return f"crashcart {current_incident() or 'no-incident'}: {text}"[:250]


class Actions(PeopleActions):
    def __init__(self, backend: SlurmBackend):
        self.b = backend

    # --- nodes -------------------------------------------------------------------------

    def node_drain(self, a: NodeWriteInput) -> ActionOutput:
        node = self.b.node(a.node)
        reason = drain_reason(a.reason)
        # Draining is idempotent, so a dropped connection may retry it.
        self.b.cli.run(["scontrol", "update", f"NodeName={node.name}", "State=DRAIN", f"Reason={reason}"])
        self.b.forget()
        after = self.b.node(node.name)
        return ActionOutput(ok=True, message=(
            f'scontrol update NodeName={node.name} State=DRAIN Reason="{reason}": node {node.name} is '
            f"{'already ' if node.state in ('drained', 'draining') else 'now '}{after.state} ({after.slurm_state})"))

    def node_resume(self, a: NodeWriteInput) -> ActionOutput:
        node = self.b.node(a.node)
        if node.state not in UNAVAILABLE:
            return ActionOutput(ok=True, message=f"node {node.name} is already in service ({node.slurm_state})")
        self.b.cli.run(["scontrol", "update", f"NodeName={node.name}", "State=RESUME"])
        self.b.forget()
        after = self.b.node(node.name)
        return ActionOutput(ok=True, message=(
            f"scontrol update NodeName={node.name} State=RESUME: node {node.name} was {node.slurm_state}, "
            f"now {after.slurm_state}"))

    # --- jobs --------------------------------------------------------------------------

    def cancel_job(self, a: CancelInput) -> ActionOutput:
        info = self.b.job(a.job)
        state = info.row.state.upper().split(" ")[0]
        if state not in ACTIVE:
            raise ToolError(f"job {a.job!r} is {info.row.state}; only pending or running jobs can be cancelled")
        self.b.cli.run(["scancel", a.job])
        return ActionOutput(ok=True, message=f"scancel {a.job}: job {a.job} ({info.row.state}) cancelled")

    def resubmit(self, a: ResubmitInput) -> ActionOutput:
        for name in a.exclude_nodes:
            self.b.node(name)
        if a.request_id and (done := self._submitted_for(a.request_id)):
            # The same request again (crashcart restarted mid-action): answer, don't submit twice.
            return ActionOutput(ok=True, new_job=done,
                                message=f"Already submitted as {done} (request {a.request_id})")
        held = self.b.job(a.job)
        if not a.changes and held.live and held_after_failed_launch(held.row.state, held.row.reason):
            return self._release(held.row.job, a)
        info = self._with_submit_line(held)
        sub = info.submitted()
        script = self._script(info, sub.script)
        env = {k[4:]: v for k, v in a.changes.items() if k.startswith("env.")}
        # Slurm's own options (memory, time limit) go to sbatch; the rest are the job's knobs.
        knobs = {k: v for k, v in a.changes.items()
                 if not k.startswith("env.") and k not in ("mem_gb", "time_limit", "exclude_nodes")}
        excluded = list(dict.fromkeys([*_nodes(sub.get("exclude")), *_nodes_of_change(a.changes), *a.exclude_nodes]))

        options = sub.without(*_NOT_CARRIED, *(("mem",) if "mem_gb" in a.changes else ()),
                              *(("time",) if "time_limit" in a.changes else ()))
        if info.workdir:
            options.append(("chdir", info.workdir))
        if "mem_gb" in a.changes:
            options.append(("mem", _mem_option(a.changes["mem_gb"])))
        if "time_limit" in a.changes:
            options.append(("time", str(a.changes["time_limit"])))
        args = list(sub.args)
        if knobs:
            args, file_env = self._apply_knobs(info, args, knobs)
            env.update(file_env)
        carried: dict[str, str] = {}
        if env or sub.get("export"):
            export, carried = export_option(sub.get("export"), env)
            options.append(("export", export))
        if excluded:
            options.append(("exclude", compress_hostlist(excluded)))
            options = _without_nodes(options, set(excluded))
        options.append(("comment", self._comment(info, a.request_id)))

        path = self.save(self.b.settings.resubmit.script_dir, f"{info.row.job}-resubmit-{_stamp()}.sh", script)
        argv = ["sbatch", "--parsable", *render_options(options), path, *args]
        # Never retried: a second sbatch would be a second job.
        out = self.b.cli.run(argv, env=carried or None, retry=False).stdout.strip()
        new_id = out.split(";")[0].strip()
        if not re.fullmatch(r"\d+", new_id):
            raise ToolError(f"sbatch did not print a job id (printed {out[:200]!r}); check squeue before retrying")
        details = "".join([f"; changes {a.changes}" if a.changes else "",
                           f"; excluding {','.join(excluded)}" if excluded else ""])
        return ActionOutput(ok=True, new_job=new_id,
                            message=f"Submitted batch job {new_id} (resubmit of {info.row.job}{details}; script {path})")

    def _release(self, job: str, a: ResubmitInput) -> ActionOutput:
        """A job slurmctld requeued and held after its launch failed runs again as itself: its
        excluded nodes updated, then released. A copy would leave the held one to start too."""
        rec = self.b.live_job(job) or {}
        excluded = list(dict.fromkeys([*nodes_of(rec.get("ExcNodeList")), *a.exclude_nodes]))
        update = ""
        if excluded:
            update = f"ExcNodeList={compress_hostlist(excluded)}"
            self.b.cli.run(["scontrol", "update", f"JobId={job}", update])
        # Releasing a job that is no longer held is a no-op for slurmctld, so a retry is safe.
        self.b.cli.run(["scontrol", "release", job])
        self.b.forget()
        return ActionOutput(ok=True, new_job=job, message=(
            f"{f'scontrol update JobId={job} {update}; ' if update else ''}scontrol release {job}: "
            f"job {job} (held after a failed launch) released"))

    def _with_submit_line(self, info: JobInfo) -> JobInfo:
        """Accounting writes a job's submit line seconds after slurmctld knows the job."""
        for pause in SACCT_WAIT:
            if info.submit_line:
                return info
            time.sleep(pause)
            self.b.forget()
            info = self.b.job(info.row.job)
        if not info.submit_line:
            raise ToolError(f"accounting has no submit line for job {info.row.job} yet, so its sbatch options "
                            "are unknown; try again in a minute")
        return info

    def _script(self, info: JobInfo, script_path: str | None) -> str:
        if info.live:
            result = self.b.cli.run(["scontrol", "write", "batch_script", info.row.job, "-"], check=False)
            if result.ok and result.stdout.strip():
                return result.stdout
        if script_path:
            path = script_path if script_path.startswith("/") else f"{(info.workdir or '.').rstrip('/')}/{script_path}"
            result = self.b.cli.run(["cat", "--", path], check=False)
            if result.ok:
                return result.stdout
            raise ToolError(f"the batch script of job {info.row.job} is gone: slurmctld no longer holds the job "
                            f"and {path} cannot be read ({result.stderr.strip()[-200:]})")
        raise ToolError(f"the batch script of job {info.row.job} is gone: slurmctld no longer holds the job "
                        "and it was not submitted from a file")

    def _comment(self, info: JobInfo, request_id: str | None) -> str:
        """The new job's comment: which job it replaces, for which incident and request
        (job_history follows it back; a repeated request finds it), then the job's own comment."""
        why = current_incident() or "no incident"
        lineage = f"crashcart: resubmit of {info.row.job} ({why}{f'; request {request_id}' if request_id else ''})"
        own = re.sub(r"crashcart: resubmit of \d+ \([^)]*\)(; )?", "", info.comment or "").strip()
        return f"{lineage}; {own}" if own else lineage

    def _submitted_for(self, request_id: str) -> str | None:
        """The job an earlier resubmit with this request id created, if any: every job
        slurmctld holds first, ended ones included (accounting lags by seconds), then
        accounting over the history window."""
        marker = f"; request {request_id})"
        for line in self.b.cli.out(["squeue", "-h", "-t", "all", "-o", "%i|%k"]).splitlines():
            job, _, comment = line.partition("|")
            if marker in comment:
                return job.strip()
        start = f"now-{self.b.settings.history_days}days"
        for line in self.b.cli.out(["sacct", "-X", "-P", "-n", "-a", "-S", start, "-o", "JobID,Comment"]).splitlines():
            job, _, comment = line.partition("|")
            if marker in comment:
                return job.strip()
        return None

    def _apply_knobs(self, info: JobInfo, args: list[str], knobs: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
        settings = self.b.settings.resubmit
        if settings.config == "args":
            return set_args(args, knobs), {}
        if settings.config == "none":
            raise ToolError(f"resubmit cannot change {', '.join(knobs)}: this cluster's config says "
                            "resubmit.config: none (only env.* keys, mem_gb, time_limit and excluded nodes)")
        path, config = self.read_config_file(info)
        for key, value in knobs.items():
            set_dotted(config, key, value)
        p = PurePosixPath(path)
        text = json.dumps(config, indent=2) if _is_json(path, settings.config_file.format) else yaml.safe_dump(config, sort_keys=False)
        copy = self.save(str(p.parent), f"{p.stem}.crashcart-{info.row.job}-{_stamp()}{p.suffix}", text)
        cf = settings.config_file
        if cf.pass_as_env:
            return args, {cf.pass_as_env: copy}
        return set_args(args, {cf.pass_as_arg.lstrip("-"): copy}), {}

    def read_config_file(self, info: JobInfo) -> tuple[str, dict[str, Any]]:
        cf = self.b.settings.resubmit.config_file
        path = cf.path.format(workdir=info.workdir or ".", job=info.row.job, name=info.row.name or "",
                              user=info.row.user or "")
        result = self.b.cli.run(["cat", "--", path], check=False)
        if not result.ok:
            raise ToolError(f"job {info.row.job}'s config file {path} cannot be read: {result.stderr.strip()[-200:]}")
        try:
            data = json.loads(result.stdout) if _is_json(path, cf.format) else yaml.safe_load(result.stdout)
        except (ValueError, yaml.YAMLError) as e:
            raise ToolError(f"job {info.row.job}'s config file {path} is not valid {'JSON' if _is_json(path, cf.format) else 'YAML'}: {e}") from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ToolError(f"job {info.row.job}'s config file {path} does not hold a mapping")
        return path, data

    def save(self, directory: str, name: str, content: str) -> str:
        """Write a file on the login node (through the transport); its absolute path."""
        result = self.b.cli.run(["sh", "-c", _SAVE, "sh", directory, name], input=content, retry=False)
        return result.stdout.strip()

    # --- facts for the guard -------------------------------------------------------------------

    def target(self, call: ToolCall) -> ActionTarget:
        args = call.args
        if node_name := args.get("node"):
            node = self.b.node(str(node_name))
            nodes = self.b.nodes()
            down = node.state in UNAVAILABLE
            # A node in several partitions is judged where draining it weighs most.
            best: tuple[float, str | None, int, int] | None = None
            for p in node.partitions or [None]:
                peers = [n for n in nodes if p in n.partitions] if p else [node]
                out = sum(n.state in UNAVAILABLE for n in peers)
                share = (out + (0 if down else 1)) / len(peers)
                if best is None or share > best[0]:
                    best = (share, p, len(peers), out)
            _, partition, size, out = best
            return ActionTarget(tool=call.tool, node=node.name, partition=partition, gpus=node.gpus,
                                partition_nodes=size, partition_unavailable=out, node_unavailable=down)
        if job_id := args.get("job"):
            info = self.b.job(str(job_id))
            earlier = [r for r, n in self.b.attempts(info) if n is not None]
            try:
                lines = self.b.read_log(info)
            except ToolError:
                lines = []
            _, checkpoints = self.b.progress(lines)
            last = max((c.time for c in checkpoints), default=None)
            # A run with no recorded end is counted: unknown must not look like progress.
            restarts = sum(last is None or r.end_time is None or r.end_time > last for r in earlier)
            return ActionTarget(tool=call.tool, job=info.row.job, partition=info.row.partition,
                                user=info.row.user, gpus=info.row.gpus,
                                restarts_without_progress=restarts, last_checkpoint=last)
        return ActionTarget(tool=call.tool)


def _nodes(text: str | None) -> list[str]:
    return nodes_of(text)


def _nodes_of_change(changes: dict[str, Any]) -> list[str]:
    value = changes.get("exclude_nodes") or []
    return [str(v) for v in value] if isinstance(value, list) else _nodes(str(value))


def _without_nodes(options: list[tuple[str, str | None]], excluded: set[str]) -> list[tuple[str, str | None]]:
    """A job pinned to a node (--nodelist) that is now excluded would be refused by sbatch
    ("Required nodes excluded"): the pin loses those nodes, or goes if none are left."""
    out = []
    for key, value in options:
        if key == "nodelist" and value:
            kept = [n for n in _nodes(value) if n not in excluded]
            if not kept:
                continue
            value = compress_hostlist(kept)
        out.append((key, value))
    return out


def _mem_option(gb: Any) -> str:
    try:
        mib = round(float(gb) * 1024)
    except (TypeError, ValueError):
        raise ToolError(f"resubmit: mem_gb must be a number of GiB, got {gb!r}") from None
    if mib <= 0:
        raise ToolError(f"resubmit: mem_gb must be positive, got {gb!r}")
    return f"{mib}M"


def _is_json(path: str, fmt: str) -> bool:
    return fmt == "json" or (fmt == "auto" and path.endswith(".json"))


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
