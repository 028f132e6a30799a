"""What the investigation has seen so far, indexed for matching playbook signals.

Built from the observations in state (plain dicts), so a policy can be
rebuilt in another process from a checkpoint and see exactly the same thing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from crashcart.tools.cluster import GpuSample, ProgressPoint, Checkpoint

FAILED_STATES = {
    "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "PREEMPTED", "BOOT_FAIL", "CANCELLED",
    "DEADLINE", "ERROR", "OOMKILLED", "EVICTED", "STOPPED", "CRASHLOOPBACKOFF", "UNKNOWN",
}
VICTIM_WINDOW_MINUTES = 60
"""Jobs that ended badly on a faulty node this close to the fault are its victims."""
# A line worth a person's eyes: an error, an exception, a kill, a timeout.
SUSPICIOUS = re.compile(
    r"\b(\w*error|\w*exception|traceback|fatal|failed|killed|abort|timed? ?out|panic|segfault|nan\b|oom)",
    re.I,
)

# sacct's word for a cancelled job names who cancelled it: "CANCELLED by <uid>" (0 is root or
# slurmctld itself). A person's cancel is a decision, not a victim of a fault.
_CANCELLED_BY = re.compile(r"^CANCELLED by (\d+)$", re.I)
# coreutils `id` as a job script's prolog prints it: "uid=61407(ajoshi) gid=6001(nlp) groups=...".
_ID_LINE = re.compile(r"(?<![\w=])uid=(\d+)\(([^)\s]+)\)")
RUNNING_STATES = {"RUNNING", "COMPLETING", "CONFIGURING", "ALIVE"}
SUCCEEDED_STATES = {"COMPLETED", "SUCCEEDED", "COMPLETE"}
# The scheduler reads, and the fields of their output the capacity answers read.
LIMIT_TOOLS = {
    "sacctmgr_show": ("qos", "associations"), "sshare": ("shares",),
    "sprio": ("priorities",), "kueue_cluster_queues": ("cluster_queues",), "ray_autoscaler_status": ("autoscaler",),
}


# How people write a job id or a job or node name in a question: 48213, gpu-b07, llama-70b, node_12
# (letters and digits joined by - or _), never a date or a time (no letters), never a plain word.
ENTITY_NAME = re.compile(r"(?<![\w-])(?:\d{4,}|(?=[\w-]*[a-zA-Z])(?=[\w-]*\d)[a-zA-Z0-9]+(?:[-_][a-zA-Z0-9]+)+)(?![\w-])")


# An id a person shortened and marked so ("raysubmit_bT7...", "48213…"): what precedes the dots.
_ELLIDED = re.compile(r"(?<![\w-])([A-Za-z0-9][\w-]{3,})(?:\.{2,}|…)")
# Where a generated suffix starts in a job's id (a pod's `-7f9c6d-hx2lw`, an array task's `_4`).
_SUFFIX_START = "-_."
# A prefix of an opaque id typed without dots is taken from this many characters (letters in it).
MIN_BARE_PREFIX = 8


def _names(text: str, name: str) -> bool:
    """`text` names `name` as a whole word (a job id or name: hyphens are part of it)."""
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text, re.I) is not None


# The reasons a Kubernetes Job gives when it stops retrying its failed pods (batch/v1's Failed
# condition): the Job's own end names no cause, its pods' termination does. (DeadlineExceeded is
# not one: the Job's own activeDeadlineSeconds ended it.)
_GAVE_UP_AFTER_POD_FAILURES = {"backofflimitexceeded", "maxfailedindexesexceeded", "failedindexes"}


def gave_up_after_pod_failures(reason: str | None) -> bool:
    return (reason or "").strip().lower() in _GAVE_UP_AFTER_POD_FAILURES


def _last_seen(job: JobFacts) -> float:
    when = job.end_time or job.start_time or job.submit_time
    return when.timestamp() if when else 0.0


@dataclass
class TextDoc:
    source: str
    entity: str
    """job:ID, node:NAME or cluster: where a match in this text points."""
    lines: list[str]
    call: str
    """The tool call it came from, as the evidence path names it."""
    last_time: datetime | None = None
    """The latest timestamp a line carries (job logs), to tell a silent job from a busy one; an
    event's own time."""

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = "\n".join(self.lines)
        return self._text

    _text: str | None = field(default=None, repr=False)


