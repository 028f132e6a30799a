"""The playbook schema: what a failure looks like, how to confirm it, how to fix it.

One YAML file per family; each entry is a failure label. Signals are the
general form of the real error (invariant words, numbers as patterns), never
one incident's names: the holdout suite checks that they generalise.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SignalSource = Literal[
    "log",            # a job's stdout/stderr (any attempt)
    "kernel_log",     # a node's dmesg
    "events",         # scheduler / Kubernetes events: "Reason: message"
    "describe",       # kubectl describe text
    "status_message", # Ray job status message
    "autoscaler_status",  # the Ray autoscaler's own `ray status` text, read from the cluster
    "job_state",      # the scheduler's word for the job (FAILED, OOMKilled, ...)
    "job_reason",     # pending or termination reason
    "exit_code",      # e.g. 0:125, 137
    "node_state",     # a node's state and reason ("down Not responding")
    "telemetry",      # GPU samples against thresholds
    "xid",            # a GPU's last Xid as its telemetry reports it (DCGM_FI_DEV_XID_ERRORS), against `values`
    "progress",       # minutes without a new step
    "trigger",        # the trigger kind or chat text
    "config",         # the job's config (for conditions such as long sequences)
    "co_failures",    # other jobs that failed on the same node at about the same time
    "attempts",       # earlier attempts that failed at about the same step
    "log_recent",     # the job's log has a stamped line within min_minutes of now
    "gpus_busy",      # every GPU sampled on a focus job's nodes is busy now (gpus_busy_pct, default 50)
    "quiet_as_before",  # a running job silent since a line that began as long a silence before (agent/policies/quiet_phase.py)
    "throughput",     # the job's latest tokens/s fell min_drop_pct below its earlier median
    "memory_growth",  # a GPU's memory use rose steadily by min_growth_pct over the samples seen
    "node_labels",    # a relevant node's labels, as key=value lines
    "named_job",      # the trigger names a job the cluster knows (a question about one job)
    "cancelled_by",   # who cancelled the job: system (uid 0), owner, other (not the owner), person (owner unknown)
    "node_ran_since", # a node whose kernel log matches `pattern` has run another job well since the failure
    "driver_behind_peers",  # a node's NVIDIA driver (dmesg's NVRM load line, nvidia-smi) is older than its peers'
    "finished_before",  # the job's history holds an earlier run of it that finished (COMPLETED, Succeeded)
]
# The sources that are text a pattern reads (the others are facts compared to values or thresholds).
TEXT_SOURCES = frozenset({"log", "kernel_log", "events", "describe", "status_message", "autoscaler_status"})

Team = Literal["hardware", "network", "infra", "storage", "user", "credentials", "capacity"]
RemedyKind = Literal[
    "resubmit", "resubmit_with_changes", "exclude_node", "escalate_hardware", "escalate_user",
    "escalate_credentials", "escalate_network", "escalate_storage", "escalate_infra",
    "wait", "preempt", "none",
]



def _compiled(v: str | None, what: str) -> str | None:
    """A regex field's value, or a ValueError saying it does not compile."""
    if v is not None:
        try:
            re.compile(v)
        except re.error as e:
            raise ValueError(f"{what} does not compile: {e}") from None
    return v

class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Threshold(Strict):
    """A telemetry condition: every given bound must hold for one GPU sample."""

    field: Literal[
        "temperature_c", "power_w", "sm_clock_mhz", "util_pct", "memory_used_mib",
        "ecc_uncorrected", "remapped_rows_pending",
    ]
    ge: float | None = None
    le: float | None = None


class Arithmetic(Strict):
    """Sizes a text signal's named groups captured ("5.47 GiB", "812.00 MiB"), checked as a sum."""

    add: list[str]
    subtract: list[str] = Field(default_factory=list)
    at_least: str
    """The match counts only when add - subtract >= this group's size."""


