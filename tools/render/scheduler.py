"""The scheduler's limits as its own commands print them: `sacctmgr show qos/assoc -P`,
`sshare -a -P`, Kueue ClusterQueues (`kubectl get clusterqueues` and their status) and
`ray status`."""

from __future__ import annotations

from datetime import datetime

from crashcart.tools.cluster import Association, Autoscaler, ClusterQueue, FairShareRow, JobPriority, Qos
from crashcart.tools.render._formats import table

SACCTMGR_QOS_FIELDS = ("Name", "Priority", "GrpTRES", "MaxTRESPU", "MaxWall")
SACCTMGR_ASSOC_FIELDS = ("Cluster", "Account", "User", "Partition", "Share", "GrpTRES", "QOS")
SPRIO_FORMAT = "%i|%r|%u|%Y|%A|%F|%J|%P|%Q"
SPRIO_FIELDS = ("JOBID", "PARTITION", "USER", "PRIORITY", "AGE", "FAIRSHARE", "JOBSIZE", "PARTITION", "QOS")
SSHARE_FIELDS = ("Account", "User", "RawShares", "NormShares", "RawUsage", "EffectvUsage", "FairShare")


def sacctmgr_qos_lines(qos: list[Qos]) -> list[str]:
    rows = ["|".join(SACCTMGR_QOS_FIELDS)]
    rows += [f"{q.name}|{q.priority}|{q.grp_tres or ''}|{q.max_tres_pu or ''}|{q.max_wall or ''}" for q in qos]
    return rows


def sacctmgr_assoc_lines(assocs: list[Association], cluster: str) -> list[str]:
    rows = ["|".join(SACCTMGR_ASSOC_FIELDS)]
    rows += [f"{cluster}|{a.account}|{a.user or ''}|{a.partition or ''}|{a.share}|{a.grp_tres or ''}|{','.join(a.qos)}"
             for a in assocs]
    return rows


def sshare_lines(shares: list[FairShareRow]) -> list[str]:
    """`sshare -a -P`: accounts indented one space under root, users beneath their account."""
    rows = ["|".join(SSHARE_FIELDS)]
    for s in shares:
        indent = "" if s.account == "root" and not s.user else (" " * (2 if s.user else 1))
        rows.append(f"{indent}{s.account}|{s.user or ''}|{s.raw_shares}|{s.norm_shares:.6f}|{s.raw_usage}|"
                    f"{s.effectv_usage:.6f}|{s.fairshare:.6f}")
    return rows


def sprio_lines(rows: list[JobPriority]) -> list[str]:
    """`sprio -o "%i|%r|%u|%Y|%A|%F|%J|%P|%Q"`: the header names the factors, one pending job a line."""
    lines = ["|".join(SPRIO_FIELDS)]
    lines += [f"{r.job}|{r.partition or ''}|{r.user or ''}|{r.priority}|{r.age}|{r.fairshare}|{r.jobsize}|"
              f"{r.partition_factor}|{r.qos}" for r in rows]
    return lines


def cluster_queue_lines(queues: list[ClusterQueue]) -> list[str]:
    """The list, then each queue's quota and reservation as `kubectl describe clusterqueue` shows them."""
    lines = table(["NAME", "COHORT", "STRATEGY", "PENDING WORKLOADS", "ADMITTED WORKLOADS"],
                  [[q.name, q.cohort or "", q.strategy, str(q.pending_workloads), str(q.admitted_workloads)]
                   for q in queues])
    for q in queues:
        borrowed = max(0, q.reserved - q.nominal_quota)
        lines += ["", f"Name:         {q.name}", "Kind:         ClusterQueue", "Spec:",
                  *([f"  Cohort:  {q.cohort}"] if q.cohort else []),
                  "  Resource Groups:", "    Covered Resources:", f"      {q.resource}", "    Flavors:",
                  f"      Name:  {q.flavor}", "      Resources:", f"        Name:           {q.resource}",
                  f"        Nominal Quota:  {q.nominal_quota}"]
        if q.borrowing_limit is not None:
            lines.append(f"        Borrowing Limit:  {q.borrowing_limit}")
        lines += ["Status:", f"  Admitted Workloads:  {q.admitted_workloads}", "  Flavors Reservation:",
                  f"    Name:  {q.flavor}", "    Resources:", f"      Borrowed:  {borrowed}",
                  f"      Name:      {q.resource}", f"      Total:     {q.reserved}",
                  f"  Pending Workloads:  {q.pending_workloads}"]
    return lines


def _resources(res: dict[str, float]) -> str:
    return "{" + ", ".join(f"'{k}': {float(v)}" for k, v in res.items()) + "}"


def ray_status_lines(scaler: Autoscaler, now: datetime) -> list[str]:
    """`ray status` (Ray 2.x): healthy nodes per type, pending nodes, usage and demands."""
    rule = "-" * 63
    lines = [f"======== Autoscaler status: {now.strftime('%Y-%m-%d %H:%M:%S.%f')} ========", "Node status", rule,
             "Active:"]
    lines += [f" {t.running} {t.name}" for t in scaler.node_types if t.running] or [" (no active nodes)"]
    lines += ["Idle:", " (no idle nodes)", "Pending:", " (no pending nodes)", "Recent failures:", " (no failures)",
              "", "Resources", rule, "Usage:"]
    totals: dict[str, float] = {}
    for t in scaler.node_types:
        for k, v in t.resources.items():
            totals[k] = totals.get(k, 0.0) + v * t.running
    lines += [f" {v:.1f}/{v:.1f} {k}" for k, v in totals.items()]
    lines += ["", "Demands:"]
    lines += [f" {_resources(d.resources)}: {d.count}+ pending {d.kind}" for d in scaler.demands] \
        or [" (no resource demands)"]
    # Not part of `ray status`: the node types' bounds come from the cluster config (the RayCluster's
    # worker groups), which the autoscaler reads; shown so that a type at its maximum is visible.
    lines += ["", "Node types (cluster config):"]
    lines += [f" {t.name}: min_workers={t.min_workers} max_workers={t.max_workers} {_resources(t.resources)}"
              for t in scaler.node_types]
    return lines