@dataclass
class JobFacts:
    job: str
    name: str | None = None
    state: str = ""
    reason: str | None = None
    exit_code: str | None = None
    user: str | None = None
    partition: str | None = None
    nodes: list[str] = field(default_factory=list)
    gpus: int = 0
    start_time: datetime | None = None
    end_time: datetime | None = None
    submit_time: datetime | None = None
    depends_on: list[str] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    account: str | None = None
    qos: str | None = None
    gpus_per_pod: int | None = None
    """The GPUs its pod's containers are limited to (`kubectl describe pod`): what the device plugin gave it."""

    @property
    def failed(self) -> bool:
        # kubectl shows a pod whose init container fails as "Init:Error" / "Init:CrashLoopBackOff".
        return self.state.upper().split()[0].removeprefix("INIT:") in FAILED_STATES if self.state else False


@dataclass
class Evidence:
    now: datetime | None
    trigger: dict[str, Any]
    docs: list[TextDoc] = field(default_factory=list)
    jobs: dict[str, JobFacts] = field(default_factory=dict)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    telemetry: dict[str, list[GpuSample]] = field(default_factory=dict)
    progress: dict[str, tuple[list[ProgressPoint], list[Checkpoint]]] = field(default_factory=dict)
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: set[str] = field(default_factory=set)
    """Keys of the calls already made (tool + sorted args), to never repeat one."""
    no_kubernetes: bool = False
    """A kubectl_* tool answered that this cluster has no Kubernetes API (plain Ray, not KubeRay):
    no further kubectl call can say anything."""
    history_rows: list[dict[str, Any]] = field(default_factory=list)
    partitions: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Slurm partitions' configured limits (partition_info), by name."""
    disks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Each node's filesystems (disk_usage: df), by node."""
    limits: dict[str, Any] = field(default_factory=dict)
    """The scheduler's limits as read (qos, associations, shares, cluster_queues, autoscaler)."""
    listed: set[str] = field(default_factory=set)
    """Node listings that answered: the node each asked about, `*` for a listing of every node."""
    _shortened: tuple[tuple[int, int, int], dict[str, list[str]]] | None = field(default=None, repr=False)

    # --- what the incident is about --------------------------------------

    def focus_jobs(self) -> list[str]:
        """The trigger's job, or the jobs a chat message or node alert points at."""
        found: list[str] = []
        if self.trigger.get("job"):
            found.append(str(self.trigger["job"]))
        text = self.trigger.get("text") or ""
        if text and self.jobs:
            for job_id in self.jobs:
                if _names(text, job_id) and job_id not in found:
                    found.append(job_id)
            # A shortened id that only one job's id starts with means that job.
            found += [c[0] for c in self.shortened_ids().values() if len(c) == 1 and c[0] not in found]
            if not found:
                # People name jobs by name ("what killed llama-70b?"): its failed runs first, then the latest.
                named = [f for f in self.jobs.values() if f.name and len(f.name) >= 3 and _names(text, f.name)]
                named.sort(key=lambda f: (not f.failed, -_last_seen(f)))
                found += [f.job for f in named[:3]]
        return found

    def focus_nodes(self) -> list[str]:
        """The trigger's node, or the nodes a chat message names that the cluster's node listing showed."""
        found = [self.trigger["node"]] if self.trigger.get("node") else []
        text = self.trigger.get("text") or ""
        if self.trigger.get("kind") == "chat" and text:
            found += [n for n in self.nodes if n not in found and _names(text, n)]
        return found

    def unmatched_names(self) -> list[str]:
        """What a chat message names (job ids, job and node names) that nothing the investigation saw
        is called, nor is the start of any job's id."""
        shortened = self.shortened_ids()
        return [t for t in self._unknown_tokens() if t not in shortened]

    def _unknown_tokens(self) -> list[str]:
        if self.trigger.get("kind") != "chat":
            return []
        text = self.trigger.get("text") or ""
        known = set(self.jobs) | {f.name for f in self.jobs.values() if f.name} | set(self.nodes)
        tokens = ENTITY_NAME.findall(text) + _ELLIDED.findall(text)
        return [t for t in dict.fromkeys(tokens) if not any(_names(t, k) for k in known)]

    def shortened_ids(self) -> dict[str, list[str]]:
        """What a chat message names by the start of a job id, and the jobs (from the job list the
        investigation read) whose id starts with it: one job means that job, several are ambiguous.

        A person shortens an id they paste ("raysubmit_bT7...") or names a workload without the
        suffix its controller added ("embed-backfill-2887" for pod embed-backfill-2887-qv5sd). A token
        counts as a shortened id when it is marked so (dots after it), when the id goes on with a
        suffix separator (- _ .), or when it is a long prefix with letters (an opaque id's first
        characters); a bare number is never guessed to be the start of another (48213 vs 482130)."""
        # Matching asks for the focus many times over one unchanged evidence: work it out once.
        key = (len(self.jobs), len(self.nodes), sum(1 for f in self.jobs.values() if f.name))
        if self._shortened is not None and self._shortened[0] == key:
            return self._shortened[1]
        text = self.trigger.get("text") or ""
        ellided = set(_ELLIDED.findall(text))
        out: dict[str, list[str]] = {}
        for token in self._unknown_tokens():
            bare_ok = len(token) >= MIN_BARE_PREFIX and any(ch.isalpha() for ch in token)
            hits = [j for j in self.jobs if len(j) > len(token) and j.startswith(token)
                    and (token in ellided or j[len(token)] in _SUFFIX_START or bare_ok)]
            if hits:
                out[token] = sorted(hits)
        self._shortened = (key, out)
        return out

    def earlier_good_runs(self, job: str) -> list[str]:
        """Earlier runs of the same job (the same name and owner, another id) that succeeded and
        ended before it was submitted, newest first: what last worked is evidence of the right value."""
        facts = self.jobs.get(job)
        if not facts or not facts.name:
            return []
        since = facts.submit_time or facts.start_time
        runs = [f for j, f in self.jobs.items()
                if j != job and f.name == facts.name and f.user == facts.user
                and f.state.upper().split(" ")[0] in SUCCEEDED_STATES and f.end_time is not None
                and (since is None or f.end_time <= since)]
        return [f.job for f in sorted(runs, key=lambda f: f.end_time, reverse=True)]

    def owner_good_runs(self, job: str) -> list[str]:
        """The job's earlier good runs, then its owner's other jobs of the same partition (namespace)
        that succeeded before it was submitted, newest first: the owner's recipe that worked there."""
        facts = self.jobs.get(job)
        if not facts or not facts.user or not facts.partition:
            return []
        since = facts.submit_time or facts.start_time
        same = self.earlier_good_runs(job)
        runs = [f for j, f in self.jobs.items()
                if j != job and j not in same and f.user == facts.user and f.partition == facts.partition
                and f.state.upper().split(" ")[0] in SUCCEEDED_STATES and f.end_time is not None
                and (since is None or f.end_time <= since)]
        return same + [f.job for f in sorted(runs, key=lambda f: f.end_time, reverse=True)]

    def upstream_jobs(self) -> list[str]:
        ups: list[str] = []
        for j in self.focus_jobs():
            facts = self.jobs.get(j)
            ups += [u for u in (facts.depends_on if facts else []) if u not in ups]
        return ups

    def partition_jobs(self, limit: int = 2) -> list[str]:
        """Other jobs of the focus jobs' partitions (namespaces) that run, or ran to completion, on
        other nodes, running first: what works on that partition (the interface NCCL finds there)."""
        focus = self.focus_jobs()
        partitions = {self.jobs[j].partition for j in focus if j in self.jobs and self.jobs[j].partition}
        mine = {n for j in focus if j in self.jobs for n in self.jobs[j].nodes}
        good = [f for j, f in self.jobs.items()
                if j not in focus and f.partition in partitions and f.nodes and not set(f.nodes) & mine
                and f.state.upper().split(" ")[0] in RUNNING_STATES | SUCCEEDED_STATES]
        good.sort(key=lambda f: f.state.upper().split(" ")[0] not in RUNNING_STATES)
        return [f.job for f in good[:limit]]

    def failed_peers(self, within_hours: float = 24) -> list[str]:
        """Other jobs of the focus jobs' partitions (namespaces) that failed recently, latest first:
        where a shared dependency (a secret, a mount) shows itself a second time."""
        focus = self.focus_jobs()
        partitions = {self.jobs[j].partition for j in focus if j in self.jobs and self.jobs[j].partition}
        peers = [
            f for j, f in self.jobs.items()
            if j not in focus and f.failed and f.partition in partitions and f.end_time is not None
            and (self.now is None or (self.now - f.end_time).total_seconds() <= within_hours * 3600)
        ]
        return [f.job for f in sorted(peers, key=lambda f: f.end_time, reverse=True)]

    def running_peers(self) -> list[str]:
        """Other jobs of the focus jobs' partitions (namespaces) running now, the same owner's first:
        what they run with (a storage class, a bound claim) exists on this cluster."""
        focus = self.focus_jobs()
        owners = {self.jobs[j].user for j in focus if j in self.jobs}
        partitions = {self.jobs[j].partition for j in focus if j in self.jobs and self.jobs[j].partition}
        peers = [f for j, f in self.jobs.items()
                 if j not in focus and f.partition in partitions and f.state.upper() in RUNNING_STATES]
        return [f.job for f in sorted(peers, key=lambda f: (f.user not in owners, f.job))]

    def focus_window(self) -> tuple[datetime | None, datetime | None]:
        """From the first start to the last end among the focus jobs and their attempts."""
        starts, ends = [], []
        for j in self.focus_jobs():
            facts = self.jobs.get(j)
            if not facts:
                continue
            starts += [t for t in [facts.start_time] + [_time(a.get("start_time")) for a in facts.attempts] if t]
            ends += [t for t in [facts.end_time] + [_time(a.get("end_time")) for a in facts.attempts] if t]
        return (min(starts) if starts else None), (max(ends) if ends else self.now)

    def replicas(self, job: str) -> list[JobFacts]:
        """The other pods of the workload a pod belongs to (`train-worker-3` of PyTorchJob `train`):
        one job to its owner, so their nodes are the job's nodes. They share its name and
        namespace, and ran at the same time."""
        facts = self.jobs.get(job)
        if not facts or not facts.name or facts.name == job or not job.startswith(f"{facts.name}-"):
            return []
        return [f for f in self.jobs.values() if f.job != job and f.name == facts.name
                and f.partition == facts.partition and _overlap(f, facts, self.now)]

    def victims_of(self, node: str) -> list[str]:
        """Every job a fault on `node` killed: any user, partition or namespace, any bad end
        (FAILED, NODE_FAIL, CANCELLED by the system, a pod in Error or Unknown), ended within
        the window around the fault (the focus jobs' end, else now). Not a job its owner cancelled."""
        ends = [f.end_time for j in self.focus_jobs() if (f := self.jobs.get(j)) and f.end_time]
        fault = max(ends) if ends else self.now
        # A workload's other pods rerun with it; they are not separate victims.
        same_workload = {r.job for j in self.focus_jobs() for r in self.replicas(j)}
        out = []
        for f in self.jobs.values():
            if node not in f.nodes or not f.failed or cancelled_by(self, f.job) in PERSON_CANCELS or f.job in same_workload:
                continue
            ended = f.end_time is not None or f.state.upper().split()[0] in {"NODE_FAIL", "UNKNOWN"}
            if not ended and not f.gpus:
                # Still restarting in place and holding no GPUs: a node's own daemon (device plugin,
                # exporter) in CrashLoopBackOff goes with the node, not a victim to rerun. A workload
                # holding the node's GPUs keeps crashing on them until it runs elsewhere.
                continue
            if fault and f.end_time and abs((f.end_time - fault).total_seconds()) > VICTIM_WINDOW_MINUTES * 60:
                continue
            out.append(f.job)
        return out

    def gone_nodes(self) -> list[str]:
        """The incident's nodes that died under it: a node listing shows them down (Ray's DEAD, a
        NotReady kubelet, Slurm's down*), or a listing that answered no longer has them (the
        instance is gone: a reclaimed spot VM, a deleted node)."""
        out = []
        for n in self.relevant_nodes():
            row = self.nodes.get(n)
            state = str(row.get("state") or "").lower().rstrip("*~#!%$@^-") if row else ""
            if (row and state in GONE_STATES) or (not row and (n in self.listed or "*" in self.listed)):
                out.append(n)
        return out

    def relevant_nodes(self) -> list[str]:
        nodes: list[str] = []
        if self.trigger.get("node"):
            nodes.append(self.trigger["node"])
        for j in self.focus_jobs():
            for replica in self.replicas(j):
                nodes += [n for n in replica.nodes if n not in nodes]
            facts = self.jobs.get(j)
            for n in facts.nodes if facts else []:
                if n not in nodes:
                    nodes.append(n)
            for a in facts.attempts if facts else []:
                for n in a.get("nodes") or []:
                    if n not in nodes:
                        nodes.append(n)
        return nodes


