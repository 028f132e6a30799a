"""Kueue's side of a workload: why it waits, where it was admitted, how full its queue is.

Kueue keeps a Workload object per job it manages (named after the job, owned by it) whose
conditions say what happened: QuotaReserved=False with the flavor assigner's message while it
waits ("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in
flavor h100, 8 more needed"), Admitted once it may run, Evicted (preempted, PodsReady timeout)
and Finished. A ClusterQueue holds the quota (spec.resourceGroups) and how much of it is
reserved and in use (status.flavorsReservation, status.flavorsUsage). These summaries are
read from those objects as the API returns them; nothing is inferred that they do not say.
"""

from __future__ import annotations

from typing import Any

from crashcart.tools.backends.kubernetes import _parse as parse
from crashcart.tools.render._formats import table

_CONDITION_ORDER = ("Finished", "Evicted", "Admitted", "QuotaReserved")


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}


def workload_state(wl: dict[str, Any]) -> tuple[str, str | None, str]:
    """(state, reason, message): Finished, Evicted, Admitted, QuotaReserved (quota held, admission
    checks pending), Inactive (spec.active false) or Pending, in Kueue's own words."""
    conds = _conditions(wl)
    for kind in _CONDITION_ORDER:
        c = conds.get(kind) or {}
        if c.get("status") == "True":
            return kind, c.get("reason"), c.get("message") or ""
    if (wl.get("spec") or {}).get("active") is False:
        return "Inactive", "Deactivated", "spec.active is false: the workload was deactivated and will not be admitted"
    reserved = conds.get("QuotaReserved")
    if reserved:
        return "Pending", reserved.get("reason") or "Pending", reserved.get("message") or ""
    return "Pending", None, "Kueue has not tried to admit it yet (no QuotaReserved condition)"


def workload_summary(wl: dict[str, Any]) -> list[str]:
    m, spec, st = parse.meta(wl), wl.get("spec") or {}, wl.get("status") or {}
    state, reason, message = workload_state(wl)
    owner = parse.owner(wl)
    of = f" for {owner.get('kind')} {owner.get('name')}" if owner else ""
    lines = [f"[crashcart: Kueue Workload {m.get('namespace')}/{m.get('name')}{of} in LocalQueue "
             f"{spec.get('queueName') or '<none>'}: {state}" + (f" ({reason})" if reason else "")
             + (f": {message}" if message else "") + "]"]
    admission = st.get("admission") or {}
    for ps in admission.get("podSetAssignments") or []:
        flavors = ", ".join(f"{r}={f}" for r, f in sorted((ps.get("flavors") or {}).items()))
        usage = ", ".join(f"{r}: {q}" for r, q in sorted((ps.get("resourceUsage") or {}).items()))
        lines.append(f"[crashcart: quota in ClusterQueue {admission.get('clusterQueue')}: pod set {ps.get('name')} "
                     f"x{ps.get('count', '?')} on flavors {flavors or '<none>'}; uses {usage or '<nothing recorded>'}]")
    if requeue := st.get("requeueState"):
        lines.append(f"[crashcart: requeued {requeue.get('count', 0)} time(s)"
                     + (f", next attempt at {requeue['requeueAt']}" if requeue.get("requeueAt") else "") + "]")
    return lines


def _quota_rows(cq: dict[str, Any]) -> list[tuple[str, ...]]:
    st = cq.get("status") or {}

    def totals(key: str) -> dict[tuple[str, str], dict[str, Any]]:
        return {(f.get("name"), r.get("name")): r for f in st.get(key) or [] for r in f.get("resources") or []}

    reserved, used = totals("flavorsReservation"), totals("flavorsUsage")
    rows = []
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for r in flavor.get("resources") or []:
                key = (flavor.get("name"), r.get("name"))
                rows.append((key[0], key[1], str(r.get("nominalQuota", "0")), str(r.get("borrowingLimit", "-")),
                             str((reserved.get(key) or {}).get("total", "0")), str((used.get(key) or {}).get("total", "0")),
                             str((used.get(key) or reserved.get(key) or {}).get("borrowed", "0"))))
    return rows


def clusterqueue_summary(cq: dict[str, Any]) -> list[str]:
    m, spec, st = parse.meta(cq), cq.get("spec") or {}, cq.get("status") or {}
    active = _conditions(cq).get("Active") or {}
    head = (f"[crashcart: ClusterQueue {m.get('name')}"
            + (f" (cohort {spec['cohort']})" if spec.get("cohort") else "")
            + f": {st.get('pendingWorkloads', 0)} pending, {st.get('reservingWorkloads', 0)} reserving quota, "
              f"{st.get('admittedWorkloads', 0)} admitted workload(s)"
            + ("" if active.get("status", "True") == "True" else
               f"; NOT active ({active.get('reason')}: {active.get('message')})") + "]")
    rows = _quota_rows(cq)
    if not rows:
        return [head]
    return [head, *table(["FLAVOR", "RESOURCE", "NOMINAL", "BORROWING LIMIT", "RESERVED", "IN USE", "BORROWED"], rows), ""]


def workload_of(workloads: list[dict[str, Any]], owner: dict[str, Any]) -> dict[str, Any] | None:
    """The Kueue Workload a job (or a training operator's object) is queued through."""
    uid = parse.meta(owner).get("uid")
    return next((w for w in workloads if any(r.get("uid") == uid for r in parse.meta(w).get("ownerReferences") or [])), None)