class Signal(Strict):
    where: SignalSource
    pattern: str | None = None
    """Python regex (case-insensitive) over the source's lines; named groups are captured (a group
    named `peak` captures the largest size it reads anywhere in the text, not the first).
    A pattern with a newline escape (\\n) runs over the whole text, for errors that span lines."""
    values: list[str] | None = None
    """Exact words for job_state, job_reason, exit_code, node_state, cancelled_by and trigger kinds."""
    thresholds: list[Threshold] = Field(default_factory=list)
    throttle_any: list[str] = Field(default_factory=list)
    """telemetry: at least one of these throttle reasons is active (substring match)."""
    min_minutes: float | None = None
    """progress: no new step for at least this long; co_failures: time window; attempts: count
    only the runs that lasted at least this long before they failed; node_ran_since: how long
    the later job must have run without failing; kernel_log: the line where the match ends is
    stamped on the wall clock at least this long before now (quiet since); quiet_as_before: the
    job has been silent at least this long."""
    min_count: int | None = None
    """co_failures / attempts: how many."""
    min_drop_pct: float | None = None
    """throughput: how far below the earlier median the latest rate must be."""
    min_growth_pct: float | None = None
    """memory_growth: how much memory use must have grown, first sample to last: a GPU's in
    telemetry or, with a pattern, the figure its named group `value` reads from each log line."""
    largest_share: bool = False
    """Text signals over a scheduler's "0/N nodes are available: a node(s) ..., b node(s) ..."
    line: the match counts only when its named group `count` is the largest count in that line,
    so the reason that kept most nodes out is the cause and a minor one is not."""
    exceeds_job: Literal["nodes", "gpus", "gpus_per_node"] | None = None
    """Text signals: the match counts only when its named group `count` (times the group `per`,
    when the pattern has one) is more than the job was given of this: a launcher asking for
    4 nodes x 8 processes inside a 24-GPU allocation can never assemble. A zero-based group
    `index` (a failing local rank) asks for index + 1 of them."""
    covers: Arithmetic | None = None
    """Text signals: read the message's own arithmetic (PyTorch's OOM: free plus reserved-but-
    unallocated covers the request means fragmentation, not a batch too big)."""
    gpus_busy_pct: float | None = None
    """Text signals, quiet_as_before and gpus_busy: the match counts only when the job's GPUs are working now:
    every GPU sampled on its nodes (the latest sample each) is at least this busy, with memory in
    use. A log that ends inside an evaluation pass means a busy job only while its GPUs say so."""
    focus_only: bool = False
    """Text signals: only the focus jobs' own texts count (their log, their events), not another
    pod's: whose eviction message it is decides whether the pod was the cause or a bystander."""
    newest_of: str | None = None
    """Event signals: the match counts only when its event is the newest, for the same object, of
    the events this regex matches, and no older than the focus jobs' end (a node condition that
    has cleared since it was raised, after the failure)."""
    config_key: str | None = None
    """config: the setting (or literal key) read; with a pattern, a text value matching it counts."""
    config_ge: float | None = None
    config_values: list[Any] | None = None
    weight: float = 1.0
    required: bool = False
    """The label is a candidate only when every required signal matched."""
    rules_out: bool = False
    """When this matches, the label is not a candidate (e.g. a healthy job is not hung)."""
    group: str | None = None
    """Signals sharing a group are alternatives, and at least one of each group must match."""
    from_history: bool = False
    """log signals with named groups: also read the job's earlier runs' logs (its attempts, an
    earlier run that finished) for the values those groups capture (the peak memory a finished
    run reported). A value from history is never proof of the failure at hand: it neither scores
    nor meets a required signal or a group; it only fills a name the current texts did not."""

    _compiles = field_validator("pattern")(lambda v: _compiled(v, "pattern"))
    _newest_compiles = field_validator("newest_of")(lambda v: _compiled(v, "newest_of"))

    @model_validator(mode="after")
    def _has_a_test(self) -> Signal:
        text_sources = TEXT_SOURCES
        if self.from_history and (self.where != "log" or not re.compile(self.pattern or "").groupindex):
            raise ValueError("from_history needs a log signal whose pattern has named groups")
        if self.newest_of and self.where != "events":
            raise ValueError("newest_of needs an events signal (events carry their time)")
        if self.focus_only and self.where not in text_sources:
            raise ValueError("focus_only needs a text signal")
        if self.where in text_sources and not self.pattern:
            raise ValueError(f"a {self.where} signal needs a pattern")
        if self.where in {"job_state", "job_reason", "exit_code", "node_state", "trigger", "cancelled_by"} and not (
            self.values or self.pattern
        ):
            raise ValueError(f"a {self.where} signal needs values or a pattern")
        if self.where == "xid" and not (self.values and all(v.isdigit() for v in self.values)):
            raise ValueError("an xid signal needs values: the Xid codes, as digits")
        if self.where == "node_ran_since" and not self.pattern:
            raise ValueError("a node_ran_since signal needs a pattern (the kernel-log lines that pick the node)")
        if self.where == "telemetry" and not (self.thresholds or self.throttle_any):
            raise ValueError("a telemetry signal needs thresholds or throttle_any")
        if self.where == "config" and not self.config_key:
            raise ValueError("a config signal needs config_key")
        if self.exceeds_job and self.where != "config" and (
                self.where not in text_sources or not re.search(r"\(\?P<(count|index)>", self.pattern or "")):
            raise ValueError("exceeds_job needs a config signal, or a text signal whose pattern has a named group `count` (or `index`)")
        if self.largest_share and (self.where not in text_sources or "(?P<count>" not in (self.pattern or "")):
            raise ValueError("largest_share needs a text signal whose pattern has a named group `count`")
        if self.covers:
            groups = set(re.compile(self.pattern or "").groupindex)
            missing = [g for g in [*self.covers.add, *self.covers.subtract, self.covers.at_least] if g not in groups]
            if self.where not in text_sources or missing:
                raise ValueError(f"covers needs a text signal whose pattern names the groups {missing}")
        if self.where == "memory_growth" and self.pattern and "(?P<value>" not in self.pattern:
            raise ValueError("a memory_growth pattern needs a named group `value` (the memory figure)")
        return self