PERSON_CANCELS = {"owner", "other", "person"}
# A node listing's word for a node that stopped answering or no longer exists (backends normalise
# Ray's DEAD to down; a kubelet that stopped reporting is not_ready).
GONE_STATES = {"down", "dead", "not_ready", "notready", "unknown"}
NODE_LISTINGS = {"sinfo", "kubectl_get_nodes", "ray_list_nodes"}


def cancelled_by(ev: Evidence, job: str) -> str | None:
    """Who cancelled a job, as far as the evidence tells: `system` (uid 0: root or slurmctld),
    `owner` (the uid its own `id` output reports for the job's user), `other` (a person who is
    not the owner: an administrator), `person` (a nonzero uid nobody has tied to an owner).
    None when the job was not cancelled by anyone named."""
    facts = ev.jobs.get(job)
    m = _CANCELLED_BY.match(facts.state.strip()) if facts and facts.state else None
    if not m:
        return None
    uid = int(m.group(1))
    if uid == 0:
        return "system"
    owner = owner_uid(ev, job)
    if owner is None:
        return "person"
    return "owner" if owner == uid else "other"


def owner_uid(ev: Evidence, job: str) -> int | None:
    """The job owner's uid, from the job's own output (`id` in its script: the process runs as
    its owner). Only a line naming the job's user counts when the user is known."""
    facts = ev.jobs.get(job)
    user = facts.user if facts else None
    for doc in ev.docs:
        if doc.source not in {"log", "attempt_log"} or doc.entity != f"job:{job}":
            continue
        for m in _ID_LINE.finditer(doc.text):
            if user is None or m.group(2) == user:
                return int(m.group(1))
    return None


