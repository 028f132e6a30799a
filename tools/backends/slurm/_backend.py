"""The slurm backend: Contract 1's tools on a real Slurm cluster, through its CLI.

Every tool returns the same typed output as the fixture backend (JobRow, NodeRow,
GpuSample, ...) so the agent cannot tell them apart; the text is what the real
command printed (sacct -P) or the fixture's rendering of the same facts where
the command's own output is JSON. Logs, progress and job config live in
`_jobfiles.py`, writes and the guard's facts in `_actions.py`.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any


from crashcart.tools import render
from crashcart.tools._spec import ToolError
from crashcart.tools.backends.base import STUCK_PENDING_REASONS, LiveBackend, ClusterChanges
from crashcart.tools.backends.slurm import _limits as limits
from crashcart.tools.backends.slurm import _parse as parse
from crashcart.tools.backends.slurm._cli import SlurmCLI
from crashcart.tools.backends.slurm._config import SlurmSettings
from crashcart.tools.backends.slurm._jobfiles import JobFiles
from crashcart.tools.backends.slurm._nodes import MISSING, NodeRunner
from crashcart.tools.backends.slurm._parse import ACTIVE
from crashcart.tools.backends.slurm._submit import SubmitLine, parse_submit_line
from crashcart.tools.catalog import (
    DiskOutput, GpuOutput, HistoryInput, JobRow, JobsOutput, ListJobsInput, MetricsInput, NodeInput, NodeLogInput,
    NodeLogOutput, NodeRow, NodesOutput, PartitionInput, PartitionOutput, QueueInput, SacctInput, SacctmgrInput,
    SacctmgrOutput, SinfoInput, SprioOutput, SshareInput, SshareOutput,
)
from crashcart.tools.diskfree import DF_COMMAND, parse_df
from crashcart.tools.transport import Transport

STATE_CODES = {
    "PD": "PENDING", "R": "RUNNING", "CF": "CONFIGURING", "CG": "COMPLETING", "CD": "COMPLETED",
    "F": "FAILED", "CA": "CANCELLED", "NF": "NODE_FAIL", "TO": "TIMEOUT", "OOM": "OUT_OF_MEMORY",
    "PR": "PREEMPTED", "S": "SUSPENDED", "RQ": "REQUEUED", "BF": "BOOT_FAIL", "DL": "DEADLINE",
}
LINEAGE = re.compile(r"crashcart: resubmit of (\d+)")
"""The comment a resubmitted job carries, naming the job it replaces."""
SLURM_KEYS = {"mem_gb"}
"""Config keys Slurm itself owns: they become sbatch options, not script arguments."""
NODE_CACHE_SECONDS = 2.0


@dataclass
class JobInfo:
    """One job as Slurm knows it: its row plus what a log read or a resubmit needs."""

    row: JobRow
    live: bool
    """slurmctld still holds it (pending, running, or ended less than MinJobAge ago)."""
    workdir: str | None = None
    submit_line: str = ""
    comment: str = ""
    command: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    restarts: int = 0

    def submitted(self) -> SubmitLine:
        return parse_submit_line(self.submit_line, {"job-name": self.row.name or "", "comment": self.comment})


def _known(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return f"{shown}, ... ({len(names)} in all)" if len(names) > limit else shown or "none"


def _states(wanted: list[str] | None) -> set[str]:
    return {STATE_CODES.get(w.upper(), w.upper()) for w in wanted or []}


class SlurmBackend(JobFiles, LiveBackend):
    kind = "slurm"

    def __init__(self, settings: SlurmSettings | None = None, transport: Transport | None = None):
        from crashcart.tools.backends.slurm._actions import Actions

        self.settings = settings or SlurmSettings()
        self.transport = transport or self.settings.login_transport()
        self.cli = SlurmCLI(self.transport, self.settings.json_output)
        self.node_runner = NodeRunner(self.settings, self.cli)
        self.actions = Actions(self)
        self.escalations: list[dict[str, Any]] = []
        self.notifications: list[dict[str, Any]] = []
        self._node_cache: tuple[float, list[parse.NodeInfo]] | None = None

    def forget(self) -> None:
        self._node_cache = None
        self.cli.forget()

    def now(self) -> datetime:
        return datetime.now(UTC)

    def close(self) -> None:
        self.transport.close()


    # --- nodes -------------------------------------------------------------------------

    def nodes(self) -> list[parse.NodeInfo]:
        cached = self._node_cache
        if cached and time.monotonic() - cached[0] < NODE_CACHE_SECONDS:
            return cached[1]
        if self.cli.json_ok:
            nodes = self._json("sinfo", parse.sinfo_json)
        else:
            nodes = parse.sinfo_text(self.cli.out(["sinfo", "-N", "-h", "-o", parse.SINFO_FORMAT]))
        self._node_cache = (time.monotonic(), nodes)
        return nodes

    def _json(self, command: str, read):
        """`command --json`, read by `read`; output it cannot read is a ToolError that shows it."""
        text = self.cli.out([command, "--json"])
        try:
            return read(json.loads(text))
        except (ValueError, KeyError, TypeError, AttributeError) as e:  # AttributeError: another shape
            raise ToolError(f"{command} --json printed something crashcart cannot read ({e}): {text[:200]!r}") from None

    def node(self, name: str) -> parse.NodeInfo:
        nodes = self.nodes()
        for n in nodes:
            if n.name == name:
                return n
        raise ToolError(f"node {name!r} is not in this Slurm cluster (known: {_known([n.name for n in nodes])})")

    @staticmethod
    def node_row(n: parse.NodeInfo, partition: str | None = None) -> NodeRow:
        # A node in several partitions is shown in the first by name: sinfo's text and JSON list them in different orders.
        return NodeRow(node=n.name, partition=partition or (min(n.partitions) if n.partitions else None),
                       state=n.state, gpus=n.gpus, gpu_model=n.gpu_model, reason=n.reason)

    # --- jobs --------------------------------------------------------------------------

    def sacct(self, args: list[str]) -> tuple[str, list[JobRow]]:
        text = self.cli.out(["sacct", "-P", "-o", ",".join(parse.SACCT_FIELDS), *args])
        return text, parse.sacct_jobs(parse.sacct_records(text))

    def live_job(self, job_id: str) -> dict[str, str] | None:
        if not re.fullmatch(r"\d+(_\d+)?", job_id):
            return None
        result = self.cli.read(["scontrol", "show", "job", "-o", job_id], check=False)
        if not result.ok:
            if "Invalid job id" in result.stderr:
                return None
            raise ToolError(f"`scontrol show job {job_id}` failed: {result.stderr.strip()[-300:]}")
        line = next((x for x in result.stdout.splitlines() if x.startswith("JobId=")), None)
        return parse.scontrol_record(line) if line else None

    def job(self, job_id: str) -> JobInfo:
        """A job from slurmctld (if it still holds it) and accounting; ToolError naming it if neither does."""
        if not re.fullmatch(r"\d+(_\d+)?", job_id):
            raise ToolError(f"job {job_id!r} is not a Slurm job id (a number, or NUMBER_INDEX for an array task)")
        live = self.live_job(job_id)
        details = self._acct_details(job_id)
        rows = [r for r in self.sacct(["-D", "-X", "-j", job_id])[1] if r.attempt is None]
        if live is None and not rows:
            raise ToolError(f"job {job_id!r} is not known to this Slurm cluster (neither scontrol nor sacct has it)")
        row = parse.scontrol_job(live) if live else rows[-1]
        if live and rows and not row.gpus:
            row = row.model_copy(update={"gpus": rows[-1].gpus})
        info = JobInfo(row=row, live=live is not None, workdir=details.get("WorkDir") or None,
                       submit_line=details.get("SubmitLine", ""), comment=details.get("Comment", ""))
        if live:
            info.workdir = live.get("WorkDir") or info.workdir
            info.comment = live.get("Comment") or info.comment
            info.command = live.get("Command") or None
            info.stdout = live.get("StdOut") or None
            info.stderr = live.get("StdErr") or None
            info.restarts = int(live.get("Restarts", "0") or 0) if live.get("Restarts", "0").isdigit() else 0
        return info

    def _acct_details(self, job_id: str) -> dict[str, str]:
        # SubmitLine last: it is free text and may hold the delimiter.
        text = self.cli.out(["sacct", "-P", "-n", "-X", "-j", job_id, "-o", "JobID,WorkDir,Comment,SubmitLine"])
        found: dict[str, str] = {}
        for line in text.splitlines():
            cells = line.split("|", 3)
            if len(cells) != 4:
                raise ToolError(f"sacct printed a line crashcart cannot read: {line[:300]!r}")
            if cells[0] == job_id:
                found = {"WorkDir": cells[1], "Comment": cells[2], "SubmitLine": cells[3]}
        return found

    def attempts(self, info: JobInfo) -> list[tuple[JobRow, int | None]]:
        """Earlier runs of a job, oldest first, then the job itself: requeues of the same id
        (sacct -D) and the jobs crashcart resubmitted it from (their comments name them)."""
        chain: list[JobRow] = []
        seen = {info.row.job}
        comment = info.comment
        while (m := LINEAGE.search(comment or "")) and m[1] not in seen and len(seen) < 20:
            seen.add(m[1])
            _, rows = self.sacct(["-D", "-X", "-j", m[1]])
            chain[:0] = rows
            comment = self._acct_details(m[1]).get("Comment", "")
        _, own = self.sacct(["-D", "-X", "-j", info.row.job])
        earlier = chain + [r for r in own if r.attempt is not None]
        return [(r.model_copy(update={"attempt": i}), i) for i, r in enumerate(earlier, 1)] + [(info.row, None)]

    def queue(self, with_ended: bool = False) -> list[JobRow]:
        """Jobs slurmctld holds: the queue, and with `with_ended` also jobs that ended within
        MinJobAge (squeue --json lists those anyway; text squeue needs `-t all`)."""
        if self.cli.json_ok:
            rows = self._json("squeue", parse.squeue_json)
        else:
            states = ["-t", "all"] if with_ended else []
            rows = parse.squeue_text(self.cli.out(["squeue", "-h", *states, "-o", parse.SQUEUE_FORMAT]))
        return rows if with_ended else [r for r in rows if r.state.upper() in ACTIVE]

    # --- watching --------------------------------------------------------------------------

    WATCHED_STATES = "FAILED,NODE_FAIL,OUT_OF_MEMORY,TIMEOUT,BOOT_FAIL,PREEMPTED,DEADLINE"

    def changes_since(self, since: datetime, stall_minutes: float) -> ClusterChanges:
        """One sacct over the window (only jobs that ended badly in it), the queue for stuck
        pending reasons, sinfo for nodes down: three commands per poll, however big the history."""
        now = self.now()
        start = render.aware(since).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _, rows = self.sacct(["-X", "-a", "-S", start, "-E", "now", "-s", self.WATCHED_STATES])
        since_utc = render.aware(since)
        changes = ClusterChanges(now=now)
        changes.failed = [r for r in rows if r.attempt is None and r.end_time and r.end_time > since_utc
                          and r.state.upper().split(" ")[0] in self.WATCHED_STATES.split(",")]
        changes.pending = [r for r in self.queue() if r.state.upper() == "PENDING" and r.reason in STUCK_PENDING_REASONS]
        changes.stalled = self.stalled_jobs(now, timedelta(minutes=stall_minutes))
        changes.nodes_down = [self.node_row(n) for n in self.nodes() if n.state in ("down", "not_ready")]
        return changes

    def stalled_jobs(self, now: datetime, stall: timedelta) -> list[JobRow]:
        """Running jobs whose log has not grown for `stall`: Slurm records no progress, so the
        job's own output is the heartbeat. Two commands however many jobs run: one
        `scontrol show job` for every job's log paths, one `stat` over all the logs."""
        running: list[tuple[JobRow, list[str]]] = []
        for line in self.cli.out(["scontrol", "show", "job", "-o"]).splitlines():
            if not line.startswith("JobId="):
                continue
            rec = parse.scontrol_record(line)
            if rec.get("JobState", "").upper() != "RUNNING" or rec.get("BatchFlag") == "0":
                continue
            row = parse.scontrol_job(rec)
            started = row.start_time and render.aware(row.start_time)
            if not started or now - started < stall:
                continue  # too young to have stalled, whatever its log says
            info = JobInfo(row=row, live=True, workdir=rec.get("WorkDir") or None,
                           stdout=rec.get("StdOut") or None, stderr=rec.get("StdErr") or None)
            running.append((row, self.log_paths(info)))
        if not running:
            return []
        paths = sorted({p for _, ps in running for p in ps})
        # A log that cannot be stat'ed (not on the login node's filesystem) proves nothing: skipped.
        result = self.cli.read(["stat", "-c", "%Y|%n", "--", *paths], check=False)
        written: dict[str, datetime] = {}
        for line in result.stdout.splitlines():
            stamp, _, path = line.partition("|")
            if stamp.isdigit():
                written[path] = datetime.fromtimestamp(int(stamp), UTC)
        stalled = []
        for row, ps in running:
            seen = [written[p] for p in ps if p in written]
            if seen and now - max(seen) >= stall:
                stalled.append(row)
        return stalled

    @staticmethod
    def _filter(rows: list[JobRow], *, node=None, partition=None, user=None, state=None) -> list[JobRow]:
        wanted = _states(state)
        return [r for r in rows
                if (node is None or node in r.nodes) and (partition is None or r.partition == partition)
                and (user is None or r.user == user)
                and (not wanted or r.state.upper().split(" ")[0] in wanted)]

    def _bounded(self, lines: list[str], pinned: int = 0) -> tuple[str, bool]:
        text, truncated, _ = render.bound_lines(lines, pinned=pinned)
        return text, truncated

    # --- read tools: jobs --------------------------------------------------------------

    def _tool_sacct(self, a: SacctInput) -> JobsOutput:
        if a.node:
            self.node(a.node)
        args = ["-D"]
        if a.job:
            args += ["-j", a.job]
        else:
            start = a.starttime or (self.now() - timedelta(days=self.settings.history_days))
            args += ["-S", render.aware(start).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S"), "-E", "now"]
            args += ["-u", a.user] if a.user else ["-a"]
            if a.node:
                args += ["-N", a.node]
        text, rows = self.sacct(args)
        if a.job and not rows:
            text, rows = self._not_in_accounting_yet(a.job, text)
        elif a.job:
            text, rows = self._fresher_from_slurmctld(a.job, text, rows)
        if a.job or a.state:
            rows = self._filter(rows, user=a.user, state=a.state)
        lines = text.splitlines()
        if a.state:
            keep = {r.job for r in rows}
            lines = lines[:1] + [x for x in lines[1:] if x.split("|", 1)[0].split(".")[0] in keep]
        out, truncated = self._bounded(lines, pinned=1)
        return JobsOutput(text=out, truncated=truncated, rows=rows)

    def _not_in_accounting_yet(self, job_id: str, text: str) -> tuple[str, list[JobRow]]:
        """sacct lags slurmctld by seconds: a job it has no record of may still be live."""
        live = self.live_job(job_id)
        if live is None:
            raise ToolError(f"job {job_id!r} is not known to this Slurm cluster (neither sacct nor scontrol has it)")
        note = f"[crashcart: accounting has no record of job {job_id} yet; the row below is from scontrol show job]"
        return "\n".join([note, *text.splitlines()[:1]]), [parse.scontrol_job(live)]

    def _fresher_from_slurmctld(self, job_id: str, text: str, rows: list[JobRow]) -> tuple[str, list[JobRow]]:
        """Accounting records a job late: for seconds it may show the placeholder name
        `allocation`, and a live job's state and pending reason trail slurmctld's. While
        slurmctld still holds the job, the row takes its word, and the text says so."""
        live = self.live_job(job_id)
        current = next((i for i, r in enumerate(rows) if r.job == job_id and r.attempt is None), None)
        if live is None or current is None:
            return text, rows
        now, old = parse.scontrol_job(live), rows[current]
        moved = now.state != old.state or (now.state.upper() in ACTIVE and now.reason != old.reason)
        if not moved and now.name == old.name:
            return text, rows
        rows = list(rows)
        rows[current] = old.model_copy(update={"name": now.name or old.name, **({
            "state": now.state, "reason": now.reason, "nodes": now.nodes or old.nodes,
            "start_time": now.start_time or old.start_time, "end_time": now.end_time or old.end_time,
            "depends_on": now.depends_on} if moved else {})})
        if not moved:
            return text, rows
        note = (f"[crashcart: slurmctld reports job {job_id} {now.state} (reason {now.reason or 'None'}); "
                f"accounting below still says {old.state} (reason {old.reason or 'None'})]")
        return "\n".join([note, text]), rows

    def _tool_squeue(self, a: QueueInput) -> JobsOutput:
        if a.partition:
            self._partition(a.partition)
        rows = self._filter(self.queue(), partition=a.partition, user=a.user, state=a.state)
        out, truncated = self._bounded(render.squeue_lines([parse.as_job(r) for r in rows], self.now()), pinned=1)
        return JobsOutput(text=out, truncated=truncated, rows=rows)

    def _tool_list_jobs(self, a: ListJobsInput) -> JobsOutput:
        if a.node:
            self.node(a.node)
        start = self.now() - timedelta(days=1)
        args = ["-X", "-S", start.strftime("%Y-%m-%dT%H:%M:%S"), "-E", "now"]
        args += ["-u", a.user] if a.user else ["-a"]
        if a.node:
            args += ["-N", a.node]
        _, ended = self.sacct(args)
        merged = {r.job: r for r in ended if r.attempt is None}
        # slurmctld's view of the jobs it holds is the fresh one (accounting lags by seconds);
        # accounting keeps what slurmctld does not report, like a finished job's exit code.
        for r in self.queue(with_ended=True):
            known = merged.get(r.job)
            merged[r.job] = r if known is None else known.model_copy(update={
                k: v for k, v in r.model_dump().items() if v not in (None, [], 0, "") and k != "exit_code"})
        rows = self._filter(sorted(merged.values(), key=lambda r: int(r.job.split("_")[0])),
                            node=a.node, partition=a.partition, user=a.user, state=a.state)
        lines = render.sacct_lines([parse.as_job(r) for r in rows], self.now(), steps=False)
        out, truncated = self._bounded(lines, pinned=1)
        return JobsOutput(text=out, truncated=truncated, rows=rows)

    def _tool_job_history(self, a: HistoryInput) -> JobsOutput:
        if a.job:
            entries = self.attempts(self.job(a.job))
            rows = [r for r, _ in entries]
        else:
            start = self.now() - timedelta(days=a.days)
            args = ["-D", "-X", "-S", start.strftime("%Y-%m-%dT%H:%M:%S"), "-E", "now"]
            args += ["-u", a.user] if a.user else ["-a"]
            if a.partition:
                args += ["-r", a.partition]
            rows = self.sacct(args)[1]
            entries = [(r, r.attempt) for r in rows]
        lines = render.history_lines([(parse.as_job(r), n) for r, n in entries], self.now())
        out, truncated = self._bounded(lines, pinned=1)
        return JobsOutput(text=out, truncated=truncated, rows=rows)

    # --- read tools: nodes ---------------------------------------------------------------

    def _partition(self, name: str) -> list[parse.NodeInfo]:
        nodes = self.nodes()
        members = [n for n in nodes if name in n.partitions]
        if not members:
            known = sorted({p for n in nodes for p in n.partitions})
            raise ToolError(f"partition {name!r} is not in this Slurm cluster (known: {_known(known)})")
        return members

    def _tool_sinfo(self, a: SinfoInput) -> NodesOutput:
        if a.node:
            nodes = [self.node(a.node)]
        elif a.partition:
            nodes = self._partition(a.partition)
        else:
            nodes = self.nodes()
        rows = [self.node_row(n, a.partition) for n in nodes]
        lines = render.sinfo_lines([parse.as_node(r) for r in rows])
        text, truncated = self._bounded(lines, pinned=1)
        return NodesOutput(text=text, truncated=truncated, rows=rows)

    def _tool_partition_info(self, a: PartitionInput) -> PartitionOutput:
        result = self.cli.read(["scontrol", "show", "partition", "-o", a.partition], check=False)
        line = next((l for l in result.stdout.splitlines() if l.startswith("PartitionName=")), "")
        if not result.ok or not line:
            raise ToolError(f"`scontrol show partition {a.partition}` failed: "
                            f"{(result.stderr or result.stdout).strip()[-300:] or 'no such partition'}")
        rec = parse.scontrol_record(line)
        return PartitionOutput(text=line, partition=rec.get("PartitionName", a.partition), max_time=rec.get("MaxTime"))

    def _tool_sacctmgr_show(self, a: SacctmgrInput) -> SacctmgrOutput:
        if a.entity == "qos":
            out = self.cli.out(limits.QOS_ARGV)
            return SacctmgrOutput(text=self._bounded(out.splitlines(), pinned=1)[0], qos=limits.qos_rows(out))
        out = self.cli.out(limits.ASSOC_ARGV)
        return SacctmgrOutput(text=self._bounded(out.splitlines(), pinned=1)[0], associations=limits.assoc_rows(out))

    def _tool_sshare(self, a: SshareInput) -> SshareOutput:
        argv = limits.SSHARE_ARGV + (["-A", a.account] if a.account else [])
        out = self.cli.out(argv)
        text, truncated = self._bounded(out.splitlines(), pinned=1)
        return SshareOutput(text=text, truncated=truncated, shares=limits.sshare_rows(out))

    def _tool_sprio(self, a: QueueInput) -> SprioOutput:
        argv = limits.SPRIO_ARGV + (["-p", a.partition] if a.partition else []) + (["-u", a.user] if a.user else [])
        out = self.cli.out(argv)
        text, truncated = self._bounded(out.splitlines(), pinned=1)
        return SprioOutput(text=text, truncated=truncated, priorities=limits.sprio_rows(out))

    def running_job_on(self, node: str) -> str | None:
        """The job to run an srun step in, when node commands go through srun."""
        if self.settings.node_access.method != "srun":
            return None
        return next((r.job for r in self.queue() if node in r.nodes and r.state.upper() == "RUNNING"), None)

    def _tool_nvidia_smi_query(self, a: NodeInput) -> GpuOutput:
        node = self.node(a.node)
        script = ("command -v nvidia-smi >/dev/null 2>&1 || "
                  f"{{ echo \"crashcart: nvidia-smi is not available on node {node.name} (not installed or not on PATH)\" >&2; exit {MISSING}; }}; "
                  f"nvidia-smi --query-gpu={render.NVIDIA_SMI_QUERY} --format=csv")
        result = self.node_runner.run(node, script, self.running_job_on(node.name))
        if result.unavailable:
            return GpuOutput(node=node.name, text=result.unavailable, gpus=[])
        samples, _ = parse.nvidia_smi_samples(result.stdout, self.now())
        text, truncated = self._bounded(result.stdout.splitlines())
        return GpuOutput(node=node.name, text=text, truncated=truncated, gpus=samples)

    def _tool_gpu_metrics(self, a: MetricsInput) -> GpuOutput:
        node = self.node(a.node)
        now = self.now()
        until = render.aware(a.until) if a.until else now
        if until < now - timedelta(minutes=5):
            window = f"{render.iso_z(a.since or until - timedelta(hours=1))} and {render.iso_z(until)}"
            return GpuOutput(node=node.name, gpus=[], text=(
                f"No GPU samples for node {node.name} between {window}: this cluster keeps no GPU telemetry "
                "history (no DCGM exporter is configured); only the live reading (nvidia_smi_query) is available."))
        live = self._tool_nvidia_smi_query(NodeInput(node=a.node))
        if not live.gpus:
            return live
        text, truncated = self._bounded(render.gpu_metrics_table(live.gpus, now))
        return GpuOutput(node=node.name, text=text, truncated=truncated, gpus=live.gpus)

    def _tool_kernel_log(self, a: NodeLogInput) -> NodeLogOutput:
        node = self.node(a.node)
        n = self.settings.max_log_lines
        script = (f"if out=$(dmesg -T 2>&1); then printf '%s\\n' \"$out\" | tail -n {n}; "
                  f"elif out2=$(journalctl -k -o short-iso --no-pager -n {n} 2>&1); then printf '%s\\n' \"$out2\"; "
                  f"else echo \"crashcart: the kernel log of node {node.name} is not readable: $out\" >&2; exit {MISSING}; fi")
        result = self.node_runner.run(node, script, self.running_job_on(node.name))
        if result.unavailable:
            return NodeLogOutput(node=node.name, text=result.unavailable, total_lines=0)
        text, truncated, total = render.bound_lines(
            result.stdout.splitlines(), a.tail, a.grep, a.since, render.kernel_log_stamp(self.now()))
        return NodeLogOutput(node=node.name, text=text, truncated=truncated, total_lines=total)

    def _tool_disk_usage(self, a: NodeInput) -> DiskOutput:
        node = self.node(a.node)
        result = self.node_runner.run(node, DF_COMMAND, self.running_job_on(node.name))
        if result.unavailable:
            return DiskOutput(node=node.name, text=result.unavailable)
        return DiskOutput(node=node.name, text=result.stdout.rstrip(), mounts=parse_df(result.stdout))


__all__ = ["JobInfo", "SlurmBackend"]