InvestigateTarget = Literal[
    "job", "job_nodes", "job_attempts", "node", "upstream_jobs", "node_jobs", "cluster", "namespace",
    "all_nodes",
    "failed_peers",  # other jobs of the focus job's partition/namespace that failed in the last day
    "idle_gpu_nodes",  # GPU nodes the node listing shows in service with no running job holding GPUs
    "earlier_good_runs",  # earlier runs of the same job (same name and owner) that succeeded
    "owner_good_runs",  # those, then the owner's other jobs of the same partition/namespace that succeeded
    "running_peers",  # other jobs of the focus job's partition/namespace running now, its owner's first

    "partition_peers",  # two in-service nodes of the job's partition that are not the job's own
    "partition_jobs",  # two other jobs of the job's partition that run or ran fine (what works there)
    # Nodes sharing a rack or switch label with two or more nodes the label's hits name (node
    # listing first, to read the labels; playbooks/settings/topology_labels.yaml says which)
    "topology_peers",
    "job_claims",  # the PersistentVolumeClaims the job's pod spec mounts (their events: kubectl_events)
]

StepCondition = Literal[
    # The scheduler says more nodes lack free GPUs than running jobs hold GPUs on.
    "gpus_unaccounted",
    # A focus job is one pod of a multi-pod workload: list its peers (and so their nodes).
    "part_of_a_workload",
    # A node selector value no node carries and no misspelling explains: read the job's earlier good runs.
    "selector_needs_more_than_a_typo",
    # The job's log never printed the cluster's CPU and GPU totals (Ray Data's accounting line): read `ray status`.
    "cluster_totals_unseen",
]


class Step(Strict):
    """Look at something to confirm or rule a label out."""

    tool: str
    scope: InvestigateTarget = "job"
    args: dict[str, Any] = Field(default_factory=dict)
    when: StepCondition | None = None
    """Take the step only while this holds: for calls most incidents of the label never need."""