def _overlap(a: JobFacts, b: JobFacts, now: datetime | None) -> bool:
    """Whether two jobs ran at the same time (a job with no start never ran)."""
    if a.start_time is None or b.start_time is None:
        return False
    a_end, b_end = a.end_time or now, b.end_time or now
    return (a_end is None or a_end > b.start_time) and (b_end is None or b_end > a.start_time)


def call_key(tool: str, args: dict[str, Any]) -> str:
    return tool + "(" + ",".join(f"{k}={args[k]}" for k in sorted(args)) + ")"


# Kueue names the Workload of a job `<owner kind, lower case>-<owner name>-<5 hex of a hash>`
# (jobframework's GetWorkloadNameForOwnerWithGVK): its events are about the job that owns it.
_KUEUE_WORKLOAD = re.compile(
    r"^(?:job|jobset|pytorchjob|tfjob|mpijob|xgboostjob|paddlejob|jaxjob|trainjob|rayjob|raycluster|pod|"
    r"deployment|statefulset|leaderworkerset|appwrapper)-(?P<owner>.+)-[0-9a-f]{5}$")


def _entity_of_object(obj: str, known_nodes: dict[str, Any]) -> str:
    kind, _, rest = obj.partition("/")
    name = rest.rsplit("/", 1)[-1] if rest else kind
    if kind.lower() == "node" or name in known_nodes:
        return f"node:{name}"
    if kind.lower() == "workload" and (m := _KUEUE_WORKLOAD.match(name)):
        return f"job:{m['owner']}"
    return f"job:{name}"


