"""Kueue waits that will not end by themselves, read from the Workload and its ClusterQueue.

Waiting under Kueue is normal: a Workload stays QuotaReserved=False until quota frees up. Two
waits are not normal, and each is decided from the objects' numbers, not from Kueue's message
alone (older and newer Kueue word it differently):

- the request exceeds the most the ClusterQueue could ever give it in every flavor that covers
  the resource: its nominal quota plus what it may borrow from its cohort (the borrowingLimit,
  or, without one, what the cohort's other ClusterQueues can lend: their lendingLimit, else
  their nominal quota). Kueue's flavor assigner calls that "maximum capacity" and says
  "request > maximum capacity"; the workload can never be admitted as sized.
- the workload has waited past the pending threshold and what its own ClusterQueue's admitted
  workloads hold leaves less of the nominal quota than it needs (with nothing left to borrow,
  or Kueue would have admitted it): it waits on its own team's work, which no amount of waiting
  on the cluster shortens; a capacity question for the people who own the queue.

Anything else (inside the threshold, quota held by other queues of the cohort that Kueue may
reclaim, a queue with free quota) is ordinary waiting and no incident.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from crashcart.tools.backends.kubernetes import _parse as parse
from crashcart.tools.backends.kubernetes._kueue import workload_state

NEVER_FITS = "KueueRequestExceedsQuota"
HELD_BY_QUEUE = "KueueQuotaHeldByQueue"


@dataclass
class Stuck:
    reason: str
    """NEVER_FITS or HELD_BY_QUEUE: the watch's pending reason (stable across polls)."""
    cluster_queue: str
    lines: list[str]
    """What binds, with the numbers, as crashcart annotates a describe."""


@dataclass
class Capacity:
    nominal: float
    borrowable: float
    borrowing_limit: float | None

    @property
    def maximum(self) -> float:
        return self.nominal + self.borrowable


def amount(resource: str, value: float) -> str:
    if resource == "memory" or resource.endswith("storage"):
        return f"{value / 2**30:g}Gi"
    return f"{value:g}"


def requests(wl: dict[str, Any]) -> dict[str, float]:
    """What the whole workload asks for, per resource: status.resourceRequests (Kueue's own total
    per pod set), else the pod sets' templates times their counts."""
    total: dict[str, float] = {}
    for ps in (wl.get("status") or {}).get("resourceRequests") or []:
        for r, q in (ps.get("resources") or {}).items():
            total[r] = total.get(r, 0.0) + (parse.quantity(q) or 0.0)
    if total:
        return total
    for ps in (wl.get("spec") or {}).get("podSets") or []:
        count = ps.get("count", 1)
        for c in ((ps.get("template") or {}).get("spec") or {}).get("containers") or []:
            res = c.get("resources") or {}
            for r, q in {**(res.get("limits") or {}), **(res.get("requests") or {})}.items():
                total[r] = total.get(r, 0.0) + count * (parse.quantity(q) or 0.0)
    return total


def _quota(cq: dict[str, Any], flavor: str, resource: str) -> dict[str, Any] | None:
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for f in group.get("flavors") or []:
            if f.get("name") == flavor:
                return next((r for r in f.get("resources") or [] if r.get("name") == resource), None)
    return None


def flavors_for(cq: dict[str, Any], resource: str) -> list[str]:
    """The flavors, in the ClusterQueue's order, of the resource group covering `resource`."""
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        if resource in (group.get("coveredResources") or []):
            return [f.get("name") for f in group.get("flavors") or []]
    return []


def capacity(cq: dict[str, Any], cohort: list[dict[str, Any]], flavor: str, resource: str) -> Capacity:
    own = _quota(cq, flavor, resource) or {}
    nominal = parse.quantity(own.get("nominalQuota")) or 0.0
    limit = parse.quantity(own.get("borrowingLimit")) if own.get("borrowingLimit") is not None else None
    cohort_name = (cq.get("spec") or {}).get("cohort")
    lendable = 0.0
    if cohort_name:
        for other in cohort:
            if parse.meta(other).get("name") == parse.meta(cq).get("name") or (other.get("spec") or {}).get("cohort") != cohort_name:
                continue
            theirs = _quota(other, flavor, resource) or {}
            lend = theirs.get("lendingLimit", theirs.get("nominalQuota"))
            lendable += parse.quantity(lend) or 0.0
    borrowable = lendable if limit is None else min(limit, lendable)
    return Capacity(nominal, borrowable, limit)