ComputedValue = Literal[
    "gpus_per_node",     # the GPUs the scheduler actually gave each node of the job
    "above_peak",        # the peak memory the evidence reports (group `peak`), times `margin`
    "half_precision",    # bf16 where every GPU of the job computes in it, fp16 otherwise
    "newest_complete_checkpoint",  # the newest checkpoint saved whole, before a corrupt latest
    "selector_as_idle_nodes_carry",  # a node selector's misspelt value, as idle GPU nodes carry it
    "partition_max_time",  # the MaxTime of the partition a job pends in for asking more (PartitionTimeLimit)
    "cpus_left_for_gpu_actors",  # Ray's CPU total less what the waiting GPU actors need
    "path_on_roomiest_disk",  # a spill/scratch path moved to the node's large empty local disk (df)
    "cpus_per_worker_that_fit",  # a Ray worker bundle's CPUs cut to what the GPU nodes have per GPU
    "toleration_for_blocking_taint",  # the toleration an earlier good run (or another replica) carries
    "rdma_devices_of_good_run",  # the RDMA devices the owner's run that used IB on the same pool asked for
    "port_the_container_serves",  # the one port the container's log says it listens on
    "probe_delay_from_startup",  # a probe delay above the server's observed start (load bar, earlier attempt)
    "storage_class_that_exists",  # a claim's missing StorageClass replaced by the one running peers bind the same claim with
    "image_the_driver_supports",  # an image whose CUDA is newer than the driver's, replaced by a known-good one that fits

    "interface_peers_use",  # the network interface NCCL uses in other jobs on the same partition
    "newest_complete_step",  # the step of the newest checkpoint saved whole
    "newest_complete_in_resume_path",  # that checkpoint, only in a resume path that names a step
]


class Change(Strict):
    """How one setting (a name in playbooks/settings/config_keys.yaml, applied to whichever of
    its keys the job uses, in that key's unit) or one literal key (an env var) changes."""

    set: Any = None
    divide: float | None = None
    multiply: float | None = None
    min_value: float | str | None = None
    """A floor, in the setting's canonical unit (a memory setting takes "4Gi")."""
    compute: ComputedValue | None = None
    """A value computed from what the tools returned; when it cannot be, nothing is guessed (or,
    when the rule also has `set`, that value is the stated fallback)."""
    margin: float | None = None
    """compute: above_peak: how far above the peak (1.25 = 25 % headroom)."""
    along_with: str | None = None
    """Made only together with this other change of the remedy (more gradient accumulation only
    keeps the global batch when the per-GPU batch came down; alone it is no fix)."""
    previous_checkpoint: bool = False
    """The path of the checkpoint before the latest one (the latest is suspect)."""
    capture: str | None = None
    """The value a named group of the label's evidence captured (e.g. `(?P<fits>\\d+)` in the
    line where the engine says how long a sequence fits): the component's own number beats a
    guess. When no hit captured the group, the arithmetic above (divide, multiply) applies."""
    only_if_present: bool = False


class Remedy(Strict):
    kind: RemedyKind
    changes: dict[str, Change] = Field(default_factory=dict)
    drain: bool = True
    """exclude_node: also drain the node (false when it is already gone)."""
    escalate: Team | None = None
    """Also escalate to this team (exclude_node: hardware, IB: network)."""
    page: bool = True
    """exclude_node: also escalate to a team. False where draining is the whole repair and the
    drain's reason the hand-off (a node-local client wedged until the node reboots): no team has
    anything to fix beyond the drained-node routine, and a page would only send it to the wrong one."""
    notify_after_attempts: int | None = None
    """Tell the owner (and recommend a lasting fix) once this many attempts failed this way."""
    advice: str | None = None
    """What the report recommends, for people."""
    while_jobs_wait: RemedyKind | None = None
    """The remedy instead when a person asks (chat) while jobs wait in the queue right now: their
    jobs start when the binding limit frees (`wait`), where a review with nothing waiting is `none`."""