def _owning_job(name: str, jobs: dict[str, JobFacts]) -> str | None:
    """The job a Kubernetes object belongs to: pods, RayClusters and Jobs carry its name as a prefix."""
    best: tuple[int, str] | None = None
    for facts in jobs.values():
        for known in {facts.job, facts.name} - {None}:
            if name == known or name.startswith(f"{known}-"):
                if best is None or len(known) > best[0]:
                    best = (len(known), facts.job)
    return best[1] if best else None


def mounted_claims(config: dict[str, Any]) -> list[str]:
    """The PersistentVolumeClaims a job's pod spec mounts (`volumes[].persistentVolumeClaim.claimName`,
    at the top of its config or under `spec`/`template.spec`)."""
    found: list[str] = []
    for holder in (config, config.get("spec"), (config.get("template") or {}).get("spec")
                   if isinstance(config.get("template"), dict) else None):
        volumes = holder.get("volumes") if isinstance(holder, dict) else None
        for v in volumes if isinstance(volumes, list) else []:
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName") if isinstance(v, dict) else None
            if isinstance(claim, str) and claim and claim not in found:
                found.append(claim)
    return found


def _claim_user(name: str, ev: Evidence) -> str | None:
    """The job whose pod spec mounts the claim `name` (a focus job first): a claim's events (its
    provisioning failing) are about the job waiting on it."""
    for job in ev.focus_jobs() + list(ev.configs):
        if name in mounted_claims(ev.configs.get(job, {})):
            return job
    return None