def reserved(cq: dict[str, Any], flavor: str, resource: str) -> float:
    for f in (cq.get("status") or {}).get("flavorsReservation") or []:
        if f.get("name") == flavor:
            for r in f.get("resources") or []:
                if r.get("name") == resource:
                    return parse.quantity(r.get("total")) or 0.0
    return 0.0


def held_by_queue(workloads: list[dict[str, Any]], cq_name: str, flavor: str, resource: str) -> list[tuple[str, float]]:
    """(namespace/name, amount) of each workload of `cq_name` holding `resource` in `flavor`."""
    out = []
    for w in workloads:
        admission = (w.get("status") or {}).get("admission") or {}
        if admission.get("clusterQueue") != cq_name or workload_state(w)[0] == "Finished":
            continue
        held = sum(parse.quantity((ps.get("resourceUsage") or {}).get(resource)) or 0.0
                   for ps in admission.get("podSetAssignments") or [] if (ps.get("flavors") or {}).get(resource) == flavor)
        if held:
            m = parse.meta(w)
            out.append((f"{m.get('namespace')}/{m['name']}", held))
    return out


def _borrow_text(resource: str, cap: Capacity) -> str:
    if cap.borrowing_limit is None:
        return f"{amount(resource, cap.borrowable)} its cohort can lend"
    return f"borrowing limit {amount(resource, cap.borrowing_limit)}" + (
        f" ({amount(resource, cap.borrowable)} lendable in its cohort)" if cap.borrowable < cap.borrowing_limit else "")


def stuck(wl: dict[str, Any], cq: dict[str, Any], cqs: list[dict[str, Any]], workloads: list[dict[str, Any]],
          now: datetime, pending_after: timedelta) -> Stuck | None:
    """Why `wl`, pending in ClusterQueue `cq`, will not be admitted by waiting; None when it may."""
    state, _, _ = workload_state(wl)
    if state != "Pending":
        return None
    m = parse.meta(wl)
    who = f"Workload {m.get('namespace')}/{m['name']}"
    cq_name = parse.meta(cq)["name"]
    asked = {r: v for r, v in requests(wl).items() if v > 0}
    for r, want in sorted(asked.items()):
        flavors = flavors_for(cq, r)
        caps = {f: capacity(cq, cqs, f, r) for f in flavors}
        if caps and all(c.maximum < want for c in caps.values()):
            each = "; ".join(f"flavor {f}: nominal quota {amount(r, c.nominal)} + {_borrow_text(r, c)} = at most "
                             f"{amount(r, c.maximum)}" for f, c in caps.items())
            return Stuck(NEVER_FITS, cq_name, [
                f"ClusterQueue {cq_name} can never admit {who}: it asks for {amount(r, want)} {r}, more than the queue "
                f"can ever hold ({each})"])
    created = parse.when(m.get("creationTimestamp")) or now
    waited = now - created
    if waited < pending_after:
        return None
    for r, want in sorted(asked.items()):
        blocked = []
        for f in flavors_for(cq, r):
            cap = capacity(cq, cqs, f, r)
            if want > cap.maximum:
                continue  # this flavor can never serve it; another can
            holders = held_by_queue(workloads, cq_name, f, r)
            if cap.nominal - sum(v for _, v in holders) >= want:
                break  # its own queue leaves room: what it waits on is elsewhere (Kueue reclaims lent quota)
            blocked.append((f, cap, holders))
        else:
            if not blocked:
                continue
            lines = [f"ClusterQueue {cq_name}: {who} has waited {waited.total_seconds() / 60:.0f} min (pending "
                     f"threshold {pending_after.total_seconds() / 60:g} min) for {amount(r, want)} {r}, and the quota "
                     f"it needs is held by workloads of the same queue"]
            for f, cap, holders in blocked:
                held = sum(v for _, v in holders)
                names = ", ".join(f"{n} ({amount(r, v)})" for n, v in holders[:6]) + (
                    f", ... ({len(holders)} in all)" if len(holders) > 6 else "")
                lines.append(f"flavor {f}: nominal quota {amount(r, cap.nominal)} {r}, {amount(r, held)} held by "
                             f"{len(holders)} admitted workload(s) of ClusterQueue {cq_name}: "
                             f"{amount(r, max(cap.nominal - held, 0))} left of the {amount(r, want)} it needs "
                             f"(at most {amount(r, cap.maximum)} with {_borrow_text(r, cap)}; "
                             f"{amount(r, reserved(cq, f, r))} reserved now) [{names}]")
            return Stuck(HELD_BY_QUEUE, cq_name, lines)
    return None
