"""A verdict from a log alone (Contract 3): what can be told without a cluster.

The same playbooks as the agent, matched over the text as if it were every
kind of text the agent reads (a job log, a kernel log, an event dump), so a
pasted dmesg or `kubectl get events` works as well as a job's output.
"""

from __future__ import annotations

import gzip
import io
import re
from collections import deque
from datetime import datetime, timezone
from pathlib import Path
from statistics import median
from typing import IO, Any, Iterable

from pydantic import BaseModel, Field

from crashcart.agent.policies.config_keys import load_key_table
from crashcart.agent.policies.evidence import Evidence, TextDoc
from crashcart.agent.policies.matching import match_label
from crashcart.agent.policies.playbook import SUSPICIOUS
from crashcart.agent.policies.computed import FROM_OTHER_RUNS
from crashcart.agent.policies.remedy import parse_number, captured_values, fallback_team
from crashcart.agent.rank_progress import ranks_out_of_step
from crashcart.playbooks import Change, KnowledgeBase, load_playbooks

TEXT_KINDS = ("log", "kernel_log", "events", "describe", "status_message")

# A trainer's step counter ("step 41210", "global_step=12", "iteration 300", "iter: 9"); not "last_step".
_STEP = re.compile(r"\b(?:global[_ ]?)?(?:step|iter(?:ation)?)\b\s*[=:]?\s*(\d+)", re.I)
STALL_MINUTES = 30


class LogError(Exception):
    """The input is not a log we can read (empty, binary)."""


class Verdict(BaseModel):
    family: str
    diagnosis: str
    remedy: str
    retriable: bool
    changes: dict[str, Any] = Field(default_factory=dict)
    confidence: float
    evidence: list[str] = Field(default_factory=list)
    summary: str
    source: str | None = None


def read_log_bytes(data: bytes, source: str) -> str:
    if not data.strip():
        raise LogError(f"{source}: the log is empty")
    if b"\x00" in data[:8192]:
        raise LogError(f"{source}: this looks like a binary file, not a log")
    return data.decode("utf-8", errors="replace")


# Settings every trainer has in some form: a log alone is enough to recommend changing them.
COMMON_SETTINGS = {"per_gpu_batch", "dataloader_workers", "activation_checkpointing"}


def _described_changes(rules: dict[str, Change], captures: dict[str, str]) -> dict[str, Any]:
    """Without the job's config, a change is named by its setting's most common key
    (`batch_size` for the per-GPU batch) and described, not computed."""
    table = load_key_table()
    described: dict[str, Any] = {}
    for name, rule in rules.items():
        if rule.only_if_present and name not in COMMON_SETTINGS and rule.capture not in captures:
            continue
        setting = table.settings.get(name)
        described[setting.keys[0].key if setting else name] = _describe_change(rule, captures)
    return described

# A log bigger than this many lines is read as a window: its head, its tail, and the lines in
# between that could be evidence (capped at both ends). Memory stays bounded whatever the size.
HEAD_LINES = 2_000
TAIL_LINES = 4_000
MIDDLE_LINES = 4_000
CHUNK_BYTES = 8 << 20
# Matched on lowercased bytes: a literal alternation is what `re` scans fastest (100 MB in ~2 s).
_CANDIDATE = re.compile(b"|".join(re.escape(w.encode()) for w in (
    "error", "exception", "traceback", "fatal", "fail", "kill", "abort", "timeout", "timed out", "panic",
    "segfault", "nan", "oom", "out of memory", "nccl", "xid", "nvrm", "cuda", "ecc", "signal", "denied",
    "no space", "quota", "hang", "watchdog", "stall", "warn", "evict", "preempt", "cancel", "refused",
    "unreachable", "mismatch", "nvlink", "infiniband", "mlx", "raylet", "gcs", "backoff", "throttl",
    "remap", "corrupt", "stale", "heartbeat", "exit code", "exited")))


def open_log(name: str, stdin: IO[bytes] | None = None) -> IO[bytes]:
    """A log as a byte stream: a file, `-` for standard input, gzip read through when it is one."""
    raw: IO[bytes] = stdin if name == "-" and stdin is not None else open(Path(name), "rb")
    if not hasattr(raw, "peek"):
        raw = io.BufferedReader(raw)  # type: ignore[arg-type]
    if name.endswith(".gz") or raw.peek(2)[:2] == b"\x1f\x8b":  # type: ignore[attr-defined]
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    return raw


