"""Values a fix computes from what the tools returned (a playbook change's `compute:`).

Each returns the value in its setting's canonical unit (bytes for memory), or None when the
evidence does not hold it: a remedy never guesses, it escalates with what it saw.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from crashcart.agent.policies.config_keys import load_key_table, parse_size
from crashcart.agent.policies.evidence import Evidence

# A trainer's own report of a save that finished (HF Trainer, Lightning, Megatron, DeepSpeed):
# "Saving ..." only says one began, so it is not proof of a whole checkpoint.
_SAVED = re.compile(
    r"(?:\bsaved\b|successfully saved|checkpoint saved|finished saving|save(?:d)? complete)[^\n]*?"
    r"(?P<path>/[^\s'\",]+)",
    re.I,
)
_BROKEN = re.compile(r"(corrupt|truncat|incomplete|unexpected EOF|invalid load key|failed finding central directory|"
                     r"error|cannot|could not|unable)", re.I)


def gpus_per_node(ev: Evidence, job: str, captures: dict[str, str], margin: float | None) -> Any:
    """The GPUs the scheduler really gave each node: one process per GPU."""
    facts = ev.jobs.get(job)
    if not facts or not facts.gpus or not facts.nodes:
        return None
    per, rest = divmod(facts.gpus, len(facts.nodes))
    return per if per and not rest else None


def above_peak(ev: Evidence, job: str, captures: dict[str, str], margin: float | None) -> Any:
    """The peak memory the evidence reports (a named group `peak`: "33554432kB", "61.2 GiB"),
    with headroom."""
    peak = parse_size(captures.get("peak", "").replace(" ", "")) if captures.get("peak") else None
    return peak * (margin or 1.25) if peak else None


def half_precision(ev: Evidence, job: str, captures: dict[str, str], margin: float | None) -> Any:
    """bf16 where every GPU of the job supports it (fp32's range, no loss scaling), else fp16."""
    facts = ev.jobs.get(job)
    models = [ev.nodes.get(n, {}).get("gpu_model") for n in (facts.nodes if facts else [])]
    models = [m for m in models if m]
    table = load_key_table()
    # fp16 runs on every GPU with tensor cores: the safe answer while the model is unknown.
    return "bf16" if models and all(table.supports_bf16(m) for m in models) else "fp16"


def newest_complete_checkpoint(ev: Evidence, job: str, captures: dict[str, str], margin: float | None) -> Any:
    """The newest checkpoint known to be whole: the one before the latest (which the failure
    points at) from the progress record, or, without one, the last save an earlier attempt's
    log reported finished."""
    _, checkpoints = ev.progress.get(job, ([], []))
    ordered = sorted(checkpoints, key=lambda c: c.step)
    if len(ordered) >= 2 and ordered[-2].path:
        return ordered[-2].path
    logs = [d for d in ev.docs if d.source == "log" and d.entity == f"job:{job}"]
    broken = {m.group("path") for d in logs for line in d.lines if _BROKEN.search(line)
              for m in re.finditer(r"(?P<path>/[^\s'\",]+)", line)}
    saved = [m.group("path").rstrip(".:") for d in logs for line in d.lines if not _BROKEN.search(line)
             for m in _SAVED.finditer(line)]
    whole = [p for p in saved if not any(p == b.rstrip(".:") or b.startswith(p + "/") for b in broken)]
    return whole[-1] if whole else None


COMPUTE: dict[str, Callable[[Evidence, str, dict[str, str], float | None], Any]] = {
    "gpus_per_node": gpus_per_node,
    "above_peak": above_peak,
    "half_precision": half_precision,
    "newest_complete_checkpoint": newest_complete_checkpoint,
}
