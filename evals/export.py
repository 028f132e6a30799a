"""`crashcart export`: a recorded incident as a scenario file `crashcart eval` accepts.

The cluster is what the tools observed (nothing more: a node nobody looked at is not in it),
and the `expect` block is what the agent concluded and did, for a person to confirm or
correct before the scenario joins the suite.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from crashcart.tools.cluster import Cluster
from crashcart.tools.tape import Tape

BOUNDING_NOTE = re.compile(r"^\[crashcart: [^\]]*\]$")
TAKEN = {"allow", "dry_run", "needs_approval"}
KEEP_ARGS = ("job", "node", "team")


def _text(output: dict[str, Any]) -> str:
    lines = (output.get("text") or "").splitlines()
    return "\n".join(l for l in lines if not BOUNDING_NOTE.match(l.strip())) + ("\n" if lines else "")


def _taint(text: str) -> dict[str, Any]:
    key_value, _, effect = text.rpartition(":")
    key, _, value = key_value.partition("=")
    return {"key": key, "value": value or None, "effect": effect}


def cluster_from_tape(tape: Tape) -> dict[str, Any]:
    clocks = [e.at for e in tape.entries if e.kind == "clock" and e.at]
    jobs: dict[str, dict[str, Any]] = {}
    nodes: dict[str, dict[str, Any]] = {}
    events: list[dict[str, Any]] = []

    def job(job_id: str) -> dict[str, Any]:
        return jobs.setdefault(job_id, {"id": job_id, "state": "UNKNOWN"})

    def node(name: str) -> dict[str, Any]:
        return nodes.setdefault(name, {"name": name})

    def merge_row(row: dict[str, Any], parent: str | None) -> None:
        fields = {k: row.get(k) for k in ("name", "user", "partition", "state", "reason", "exit_code", "nodes",
                                           "gpus", "submit_time", "start_time", "end_time", "depends_on")
                  if row.get(k) not in (None, "", [], 0)}
        if row.get("attempt") and parent:
            attempts = job(parent).setdefault("attempts", [])
            if not any(a["id"] == row["job"] for a in attempts):
                attempts.append({"id": row["job"], "state": row.get("state") or "UNKNOWN", **fields})
            return
        job(row["job"]).update(fields)

    for e in tape.calls():
        out, args = e.output or {}, e.args
        if e.error is not None:
            continue
        for row in out.get("rows") or []:
            if "job" in row:
                merge_row(row, args.get("job"))
            elif "node" in row:
                n = node(row["node"])
                n.update({k: row[k] for k in ("partition", "state", "gpus", "gpu_model", "reason", "labels") if row.get(k)})
                if row.get("taints"):
                    n["taints"] = [_taint(t) for t in row["taints"]]
        for key in ("job", "row"):
            if isinstance(out.get(key), dict) and "state" in out[key]:
                merge_row(out[key], None)
        if e.tool == "get_logs" and not args.get("attempt"):
            job(args["job"])["log"] = _text(out)
        elif e.tool == "job_config":
            job(args["job"])["config"] = out.get("config") or {}
        elif e.tool == "training_progress":
            job(args["job"]).update(progress=out.get("points") or [], checkpoints=out.get("checkpoints") or [])
        elif e.tool == "kernel_log":
            node(args["node"])["kernel_log"] = _text(out)
        elif e.tool in {"nvidia_smi_query", "gpu_metrics"}:
            samples = node(args["node"]).setdefault("gpu_telemetry", [])
            samples += [g for g in out.get("gpus") or [] if g not in samples]
        elif e.tool == "kubectl_events":
            events += [ev for ev in out.get("events") or [] if ev not in events]
    for j in jobs.values():
        for name in j.get("nodes") or []:
            node(name)
    for n in nodes.values():
        # Tools print the command's word for a state; the scenario schema wants the cluster's.
        state = str(n.get("state", "idle")).lower().rstrip("*~#")
        n["state"] = {"alloc": "allocated", "mix": "mixed", "drain": "drained", "drng": "draining",
                      "notready": "not_ready"}.get(state, state if state in _NODE_STATES else "idle")
    data = {"now": clocks[0] if clocks else None, "nodes": list(nodes.values()),
            "jobs": list(jobs.values()), "events": events}
    Cluster.model_validate(data)  # what we write must load
    return data


_NODE_STATES = {"idle", "allocated", "mixed", "down", "drained", "draining", "not_ready", "cordoned"}


def _expected_action(a: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"tool": a["tool"], "args": {k: a["args"][k] for k in KEEP_ARGS if k in a["args"]}}
    if a["args"].get("changes"):
        out["changes"] = a["args"]["changes"]
    if a["args"].get("exclude_nodes"):
        out["exclude_nodes"] = a["args"]["exclude_nodes"]
    return out


def scenario_from_incident(incident_id: str, tape: Tape, diagnosis: dict[str, Any],
                           decisions: list[tuple[str, dict[str, Any], str]], title: str | None = None) -> str:
    trigger = {k: v for k, v in (tape.meta.get("trigger") or {}).items() if v is not None}
    actions = [_expected_action({"tool": t, "args": a}) for t, a, d in decisions if d in TAKEN]
    scenario = {
        "id": f"exported-{incident_id}",
        "title": title or f"{diagnosis.get('label', 'incident')} (exported from {incident_id})",
        "family": diagnosis.get("family") or "none",
        "backend": tape.backend,
        "description": (f"Exported from live incident {incident_id}. The cluster is what the tools observed; "
                        "the expectation is what the agent concluded and did: confirm it before adding this "
                        "scenario to the suite."),
        "tags": ["exported"],
        "trigger": trigger,
        "cluster": cluster_from_tape(tape),
        "expect": {
            "family": diagnosis.get("family"),
            "diagnosis": [diagnosis["label"]] if diagnosis.get("label") else None,
            "root_cause": diagnosis.get("root_cause"),
            "remedy": diagnosis.get("remedy") or "none",
            "actions": actions,
        },
    }
    return yaml.dump(scenario, Dumper=_BlockDumper, sort_keys=False, allow_unicode=True, width=120)


class _BlockDumper(yaml.SafeDumper):
    """Logs as `|` blocks, the way people write scenarios by hand."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    if "\n" in value and all(line == line.rstrip() for line in value.splitlines()):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_BlockDumper.add_representer(str, _str)