class OneNode(Strict):
    """A shared-storage error that can be one client's fault: when every job showing it ran on one
    common node and jobs on other nodes ran fine meanwhile, the root cause is that node (its
    mount, its FUSE daemon) and this remedy replaces the label's own."""

    min_jobs: int = Field(2, ge=2)
    """How many jobs must show the error: one job on a node proves nothing about the node."""
    node_evidence: str | None = None
    """A kernel-log regex for the client dying on the node itself (its FUSE daemon killed, its
    mount thrown out): on exactly one of the jobs' nodes, with jobs elsewhere fine, it scopes the
    error to that node even when only one job saw it."""
    client_lost: str | None = None
    """A kernel-log regex for a client losing its server (named group `server`: "nfs: server X
    not responding"). Alone it proves nothing (every client of a failing server says it), so it
    scopes to a node only when it is that node's alone among a failed job's several nodes (which
    mount the same share), never followed there by the server's "OK", and jobs elsewhere ran fine."""
    client_hung: str | None = None
    """With client_lost: a kernel-log regex for the node's tasks wedged inside the client (hung-task
    traces in its code). A "not responding" line alone is a hiccup every client prints; a client
    whose callers are stuck in it is broken on that node."""
    remedy: Remedy

    _compiles = field_validator("node_evidence")(lambda v: _compiled(v, "node_evidence"))
    _client_lost_compiles = field_validator("client_lost")(lambda v: _compiled(v, "client_lost"))
    _client_hung_compiles = field_validator("client_hung")(lambda v: _compiled(v, "client_hung"))

    @model_validator(mode="after")
    def _names_the_server(self) -> OneNode:
        if self.client_lost and "(?P<server>" not in self.client_lost:
            raise ValueError("client_lost needs a named group `server`")
        if bool(self.client_lost) != bool(self.client_hung):
            raise ValueError("client_lost and client_hung go together")
        return self


class Label(Strict):
    title: str
    priority: int = Field(50, ge=0, le=100)
    """When several labels match, the highest wins: causes outrank their symptoms."""
    root_cause: Literal["job", "node", "cluster", "upstream"] = "job"
    job_when_fixed: bool = False
    """The root cause is the job when its own settings fix it (a cache pointed at a full disk
    while a roomy one sits empty); the label's root_cause holds when nothing could be computed."""
    retriable: bool = False
    team: Team | None = None
    symptom: bool = False
    """A symptom (e.g. an NCCL timeout) whose cause may lie elsewhere: investigate further."""
    signals: list[Signal]
    investigate: list[Step] = Field(default_factory=list)
    remedy: Remedy
    shared_after_jobs: int | None = Field(None, ge=2)
    """A job's fault that is shared once this many jobs show it (one credential, one secret, one
    service account used by all): the root cause is then the cluster, not the job asked about."""
    one_node: OneNode | None = None
    """The error may be confined to one node's client; see OneNode."""
    analysis: Literal["demand_forecast", "idle_gpus", "binding_constraint", "autoscaler_at_max", "priority_factors"] | None = None
    """A computed answer (capacity reviews) that replaces the evidence lines in the report."""

    @field_validator("signals")
    @classmethod
    def _not_empty(cls, v: list[Signal]) -> list[Signal]:
        if not any(not s.rules_out for s in v):
            raise ValueError("a label needs at least one signal that is not rules_out")
        return v

    @model_validator(mode="after")
    def _captures_exist(self) -> Label:
        # A change that reads a captured value must name a group some signal defines,
        # or it silently falls back to its arithmetic forever.
        groups = {g for s in self.signals if s.pattern for g in re.compile(s.pattern).groupindex}
        for key, change in self.remedy.changes.items():
            if change.along_with and change.along_with not in self.remedy.changes:
                raise ValueError(f"remedy change {key!r} goes along with {change.along_with!r}, which the remedy does not change")
            if change.capture and change.capture not in groups:
                raise ValueError(f"remedy change {key!r} captures {change.capture!r}, "
                                 f"which no signal pattern names (groups: {sorted(groups) or 'none'})")
        return self


class Playbook(Strict):
    family: Literal[
        "memory", "distributed", "hardware", "scheduling", "ray", "storage",
        "stuck", "capacity", "user_code", "none",
    ]
    description: str | None = None
    labels: dict[str, Label]