def _merge_job(ev: Evidence, row: dict[str, Any], parent: str | None = None) -> None:
    if row.get("attempt"):
        # An earlier attempt belongs to the job asked about, whatever its own id.
        owner = parent or row["job"]
        facts = ev.jobs.setdefault(owner, JobFacts(job=owner))
        if not any(a.get("attempt") == row["attempt"] for a in facts.attempts):
            facts.attempts.append(row)
        return
    facts = ev.jobs.setdefault(row["job"], JobFacts(job=row["job"]))
    for key in ("name", "state", "reason", "exit_code", "user", "partition", "gpus", "depends_on", "account", "qos"):
        if row.get(key) not in (None, "", [], 0):
            setattr(facts, key, row[key])
    if row.get("nodes"):
        facts.nodes = list(row["nodes"])
    for key in ("start_time", "end_time", "submit_time"):
        if row.get(key):
            setattr(facts, key, _time(row[key]))


def pod_gpu_limit(text: str) -> int | None:
    """The GPUs `kubectl describe pod` lists under its containers' Limits (summed over containers)."""
    total, in_limits, indent = 0, False, 0
    for line in text.splitlines():
        stripped = line.strip()
        depth = len(line) - len(line.lstrip())
        if stripped == "Limits:":
            in_limits, indent = True, depth
            continue
        if in_limits and (depth <= indent or not stripped):
            in_limits = False
        m = _GPU_LIMIT.match(stripped) if in_limits else None
        if m:
            total += int(m.group(1))
    return total or None


_GPU_LIMIT = re.compile(r"^(?:nvidia\.com|amd\.com)/gpu:\s*(\d+)$")


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime) or value is None:
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


# The Ray backend's answer to a kubectl_* tool on a Ray cluster that is not KubeRay (its NO_KUBERNETES).
NO_KUBERNETES_API = re.compile(r"there is no Kubernetes API to ask")


