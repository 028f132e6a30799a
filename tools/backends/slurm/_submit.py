"""A job's submit line, read back and written again: sbatch options, the script and its arguments.

Slurm records the command line a job was submitted with (sacct's SubmitLine) with
its words joined by spaces, so quoting is lost. Options are read knowing which
sbatch options take a value; a value with spaces is recovered where Slurm also
keeps it whole (the job name, the comment).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

# sbatch's short options that take a value, by their long name.
_SHORT = {
    "A": "account", "a": "array", "b": "begin", "c": "cpus-per-task", "D": "chdir", "d": "dependency",
    "e": "error", "F": "nodefile", "G": "gpus", "i": "input", "J": "job-name", "L": "licenses",
    "M": "clusters", "m": "distribution", "n": "ntasks", "N": "nodes", "o": "output", "p": "partition",
    "q": "qos", "S": "core-spec", "t": "time", "w": "nodelist", "x": "exclude", "C": "constraint",
}
_SHORT_FLAGS = {"H": "hold", "k": "no-kill", "O": "overcommit", "Q": "quiet", "s": "oversubscribe",
                "v": "verbose", "W": "wait", "I": "immediate", "h": "help", "V": "version"}
# Long options that need a value (so `--opt value` consumes the next word).
_NEEDS_VALUE = set(_SHORT.values()) | {
    "acctg-freq", "batch", "bb", "bbf", "burst-buffer", "cluster-constraint", "comment", "container",
    "cores-per-socket", "cpu-freq", "cpus-per-gpu", "deadline", "delay-boot", "export", "export-file",
    "extra-node-info", "gid", "gpu-bind", "gpu-freq", "gpus-per-node", "gpus-per-socket", "gpus-per-task",
    "gres", "gres-flags", "hint", "kill-on-invalid-dep", "mail-type", "mail-user", "mcs-label", "mem",
    "mem-bind", "mem-per-cpu", "mem-per-gpu", "mincpus", "network", "ntasks-per-core", "ntasks-per-gpu",
    "ntasks-per-node", "ntasks-per-socket", "open-mode", "power", "prefer", "priority", "profile",
    "reservation", "signal", "sockets-per-node", "switches", "thread-spec", "threads-per-core",
    "time-min", "tmp", "uid", "wait-all-nodes", "wckey", "wrap",
}


@dataclass
class SubmitLine:
    options: list[tuple[str, str | None]] = field(default_factory=list)
    """sbatch options by long name, in order: (name, value) or (name, None) for a flag."""
    script: str | None = None
    args: list[str] = field(default_factory=list)

    def get(self, name: str) -> str | None:
        values = [v for k, v in self.options if k == name]
        return values[-1] if values else None

    def without(self, *names: str) -> list[tuple[str, str | None]]:
        return [(k, v) for k, v in self.options if k not in names]


def parse_submit_line(line: str, whole: dict[str, str] | None = None) -> SubmitLine:
    """`sbatch -J my job -o %j.out train.sh --lr 0.1` as options, script and arguments.

    `whole` maps an option to its true value when Slurm keeps it elsewhere (JobName,
    Comment), so a value that spans several words is read back whole."""
    words = line.split()
    if words and words[0].rsplit("/", 1)[-1] == "sbatch":
        words = words[1:]
    whole = whole or {}
    out = SubmitLine()
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--":
            i += 1
            break
        if w.startswith("--") and len(w) > 2:
            name, eq, value = w[2:].partition("=")
            if eq:
                i, value = _value([value, *words[i + 1:]], 0, whole.get(name), offset=i + 1)
                out.options.append((name, value))
                continue
            if name in _NEEDS_VALUE and i + 1 < len(words):
                i, value = _value(words, i + 1, whole.get(name))
                out.options.append((name, value))
                continue
            out.options.append((name, None))
        elif w.startswith("-") and len(w) > 1:
            letter = w[1]
            if letter in _SHORT:
                name = _SHORT[letter]
                if len(w) > 2:
                    i, value = _value([w[2:].lstrip("="), *words[i + 1:]], 0, whole.get(name), offset=i + 1)
                    out.options.append((name, value))
                    continue
                elif i + 1 < len(words):
                    i, value = _value(words, i + 1, whole.get(name))
                    out.options.append((name, value))
                    continue
            else:
                out.options.append((_SHORT_FLAGS.get(letter, letter), None))
        else:
            break
        i += 1
    if i < len(words) and out.get("wrap") is None:
        out.script, out.args = words[i], words[i + 1:]
    return out


def _value(words: list[str], i: int, known: str | None, offset: int = 0) -> tuple[int, str]:
    """The value starting at words[i], and the index after it (plus `offset`); several
    words when the known whole value says so."""
    value = words[i]
    j = i + 1
    if known and known != value and known.startswith(value + " "):
        while j < len(words) and len(value) < len(known):
            value = f"{value} {words[j]}"
            j += 1
        if value != known:
            value, j = words[i], i + 1
    return j + offset - (1 if offset else 0), value


def render_options(options: list[tuple[str, str | None]]) -> list[str]:
    return [f"--{k}" if v is None else f"--{k}={v}" for k, v in options]


# --- the script's own arguments: --key=value -------------------------------------------------


def scalar(text: str) -> Any:
    """`8` -> 8, `true` -> True, `0.5` -> 0.5, anything else stays text."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, (int, float, bool)) or value is None else text