def read_log_lines(stream: IO[bytes], source: str) -> list[str]:
    """The lines of a log a verdict needs, streamed: the whole log when it is small, else a
    bounded window (head, tail, and candidate evidence lines between), in their order."""
    head: list[bytes] = []
    tail: deque[bytes] = deque(maxlen=TAIL_LINES)
    first_middle: list[tuple[int, bytes]] = []
    # Room for the tail too: candidates that end up in the tail are dropped at the end.
    last_middle: deque[tuple[int, bytes]] = deque(maxlen=MIDDLE_LINES // 2 + TAIL_LINES)
    total, carry, checked = 0, b"", False
    try:
        while True:
            chunk = stream.read(CHUNK_BYTES)
            if not checked:
                checked = True
                if b"\x00" in chunk[:8192]:
                    raise LogError(f"{source}: this looks like a binary file, not a log")
            data = carry + chunk
            if not data:
                break
            if chunk:
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    carry = data
                    continue
                data, carry = data[:cut], data[cut:]
            else:
                carry = b""
            lines = data.split(b"\n")
            if data.endswith(b"\n"):
                lines.pop()
            take = max(0, min(len(lines), HEAD_LINES - len(head)))
            head += lines[:take]
            rest = lines[take:]
            if rest:
                _collect_candidates(rest, total + take, first_middle, last_middle)
                tail.extend(rest)
            total += len(lines)
            if not chunk:
                break
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise LogError(f"{source}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    tail_start = total - len(tail)
    middle = [line for n, line in first_middle + list(last_middle) if n < tail_start]
    kept = [line.decode("utf-8", errors="replace").rstrip("\r") for line in head + middle + list(tail)]
    if not any(line.strip() for line in kept):
        raise LogError(f"{source}: the log is empty")
    return kept


def _collect_candidates(lines: list[bytes], first_number: int, first: list[tuple[int, bytes]],
                        last: deque[tuple[int, bytes]]) -> None:
    block = b"\n".join(lines).lower()
    index, pos, previous = 0, 0, -1
    for m in _CANDIDATE.finditer(block):
        index += block.count(b"\n", pos, m.start())
        pos = m.start()
        if index == previous:
            continue
        previous = index
        item = (first_number + index, lines[index])
        (first if len(first) < MIDDLE_LINES // 2 else last).append(item)


def read_log_file(name: str, stdin: IO[bytes] | None = None) -> list[str]:
    """One log's lines for a verdict; LogError names the file and what is wrong."""
    try:
        stream = open_log(name, stdin)
    except OSError as e:
        raise LogError(f"{name}: cannot read ({e.strerror or e})") from None
    with stream:
        return read_log_lines(stream, name)


def _describe_change(rule: Change, captures: dict[str, str]) -> Any:
    if rule.capture and rule.capture in captures:
        # The log itself printed the value that fits: report it, not a formula.
        return parse_number(captures[rule.capture])
    if rule.previous_checkpoint or rule.compute == "newest_complete_checkpoint":
        return "<previous checkpoint>"
    if rule.compute:
        return f"<computed: {rule.compute.replace('_', ' ')}>"
    if rule.set is not None:
        return rule.set
    if rule.divide:
        return f"<current / {rule.divide:g}>"
    if rule.multiply:
        return f"<current x {rule.multiply:g}>"
    return "<changed>"


def _stalled_in_log(lines: list[str]) -> tuple[float, list[str]] | None:
    """A hang told by the log's own clock: the step counter advanced, then stopped, while stamped
    lines (heartbeats, warnings) kept coming for STALL_MINUTES and ten usual step intervals."""
    from crashcart.tools.render import job_log_stamp

    stamp_of = job_log_stamp(datetime.now(timezone.utc))
    steps: list[tuple[datetime, int, str]] = []
    last: tuple[datetime, str] | None = None
    for line in lines:
        t = stamp_of(line)
        if t is None:
            continue
        last = (t, line.strip())
        if m := _STEP.search(line):
            steps.append((t, int(m.group(1)), line.strip()))
    values = [s[1] for s in steps]
    if last is None or len(set(values)) < 3 or values != sorted(values):
        return None
    final = values[-1]
    advanced_at = next(s for s in steps if s[1] == final)
    changes = [b[0] - a[0] for a, b in zip(steps, steps[1:]) if b[1] != a[1]]
    usual = median(changes).total_seconds() / 60
    quiet = (last[0] - advanced_at[0]).total_seconds() / 60
    after = sum(1 for line in lines if (t := stamp_of(line)) is not None and t > advanced_at[0])
    if quiet < max(STALL_MINUTES, 10 * usual) or after < 2:
        return None
    return quiet, [advanced_at[2][:300], last[1][:300]]


# What a run that is going fine prints: a step or epoch counter, throughput, a checkpoint
# written, the trainer saying it finished, NCCL's communicators up, a status report (nvidia-smi
# -q) whose fields say "Not Active". "Healthy" rests on these, never on silence.
_HEALTHY_SIGN = re.compile(
    r"\b(?:step|iter(?:ation)?|epoch)\b\s*[=:\[]?\s*\d+|\d+(?:\.\d+)?\s*(?:samples|examples|tokens|images|it)"
    r"\s*(?:/|per\s*)s(?:ec(?:ond)?)?\b|saved? (?:the )?(?:model )?checkpoint|checkpoint (?:saved|written)|"
    r"saving (?:model )?checkpoint|training (?:finished|completed|complete|done)|train_runtime|"
    r"completed successfully|finished training|init complete|:\s*not active\b",
    re.I,
)


# A component saying in its own words that it stalled or waits on a hang (a watchdog's or stall
# inspector's warning): never "healthy", however many steps came before it.
_STALL_WORDS = re.compile(r"\b(deadlock(ed)?|stall(ed|s)?|hang(s|ing)?|hung|not making progress|no progress)\b", re.I)


_PYTHON_ERROR = re.compile(r"^(?:\[rank\d+\]:\s*)?Traceback \(most recent call last\)|^(?:\[rank\d+\]:\s*)?[\w.]*(?:Error|Exception): ")


def _shows_progress(lines: list[str]) -> bool:
    return sum(1 for line in lines if _HEALTHY_SIGN.search(line)) >= 2


def diagnose_lines(lines: list[str], source: str | None = None, kb: KnowledgeBase | None = None) -> Verdict:
    return diagnose_text("\n".join(lines), source=source, kb=kb, lines=lines)


def diagnose_text(text: str, source: str | None = None, kb: KnowledgeBase | None = None,
                  lines: list[str] | None = None) -> Verdict:
    kb = kb or load_playbooks()
    lines = lines if lines is not None else text.splitlines()
    ev = Evidence(now=None, trigger={"kind": "chat"})
    ev.docs = [TextDoc(kind, "job:log", lines, "log") for kind in TEXT_KINDS]
    matches = [m for entry in kb if (m := match_label(entry, ev))]
    matches.sort(key=lambda m: (-m.entry.label.priority, -m.score, m.name))
    if not matches and (stall := _stalled_in_log(lines)):
        minutes, evidence = stall
        return Verdict(
            family="stuck", diagnosis="progress_stalled_in_log", remedy="resubmit", retriable=True,
            confidence=0.5, evidence=evidence,
            summary=f"The step counter stopped advancing {minutes:.0f} min before the log's last line while "
            "the process kept printing: a stall, not a finished run. Restart from the last checkpoint; "
            "a second stall at the same step points at the code or data.",
            source=source,
        )
    if not matches and (apart := ranks_out_of_step(lines)):
        last, evidence = apart
        where = ", ".join(f"rank {r} at {n}" for r, n in sorted(last.items()))
        return Verdict(
            family="stuck", diagnosis="ranks_out_of_step", remedy="escalate_user", retriable=False,
            confidence=0.45, evidence=evidence,
            summary=f"The log stops with the ranks apart ({where}) and no error or end of training: the "
            "ranks ahead wait in a collective for one doing other work (an uneven data shard, a "
            "rank-dependent branch). A restart hangs the same way; the owner evens out the work per rank.",
            source=source,
        )
    if not matches:
        suspicious = [l.strip()[:300] for l in lines if SUSPICIOUS.search(l) or _STALL_WORDS.search(l)]
        if not suspicious and _shows_progress(lines):
            return Verdict(
                family="none", diagnosis="healthy", remedy="none", retriable=False, confidence=0.3,
                summary="The run was making progress and nothing in this log looks like a failure.",
                source=source,
            )
        # Could not tell: a person reads the lines. Silence is not health (a pasted sacct row,
        # a config dump, garbage). A Python exception no playbook knows is most likely the
        # job's own code; anything else unknown is only unknown.
        python_error = any(_PYTHON_ERROR.search(line) for line in suspicious)
        return Verdict(
            family="user_code" if python_error else "unknown", diagnosis="unrecognized", remedy="escalate_user" if suspicious else "none",
            retriable=False, confidence=0.2 if suspicious else 0.1,
            evidence=list(dict.fromkeys(suspicious))[-10:],
            summary="No playbook recognises this log; these lines look suspicious."
            if suspicious else "Could not tell: this text shows neither a known failure nor a run making progress.",
            source=source,
        )
    best = matches[0]
    label = best.entry.label
    remedy = label.remedy.kind
    captures = captured_values(best)
    changes = _described_changes(label.remedy.changes, captures)
    rules = label.remedy.changes.values()
    if remedy == "resubmit_with_changes" and not changes and rules and all(r.compute in FROM_OTHER_RUNS for r in rules):
        # Every change comes from the cluster's record of other runs; a log alone has none, and
        # a resubmit without the change would fail the same way: the owner decides.
        remedy = f"escalate_{fallback_team(label.team)}"
    # A symptom alone (an NCCL timeout) says little about its cause: say so in the confidence.
    confidence = 0.45 if label.symptom else min(0.95, 0.6 + 0.15 * best.matched_signals)
    return Verdict(
        family=best.entry.family, diagnosis=best.name, remedy=remedy, retriable=label.retriable,
        changes=changes, confidence=round(confidence, 2),
        evidence=list(dict.fromkeys(h.line for h in best.hits))[:10],
        summary=label.title + (f". {label.remedy.advice}" if label.remedy.advice else ""),
        source=source,
    )