def build_evidence(observations: list[dict[str, Any]], trigger: dict[str, Any], now: datetime | None) -> Evidence:
    ev = Evidence(now=now, trigger=trigger)
    for obs in observations:
        tool, args, data = obs["tool"], obs.get("args") or {}, obs.get("data") or {}
        ev.calls.add(call_key(tool, args))
        if tool.startswith("kubectl_") and NO_KUBERNETES_API.search(str(obs.get("text") or "")):
            ev.no_kubernetes = True
        if not obs.get("ok"):
            continue
        label = f"{tool}:{args.get('job') or args.get('node') or args.get('name') or args.get('object') or 'cluster'}"
        if tool in NODE_LISTINGS and not args.get("partition"):
            ev.listed.add(str(args.get("node") or "*"))
        if tool == "get_logs":
            lines = obs["text"].splitlines()
            if args.get("attempt"):
                # An earlier attempt's log is history: read for what it finished (its saves), never
                # matched as the cause of the failure at hand, nor as a sign the job is quiet now.
                ev.docs.append(TextDoc("attempt_log", f"job:{args['job']}", lines, label))
            else:
                ev.docs.append(TextDoc("log", f"job:{args['job']}", lines, label, _last_stamp(lines, now)))
        elif tool == "kernel_log":
            ev.docs.append(TextDoc("kernel_log", f"node:{args['node']}", obs["text"].splitlines(), label))
        elif tool == "kubectl_describe":
            kind, name = args.get("kind"), args.get("name")
            entity = f"node:{name}" if kind == "node" else f"job:{name}"
            ev.docs.append(TextDoc("describe", entity, obs["text"].splitlines(), label))
            if data.get("job"):
                _merge_job(ev, data["job"])
            if kind == "pod" and (gpus := pod_gpu_limit(obs["text"])):
                ev.jobs.setdefault(name, JobFacts(job=name)).gpus_per_pod = gpus
            if data.get("node"):
                ev.nodes[data["node"]["node"]] = data["node"]
        elif tool == "kubectl_events":
            for e in data.get("events") or []:
                ev.docs.append(TextDoc(
                    "events", _entity_of_object(e["object"], ev.nodes),
                    [f"{e.get('type', '')} {e['reason']}: {e.get('message', '')}"], label, _time(e.get("time")),
                ))
        elif tool == "ray_job_status":
            if data.get("row"):
                _merge_job(ev, data["row"])
            facts = ev.jobs.setdefault(args["job"], JobFacts(job=args["job"]))
            facts.state = data.get("status") or facts.state
            ev.docs.append(TextDoc("status_message", f"job:{args['job']}", obs["text"].splitlines(), label))
        elif tool in {"nvidia_smi_query", "gpu_metrics"}:
            ev.telemetry.setdefault(args["node"], []).extend(GpuSample.model_validate(g) for g in data.get("gpus") or [])
            text = obs.get("text") or ""
            if tool == "nvidia_smi_query" and text and not text.startswith("index,"):
                # Raw `nvidia-smi -q` text (remapped rows, fabric state, a missing GPU) is
                # evidence in itself, whether or not the node also reports samples.
                ev.docs.append(TextDoc("kernel_log", f"node:{args['node']}", text.splitlines(), label))
        elif tool == "training_progress":
            ev.progress[args["job"]] = (
                [ProgressPoint.model_validate(p) for p in data.get("points") or []],
                [Checkpoint.model_validate(c) for c in data.get("checkpoints") or []],
            )
        elif tool == "job_config":
            ev.configs[args["job"]] = data.get("config") or {}
        elif tool == "disk_usage":
            ev.disks[args["node"]] = data.get("mounts") or []
        elif tool == "partition_info":
            ev.partitions[data.get("partition") or args["partition"]] = data
        elif tool in LIMIT_TOOLS:
            for key in LIMIT_TOOLS[tool]:
                if data.get(key):
                    ev.limits[key] = data[key]
            if tool == "ray_autoscaler_status" and obs.get("text"):
                # `ray status` as the cluster prints it: the same words a driver's log echoes.
                ev.docs.append(TextDoc("autoscaler_status", "cluster", obs["text"].splitlines(), label))
        if "rows" in data and tool in {"sacct", "squeue", "list_jobs", "job_history"}:
            for row in data["rows"]:
                _merge_job(ev, row, parent=args.get("job"))
            if tool == "job_history" and not args.get("job"):
                ev.history_rows = data["rows"]
        elif "rows" in data:
            for row in data["rows"]:
                ev.nodes[row["node"]] = row
    for doc in ev.docs:
        if doc.entity.startswith("job:") and doc.entity[4:] not in ev.jobs:
            owner = _owning_job(doc.entity[4:], ev.jobs) or (
                _claim_user(doc.entity[4:], ev) if doc.source == "events" else None)
            if owner:
                doc.entity = f"job:{owner}"
    from crashcart.agent.policies.progress_bars import extend_log_times

    extend_log_times(ev)
    return ev


def _last_stamp(lines: list[str], now: datetime | None) -> datetime | None:
    if now is None:
        return None
    from crashcart.tools.render import job_log_stamp

    stamp_of = job_log_stamp(now)
    for line in reversed(lines[-200:]):
        stamp = stamp_of(line)
        if stamp is not None:
            return stamp
    return None
