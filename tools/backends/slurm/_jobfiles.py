"""What a job wrote and was given: its log files, the training progress in them, and the
knobs it was submitted with (a mixin of SlurmBackend, kept apart for size)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import yaml

from crashcart.tools import render
from crashcart.tools._spec import ToolError
from crashcart.tools.backends.slurm import _parse as parse
from crashcart.tools.backends.slurm._submit import args_config, expand_pattern, export_env
from crashcart.tools.catalog import ConfigOutput, JobInput, LogOutput, LogsInput, ProgressOutput
from crashcart.tools.cluster import Checkpoint, ProgressPoint

if TYPE_CHECKING:
    from crashcart.tools.backends.slurm._backend import JobInfo


class JobFiles:
    def log_paths(self, info: JobInfo) -> list[str]:
        """Where the job's stdout and stderr go (one path when they are the same file)."""
        if info.stdout:
            paths = [info.stdout, info.stderr or info.stdout]
        else:
            sub = info.submitted()
            first = info.row.nodes[0] if info.row.nodes else None
            out = sub.get("output") or "slurm-%j.out"
            err = sub.get("error") or out
            paths = [expand_pattern(p, info.row.job, info.row.name, info.row.user, first) for p in (out, err)]
        workdir = info.workdir or "."
        paths = [p if p.startswith("/") else f"{workdir.rstrip('/')}/{p}" for p in paths]
        return list(dict.fromkeys(paths))

    def read_log(self, info: JobInfo) -> list[str]:
        paths = self.log_paths(info)
        result = self.cli.read(["tail", "-n", str(self.settings.max_log_lines), "--", *paths], check=False)
        if not result.ok and not result.stdout:
            raise ToolError(f"job {info.row.job}'s log cannot be read on {self.transport.where} "
                            f"({', '.join(paths)}): {result.stderr.strip()[-300:] or f'exit {result.rc}'}")
        return result.stdout.splitlines()

    def _tool_get_logs(self, a: LogsInput) -> LogOutput:
        info = self.job(a.job)
        note: list[str] = []
        if a.attempt is not None:
            entries = self.attempts(info)[:-1]
            if not 1 <= a.attempt <= len(entries):
                raise ToolError(f"job {info.row.job!r} has {len(entries)} earlier attempt(s); "
                                f"attempt must be 1..{len(entries)} or omitted for the latest")
            row = entries[a.attempt - 1][0]
            if row.job != info.row.job:
                info = self.job(row.job)
            else:
                note = [f"[crashcart: attempt {a.attempt} was a requeue of job {row.job}; Slurm writes "
                        "every run of a requeued job to the same file]"]
        lines = self.read_log(info)
        text, truncated, total = render.bound_lines(
            lines, a.tail, a.grep, a.since, render.job_log_stamp(self.now()))
        return LogOutput(job=a.job, text="\n".join([*note, text]) if note else text,
                         truncated=truncated, total_lines=total)

    def _tool_training_progress(self, a: JobInput) -> ProgressOutput:
        info = self.job(a.job)
        try:
            lines = self.read_log(info)
        except ToolError:
            lines = []
        points, checkpoints = self.progress(lines)
        text, truncated = self._bounded(render.progress_lines(parse.as_job(info.row), points, checkpoints, self.now()))
        return ProgressOutput(job=a.job, text=text, truncated=truncated, points=points, checkpoints=checkpoints)

    def progress(self, lines: list[str]) -> tuple[list[ProgressPoint], list[Checkpoint]]:
        p = self.settings.progress
        step, loss, tps, ckpt = (re.compile(x, re.I) for x in (p.step, p.loss, p.tokens_per_sec, p.checkpoint))
        stamp_of = render.job_log_stamp(self.now())
        points: list[ProgressPoint] = []
        checkpoints: list[Checkpoint] = []
        last_step: int | None = None
        for line in lines:
            stamp = stamp_of(line)
            if (c := ckpt.search(line)) and stamp:
                n = int(c["step"]) if c["step"] else last_step
                if n is not None:
                    checkpoints.append(Checkpoint(step=n, time=stamp, path=c["path"]))
                continue
            s = step.search(line)
            if s and stamp:
                last_step = int(s["step"])
                lv, tv = loss.search(line), tps.search(line)
                points.append(ProgressPoint(time=stamp, step=last_step,
                                            loss=float(lv["loss"]) if lv else None,
                                            tokens_per_sec=float(tv["tps"]) if tv else None))
        return points, checkpoints

    def _tool_job_config(self, a: JobInput) -> ConfigOutput:
        info = self.job(a.job)
        if info.live and not info.submit_line:
            # A job that just ended: accounting writes its submit line (the memory and options it
            # asked for) a second or more after slurmctld knows it. Wait as a resubmit does, or a
            # fast `watch` would propose a fix without them.
            try:
                info = self.actions._with_submit_line(info)
            except ToolError:
                pass
        config = self.job_config(info)
        dumped = yaml.safe_dump(config, sort_keys=False, default_flow_style=False) if config else ""
        lines = [f"# job {info.row.job} ({info.row.name or '-'}) as submitted: {info.submit_line or '(submit line not recorded)'}"]
        text, truncated = self._bounded(lines + (dumped.splitlines() or ["{}"]))
        return ConfigOutput(job=a.job, config=config, text=text, truncated=truncated)

    def job_config(self, info: JobInfo) -> dict[str, Any]:
        """The knobs a resubmit can change: the script's arguments or config file, the variables
        --export sets, excluded nodes, and the memory and time limit Slurm was asked for."""
        sub = info.submitted()
        if not sub.script and info.command:  # no submit line yet (accounting lags): the live Command
            words = info.command.split()
            sub.script, sub.args = words[0], words[1:]
        mode = self.settings.resubmit.config
        config: dict[str, Any] = {}
        if mode == "args":
            config = args_config(sub.args)
        elif mode == "file":
            config = self.actions.read_config_file(info)[1]
        env = export_env(sub.get("export"))
        if env:
            config["env"] = {**config.get("env", {}), **env}
        if excluded := sub.get("exclude"):
            config["exclude_nodes"] = parse.nodes_of(excluded)
        if (mem := _mem_gb(sub.get("mem"))) is not None:
            config["mem_gb"] = mem
        if sub.get("time"):
            config["time_limit"] = sub.get("time")
        return config


def _mem_gb(value: str | None) -> float | None:
    """sbatch --mem (default unit MiB) in GiB, the way scenarios write it."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)B?", (value or "").strip(), re.I)
    if not m or float(m[1]) == 0:
        return None
    mib = float(m[1]) * {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 ** 2}[m[2].upper()]
    return round(mib / 1024, 4)  # 0.1 MiB steps: 100M reads back as 100M