def args_config(args: list[str]) -> dict[str, Any]:
    """`--batch_size=8 --lr 0.1 --fp16` as {batch_size: 8, lr: 0.1, fp16: True}; dotted keys nest."""
    config: dict[str, Any] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and len(a) > 2:
            key, eq, value = a[2:].partition("=")
            if eq:
                _set(config, key, scalar(value))
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                _set(config, key, scalar(args[i + 1]))
                i += 1
            else:
                _set(config, key, True)
        i += 1
    return config


def _set(config: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    here = config
    for p in parents:
        child = here.setdefault(p, {})
        if not isinstance(child, dict):
            return
        here = child
    here[leaf] = value


def arg_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def set_args(args: list[str], changes: dict[str, Any]) -> list[str]:
    """The script's arguments with each key set: replaced where present, appended otherwise."""
    out = list(args)
    for key, value in changes.items():
        text = arg_text(value)
        for i, a in enumerate(out):
            if a == f"--{key}" and i + 1 < len(out) and not out[i + 1].startswith("--"):
                out[i + 1] = text
                break
            if a == f"--{key}" or a.startswith(f"--{key}="):
                out[i] = f"--{key}={text}"
                break
        else:
            out.append(f"--{key}={text}")
    return out


# --- --export -------------------------------------------------------------------------------

_PLAIN = re.compile(r"^[^,\s'\"=]*$")


def export_option(original: str | None, env: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The --export value for a resubmit, and variables sbatch must carry in its own environment.

    Slurm 22.05 cannot quote a comma inside --export (`A="x,y"` keeps the quotes), so a value
    that is not plain is passed by name (`--export=ALL,A`) with A set in sbatch's environment."""
    entries = [e for e in (original or "ALL").split(",") if e]
    head = [e for e in entries if e.upper() in {"ALL", "NONE", "NIL"}] or (["ALL"] if not entries else [])
    rest = [e for e in entries if e.upper() not in {"ALL", "NONE", "NIL"}]
    carried: dict[str, str] = {}
    for key, value in env.items():
        text = arg_text(value)
        rest = [e for e in rest if e.split("=", 1)[0] != key]
        if _PLAIN.match(text):
            rest.append(f"{key}={text}")
        else:
            rest.append(key)
            carried[key] = text
    return ",".join(head + rest), carried


def export_env(value: str | None) -> dict[str, Any]:
    """Variables a --export value sets explicitly (name=value entries)."""
    out: dict[str, Any] = {}
    for e in (value or "").split(","):
        key, eq, val = e.partition("=")
        if eq and key:
            out[key] = scalar(val)
    return out


# --- output patterns --------------------------------------------------------------------------


def expand_pattern(pattern: str, job: str, name: str | None, user: str | None, node: str | None) -> str:
    """sbatch's filename patterns: %j %A (job id), %x (name), %u (user), %N (first node), %%."""
    subs = {"j": job, "A": job, "a": "4294967294", "x": name or "", "u": user or "", "N": node or "",
            "n": "0", "t": "0", "s": "batch", "%": "%"}
    return re.sub(r"%(\d*)([jAaxuNnts%])",
                  lambda m: subs[m[2]].zfill(int(m[1])) if m[1] else subs[m[2]], pattern)
