"""Values a fix computes from what the tools returned (a playbook change's `compute:`).

Each returns the value in its setting's canonical unit (bytes for memory), or None when the
evidence does not hold it: a remedy never guesses, it escalates with what it saw.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from typing import Any, Callable

from crashcart.agent.policies.allocation import gpus_each_node
from crashcart.agent.policies.config_keys import load_key_table, parse_duration, parse_size
from crashcart.agent.policies.evidence import Evidence
from crashcart.agent.policies.matching import _config_value
from crashcart.agent.policies.probes import port_the_container_serves, probe_delay_from_startup
from crashcart.agent.policies.image_cuda import image_the_driver_supports
from crashcart.agent.policies.storage_class import storage_class_that_exists

# How alike a selector value and a node's label value must be to call the difference a typo
# ("gpu-h100-ondemand" for "gpu-h100-on-demand"), not another product or pool.
TYPO_SIMILARITY = 0.88
# A model number: the letters before its digits and the digits ("h100", "a10g", "80gb" -> ("", "80")).
_MODEL_NUMBER = re.compile(r"(?<![a-z0-9])([a-z]*)(\d+)")


def _same_product(value: str, option: str) -> bool:
    """The same model numbers: "h100" for "a100" or "l40s" for "l4" is alike as text but another
    GPU, while "80g" for "80gb" is the same size misspelt. The letters after the digits are the
    unit or variant (gb, g, s), compared as text by the similarity score, not here."""
    return set(_MODEL_NUMBER.findall(value.lower())) == set(_MODEL_NUMBER.findall(option.lower()))


def _gpu_models(text: str) -> set[tuple[str, str]]:
    """The GPU model numbers a text names: letters then digits ("a100", "h100", "l40"), not a bare
    size or index ("80" of 80gb, "2" of pool-2)."""
    return {(letters, digits) for letters, digits in _MODEL_NUMBER.findall(text.lower()) if letters}


def _names_the_nodes_gpu(value: str, option: str, free: list[dict[str, Any]], key: str) -> bool:
    """The selector's value names the GPU model that the option's nodes really have, in another
    vendor's spelling ("nvidia-tesla-a100" for nodes labelled "nvidia-a100-80gb" whose nvidia-smi
    says A100): every model number of the value is in the option and in those nodes' GPU model.
    A value naming a size or variant the option lacks ("a100-40gb" for "a100-80gb") is another
    product, so it does not count."""
    wanted = _gpu_models(value)
    if not wanted:
        return False
    extra = {d for letters, d in _MODEL_NUMBER.findall(value.lower()) if not letters}
    have = set(_MODEL_NUMBER.findall(option.lower()))
    if not wanted <= have or not extra <= {d for _, d in have}:
        return False
    carriers = [row for row in free if str((row.get("labels") or {}).get(key)) == option]
    models = [str(row.get("gpu_model") or "") for row in carriers]
    return bool(models) and all(m and wanted <= _gpu_models(m) for m in models)


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
    """The GPUs the scheduler really gave each node (each pod): one process per GPU."""
    return gpus_each_node(ev, job)


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
    """The newest checkpoint known to be whole (see _newest_complete), for the job's resume path;
    None when the job takes the step apart (Megatron's `ckpt_step` next to `load`) and its resume
    path names no step: that path is the run directory the trainer finds its checkpoints in, and
    the step key carries the fix."""
    current = _resume_value(ev, job)
    if _declares_resume_step(ev, job) and (not current or _step_of(current) is None):
        return None
    return _newest_complete(ev, job)


def _declares_resume_step(ev: Evidence, job: str) -> bool:
    # Declared counts, null included (`ckpt_step: null` is a key the job reads), wherever it nests.
    return bool(load_key_table().find(ev.configs.get(job, {}), "resume_step"))


def _newest_complete(ev: Evidence, job: str) -> str | None:
    """The newest checkpoint known to be whole: the one before the latest (which the failure
    points at) from the progress record; without one, the newest save the job's log (earlier
    attempts included) reports finished, written in the job's own path: its resume path with
    that step put in place of the broken one (`.../checkpoint-6000` -> `.../checkpoint-5500`)."""
    _, checkpoints = ev.progress.get(job, ([], []))
    ordered = sorted(checkpoints, key=lambda c: c.step)
    if len(ordered) >= 2 and ordered[-2].path:
        return ordered[-2].path
    logs = [d for d in ev.docs if d.source in {"log", "attempt_log"} and d.entity == f"job:{job}"]
    broken = {m.group("path").rstrip(".:") for d in logs for line in d.lines if _BROKEN.search(line)
              for m in re.finditer(r"(?P<path>/[^\s'\",]+)", line)}
    saved = [m.group("path").rstrip(".:") for d in logs for line in d.lines if not _BROKEN.search(line)
             for m in _SAVED.finditer(line)]
    whole = [p for p in saved if not any(p == b or b.startswith(p + "/") or p.startswith(b + "/") for b in broken)]
    current = _resume_value(ev, job)
    if current and _step_of(current) is not None:
        # The checkpoint the job failed to load is the broken one, whatever parts of it were saved.
        whole = [p for p in whole if (_step_of(p) if _step_of(p) is not None else -1) < _step_of(current)]
    if not whole:
        return None
    newest = max(whole, key=lambda p: _step_of(p) or -1) if any(_step_of(p) is not None for p in whole) else whole[-1]
    step = _step_of(newest)
    if current and step is not None and _step_of(current) is not None:
        m = list(_STEP.finditer(current))[-1]
        digits = m.group("n")
        return current[:m.start("n")] + str(step).zfill(len(digits) if digits.startswith("0") else 0) + current[m.end("n"):]
    return newest


def newest_complete_step(ev: Evidence, job: str, captures: dict[str, str], margin: float | None) -> Any:
    """The step of the newest checkpoint known to be whole (see newest_complete_checkpoint), for a
    trainer that takes the step apart from its checkpoint directory (Megatron's --ckpt-step)."""
    path = _newest_complete(ev, job)
    return _step_of(path) if isinstance(path, str) else None


def newest_complete_in_resume_path(ev: Evidence, job: str, captures: dict[str, str], margin: float | None) -> Any:
    """The job's resume path with the whole checkpoint's step put in, only when that path names a
    step: a run directory (Megatron's `load`) is where the trainer finds its own tracker file. A
    resume key the job declares empty (`resume_from_checkpoint: null`: it starts fresh or picks
    the newest directory, the torn one) gets the whole checkpoint's own path, when that names a
    step and the job has no step key of its own."""
    current = _resume_value(ev, job)
    if not current:
        if _declares_resume_step(ev, job):
            return None
        path = _newest_complete(ev, job)
        return path if isinstance(path, str) and _step_of(path) is not None else None
    if _step_of(current) is None:
        return None
    return _newest_complete(ev, job)


# A step number as trainers put it in checkpoint paths: checkpoint-5500, step_12000, global_step1200,
# iter_0004000, epoch=3-step=12000.
_STEP = re.compile(r"(?:checkpoint|ckpt|step|global_step|iter|iteration)[-_=]?(?P<n>\d+)", re.I)


def _step_of(path: str) -> int | None:
    found = list(_STEP.finditer(path))
    return int(found[-1].group("n")) if found else None


def _resume_value(ev: Evidence, job: str) -> str | None:
    config = ev.configs.get(job, {})
    for key in load_key_table().settings["resume_checkpoint"].keys:
        value = _config_value(config, key.key)
        if isinstance(value, str) and value:
            return value
    return None


def selector_as_idle_nodes_carry(ev: Evidence, job: str, captures: dict[str, str], margin: float | None) -> Any:
    """The job's node selector with each value no node carries replaced by the one idle GPU nodes
    carry under the same label, when it is the same word misspelt (a pool name's typo), or when
    the last successful run of the same job used it; never a different product or pool that
    nothing proves: that is the owner's choice, so it escalates."""
    return _corrected_selector(ev, job, earlier_runs=True)


def selector_needs_more_than_a_typo(ev: Evidence) -> bool:
    """A focus job's selector names a value no node carries, and no misspelling explains it: its
    earlier good runs are worth reading."""
    for job in ev.focus_jobs():
        selector = _selector(ev, job)
        carried = {(k, str(v)) for row in ev.nodes.values() for k, v in (row.get("labels") or {}).items()}
        if selector and ev.nodes and any((k, str(v)) not in carried for k, v in selector.items()) \
                and _corrected_selector(ev, job, earlier_runs=False) is None:
            return True
    return False


def _selector(ev: Evidence, job: str) -> dict[str, Any] | None:
    keys = load_key_table().settings["node_selector"].keys
    return next((v for k in keys if isinstance(v := _config_value(ev.configs.get(job, {}), k.key), dict)), None)


def _corrected_selector(ev: Evidence, job: str, earlier_runs: bool) -> dict[str, Any] | None:
    selector = _selector(ev, job)
    if not selector or not ev.nodes:
        return None
    carried = {(k, v) for row in ev.nodes.values() for k, v in (row.get("labels") or {}).items()}
    # In service with GPUs to spare: a drained or cordoned node's labels are no evidence of where to go.
    free = [row for row in ev.nodes.values()
            if row.get("gpus") and str(row.get("state", "")).lower() in {"idle", "mixed", "ready"}]
    before = [sel for run in ev.earlier_good_runs(job) if (sel := _selector(ev, run))] if earlier_runs else []
    corrected = dict(selector)
    for key, value in selector.items():
        if (key, str(value)) in carried:
            continue
        options = {str((row.get("labels") or {})[key]) for row in free if key in (row.get("labels") or {})}
        scored = sorted(((SequenceMatcher(None, str(value).lower(), o.lower()).ratio(), o)
                         for o in options if _same_product(str(value), o)), reverse=True)
        same_gpu = sorted({o for o in options if _names_the_nodes_gpu(str(value), o, free, key)})
        if scored and scored[0][0] >= TYPO_SIMILARITY and not (len(scored) > 1 and scored[1][0] == scored[0][0]):
            corrected[key] = scored[0][1]
        elif len(same_gpu) == 1:
            corrected[key] = same_gpu[0]
        elif before and key in before[0] and str(before[0][key]) in options:
            corrected[key] = before[0][key]  # what the last good run used, and free nodes still carry
        else:
            return None
    return corrected if corrected != selector else None


def partition_max_time(ev: Evidence, job: str, captures: dict[str, str], margin: float | None) -> Any:
    """The partition's MaxTime, for a job that pends because it asked for more (PartitionTimeLimit)
    and that checkpoints, so it resumes across runs of the longest time the partition allows."""
    facts = ev.jobs.get(job)
    if not facts or not facts.partition or "timelimit" not in (facts.reason or "").lower().replace("_", ""):
        return None
    # Only a job that checkpoints gets shorter runs: anything else would lose its work at MaxTime.
    config = ev.configs.get(job, {})
    if not any(_config_value(config, k.key) not in (None, False, 0, "", "no", "false")
               for k in load_key_table().settings["checkpointing"].keys):
        return None
    limit = (ev.partitions.get(facts.partition) or {}).get("max_time")
    return parse_duration(limit, "slurm_time") if limit and str(limit).upper() != "UNLIMITED" else None


def cpus_left_for_gpu_actors(ev: Evidence, job: str, captures: dict[str, str], margin: float | None) -> Any:
    """Each CPU stage's concurrency that leaves every GPU its actor's CPUs, by the stage's path in
    the job's config: the cluster's CPUs (Ray Data's accounting line, else the running nodes `ray
    status` lists) less one actor per GPU times
    the CPUs each asks for (the autoscaler's pending bundle) is what the CPU stages may hold
    together, each task or actor taking its stage's num_cpus (one when it names none). Stages with
    a concurrency share it in proportion to what they ask now; a stage without one (unbounded)
    gets what the others leave. Empty when the accounting is missing or the stages already fit."""
    try:
        each = float(captures.get("cpu_each") or 1)
        if "cpus_total" in captures and "gpus_total" in captures:
            total, gpus = float(captures["cpus_total"]), float(captures["gpus_total"])
        else:
            total, gpus = _running_totals(ev)
    except (KeyError, ValueError, TypeError):
        return {}
    config = ev.configs.get(job, {})
    table = load_key_table()
    stages = {f.path: f.value for f in table.find(config, "ray_data_cpu_stage_concurrency")
              if f.value is None or (isinstance(f.value, (int, float)) and not isinstance(f.value, bool))}
    sizes = [(f.path, f.value) for f in table.find(config, "ray_data_cpu_stage_cpus")
             if isinstance(f.value, (int, float)) and not isinstance(f.value, bool) and f.value > 0]

    def cpus(path: str) -> float:
        # The stage's own key first: preprocess_concurrency goes with preprocess_num_cpus,
        # tokenize.concurrency with tokenize.num_cpus.
        stage = path[: -len("concurrency")] if path.endswith("concurrency") else None
        return next((v for k, v in sizes if stage and k.startswith(stage)), sizes[0][1] if len(sizes) == 1 else 1)

    left = total - gpus * each
    asked = {p: v * cpus(p) for p, v in stages.items() if v is not None}
    unbounded = [p for p, v in stages.items() if v is None]
    if len(unbounded) > 1:
        return {}  # how to split the CPUs between stages that ask for all of them is the owner's call
    if unbounded:
        cap = int((left - sum(asked.values())) // cpus(unbounded[0]))
        return {unbounded[0]: cap} if cap >= 1 else {}
    if not asked or sum(asked.values()) <= left:
        return {}
    share = left / sum(asked.values())
    caps = {p: int(stages[p] * share) for p in asked}
    return {p: cap for p, cap in caps.items() if 1 <= cap < stages[p]}


def _running_totals(ev: Evidence) -> tuple[float, float]:
    """The CPUs and GPUs of the nodes `ray status` shows running (each node type's resources times
    its running count); KeyError when it was not read or shows no CPUs."""
    types = (ev.limits.get("autoscaler") or {}).get("node_types") or []
    cpus = sum(float((t.get("resources") or {}).get("CPU") or 0) * int(t.get("running") or 0) for t in types)
    gpus = sum(float((t.get("resources") or {}).get("GPU") or 0) * int(t.get("running") or 0) for t in types)
    if not cpus or not gpus:
        raise KeyError("autoscaler")
    return cpus, gpus


def cpus_per_worker_that_fit(ev: Evidence, job: str, captures: dict[str, str], margin: float | None) -> Any:
    """The CPUs per worker that let every bundle of an infeasible request ({'CPU': c, 'GPU': g} * n)
    fit: the GPU nodes' CPUs per GPU times g, less the request's other bundles (the trainer's).
    The nodes' CPUs come from the autoscaler's node types when read, else from `ray status`'s CPU
    and GPU totals. None when the GPUs themselves do not suffice (then CPUs are not the problem)."""
    from crashcart.agent.policies.constraint import ray_status

    try:
        cpu_each, gpu_each, bundles = float(captures["cpu_each"]), float(captures["gpu_each"]), int(captures["bundles"])
    except (KeyError, ValueError):
        return None
    if gpu_each <= 0:
        return None
    others = sum(float(c) for c in re.findall(r"\{'CPU': ([\d.]+)\} \* \d+", captures.get("request", "")))
    types = [t for t in (ev.limits.get("autoscaler") or {}).get("node_types") or []
             if (t.get("resources") or {}).get("GPU") and (t.get("resources") or {}).get("CPU")]
    if types:
        per_gpu = min(t["resources"]["CPU"] / t["resources"]["GPU"] for t in types)
        gpus = sum(t["resources"]["GPU"] * max(t.get("running", 0), t.get("max_workers", 0)) for t in types)
        fit = int(per_gpu * gpu_each)
    else:
        docs = [d for d in ev.docs if d.source == "log" and d.entity == f"job:{job}"]
        status = next((st for d in reversed(docs) if (st := ray_status(d.text))), None)
        cpus, gpus = (status or {}).get("usage", {}).get("CPU", (0, 0))[1], (status or {}).get("usage", {}).get("GPU", (0, 0))[1]
        if not cpus or not gpus:
            return None
        # The cluster's CPUs per GPU after the request's other bundles: an upper bound when a
        # GPU-less head holds CPUs too, which the arithmetic below keeps (floor, and the trainer's share out).
        fit = int((cpus - others) / gpus * gpu_each)
    if bundles * gpu_each > gpus or fit < 1 or fit >= cpu_each:
        return None
    return fit


# Taints the node controller puts on a node that is unwell: tolerating one hides the fault.
_NODE_CONDITION_TAINT = re.compile(r"^node\.(kubernetes\.io|cloudprovider\.kubernetes\.io)/")


def toleration_for_blocking_taint(ev: Evidence, job: str, captures: dict[str, str], margin: float | None) -> Any:
    """The job's tolerations with the one for the taint that blocks it (the scheduler's
    `had untolerated taint {key: value}`) added, taken from where it is known to be right: an
    earlier run of the same job that succeeded, or another replica type of the same job that
    carries it (a PyTorchJob's Master but not its Workers). None when neither does: whether a
    job may use a tainted (dedicated) pool is the owner's or the platform's call."""
    key, value = captures.get("taint_key", "").strip(), captures.get("taint_value", "").strip()
    if not key or _NODE_CONDITION_TAINT.match(key):
        return None
    config = ev.configs.get(job, {})
    setting = load_key_table().settings["tolerations"]
    found = next(((k.key, v) for k in setting.keys if isinstance(v := _config_value(config, k.key), (list, dict))), None)
    if found is None:
        return None
    _, current = found

    def fits(tol: Any) -> bool:
        return (isinstance(tol, dict) and tol.get("key") == key
                and (tol.get("operator") == "Exists" or str(tol.get("value", "")) == value))

    def carried(tolerations: Any) -> list[dict[str, Any]]:
        lists = tolerations.values() if isinstance(tolerations, dict) else [tolerations]
        return [t for group in lists if isinstance(group, list) for t in group if fits(t)]

    proven = []
    for run in ev.earlier_good_runs(job):
        earlier = ev.configs.get(run, {})
        proven = carried(next((v for k in setting.keys if (v := _config_value(earlier, k.key)) is not None), None))
        if proven:
            break
    if not proven and isinstance(current, dict):
        proven = carried(current)
    if not proven:
        return None
    if isinstance(current, list):
        return None if carried(current) else [*current, proven[0]]
    fixed = {replica: (tols if carried(tols) else [*(tols or []), proven[0]]) for replica, tols in current.items()}
    return fixed if fixed != current else None


def rdma_devices_of_good_run(ev: Evidence, job: str, captures: dict[str, str], margin: float | None) -> Any:
    """The RDMA devices the owner's run that succeeded in the same partition (namespace) asked for,
    the job's own earlier runs first: a job that asks for none gets no verbs device in its pods and
    NCCL falls back to sockets. None when no such run asked for one: how many devices (a shared
    device, or one per NIC) a pool's pods take is the platform's to say, never a guess."""
    keys = load_key_table().settings["rdma_devices"].keys
    for run in ev.owner_good_runs(job):
        earlier = ev.configs.get(run, {})
        value = next((v for k in keys if (v := _config_value(earlier, k.key)) is not None), None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1:
            return value
    return None


def path_on_roomiest_disk(ev: Evidence, job: str, captures: dict[str, str], margin: float | None) -> Any:
    """The job's spill/scratch path moved to the node's largest empty local disk (df): the same
    relative path under that disk's mount point. None unless that disk has several times the free
    space of the one the path is on now (a network filesystem or tmpfs never counts). A job whose
    spill key is declared but empty spills to its runtime's default, the directory the error
    names as full (named group `full_path`)."""
    config = ev.configs.get(job, {})
    current = next((v for k in load_key_table().settings["spill_directory"].keys
                    if isinstance(v := _config_value(config, k.key), str) and v.startswith("/")), None)
    current = current or default_directory(captures.get("full_path"))
    return relocated_path(ev, job, current) if current else None


# A runtime's per-run directory under its temp root (Ray's session_2026-11-07_07-58-31_804410_1,
# session_latest): the next run gets a new one, so a spill directory stops above it.
_PER_RUN_DIR = re.compile(r"/session_[^/]+(/.*)?$")


def default_directory(full: str | None) -> str | None:
    """The directory an error named as full, above the runtime's per-run directory."""
    if not full or not full.startswith("/"):
        return None
    return _PER_RUN_DIR.sub("", full.rstrip("/")) or None


def relocated_path(ev: Evidence, job: str, current: str) -> str | None:
    """`current` (a directory the job writes) moved under the roomiest local disk of its nodes.

    The disks are what `df` returned for each node; a node whose disks the tools did not show
    falls back to the `df` the job printed in its own log (a prolog or an entrypoint's `df -h`),
    the newest row per mount winning, since that is the disk the job itself saw."""
    facts = ev.jobs.get(job)
    if not facts or not isinstance(current, str) or not current.startswith("/"):
        return None
    own_df = job_df_rows(ev, job)
    best: tuple[float, str, str] | None = None
    for node in facts.nodes or [None]:
        seen = (ev.disks.get(node) or []) if node else []
        seen = seen if any(_local_disk(m) for m in seen) else own_df
        mounts = [m for m in seen if _local_disk(m)]
        if not mounts:
            return None  # a node whose disks were not seen: no guess
        # The full disk may be a network one (a home directory over NFS); the room it moves to is
        # always a local disk.
        holding = max((m for m in seen if _under(current, m["mounted_on"]) and _writable_mount(m)),
                      key=lambda m: len(m["mounted_on"]), default=None)
        roomiest = max(mounts, key=lambda m: m["avail_bytes"])
        if holding is None or roomiest["mounted_on"] == holding["mounted_on"]:
            return None
        if roomiest["avail_bytes"] < ROOMIER * max(holding["avail_bytes"], 1):
            return None
        if roomiest["avail_bytes"] < (holding.get("size_bytes") or 0):
            return None  # what filled the old disk would not fit on the new one either
        candidate = (roomiest["avail_bytes"], roomiest["mounted_on"], holding["mounted_on"])
        if best is not None and candidate[1] != best[1]:
            return None  # the nodes disagree on where the room is: not one path for all
        best = candidate
    if best is None:
        return None
    _, target, old_mount = best
    relative = current[len(old_mount):].lstrip("/") if old_mount != "/" else current.lstrip("/")
    return f"{target.rstrip('/')}/{relative}".rstrip("/")


def job_df_rows(ev: Evidence, job: str) -> list[dict[str, Any]]:
    """The `df` tables the job printed in its logs, one row per mount, the newest row winning."""
    from crashcart.tools.diskfree import parse_df

    rows: dict[str, dict[str, Any]] = {}
    for doc in ev.docs:
        if doc.source in {"log", "attempt_log"} and doc.entity == f"job:{job}" and "Mounted on" in doc.text:
            for mount in parse_df(doc.text):
                rows[mount.mounted_on] = mount.model_dump()
    return list(rows.values())


# How much more free space a disk needs to be worth moving a path to.
ROOMIER = 4
# RAM-backed and network filesystems are not a disk to spill to (a container's overlay is the
# node's own root disk, so it counts).
_NOT_LOCAL = re.compile(r"^(tmpfs|devtmpfs|shm|none|udev)$|:|^//", re.I)


def _local_disk(mount: dict[str, Any]) -> bool:
    # A block device or the container's overlay; a parallel filesystem's bare name (GPFS "gpfs01",
    # BeeGFS "beegfs_nodev") is the network, however much room it shows.
    fs = str(mount.get("filesystem", ""))
    return (not _NOT_LOCAL.search(fs) and (fs.startswith("/dev/") or fs == "overlay")
            and not str(mount.get("mounted_on", "")).startswith(("/dev", "/sys", "/proc", "/run", "/boot")))


def _writable_mount(mount: dict[str, Any]) -> bool:
    """A mount a job's files live on (not a pseudo filesystem of the kernel's)."""
    return not str(mount.get("mounted_on", "")).startswith(("/dev", "/sys", "/proc", "/run", "/boot"))


def _under(path: str, mount: str) -> bool:
    return mount == "/" or path == mount or path.startswith(mount.rstrip("/") + "/")


# The interface NCCL picked, as its INFO lines print it: "Bootstrap : Using ens21f0np0:10.1.2.3<0>",
# "NET/Socket : Using [0]eth0:10.1.2.3<0>", "... OOB ens21f0np0:10.1.2.3<0>".
_NCCL_INTERFACE = re.compile(r"NCCL INFO (?:Bootstrap ?: Using|NET/Socket ?: Using \[\d+\]|NET/IB ?: Using .*\bOOB) ?"
                             r"([A-Za-z][\w.-]*):[\d.:a-fA-F]+<\d+>")


def interface_peers_use(ev: Evidence, job: str, captures: dict[str, str], margin: float | None) -> Any:
    """The interface NCCL found on other jobs of the job's partition (their own INFO lines), when
    they all agree on one; None when none printed one or they disagree."""
    peers = {f"job:{j}" for j in ev.partition_jobs()}
    names = {m.group(1) for doc in ev.docs if doc.source == "log" and doc.entity in peers
             for m in _NCCL_INTERFACE.finditer(doc.text)}
    return names.pop() if len(names) == 1 else None


# Computes that give each key of the setting its own value, by the key's path in the job's config.
PER_KEY = {"cpus_left_for_gpu_actors"}

# Values only another run of the job (or another replica) can prove: never computable from a log.
FROM_OTHER_RUNS = {"toleration_for_blocking_taint", "rdma_devices_of_good_run"}

COMPUTE: dict[str, Callable[[Evidence, str, dict[str, str], float | None], Any]] = {
    "gpus_per_node": gpus_per_node,
    "above_peak": above_peak,
    "half_precision": half_precision,
    "newest_complete_checkpoint": newest_complete_checkpoint,
    "selector_as_idle_nodes_carry": selector_as_idle_nodes_carry,
    "partition_max_time": partition_max_time,
    "cpus_left_for_gpu_actors": cpus_left_for_gpu_actors,
    "path_on_roomiest_disk": path_on_roomiest_disk,
    "cpus_per_worker_that_fit": cpus_per_worker_that_fit,
    "toleration_for_blocking_taint": toleration_for_blocking_taint,
    "rdma_devices_of_good_run": rdma_devices_of_good_run,
    "port_the_container_serves": port_the_container_serves,
    "probe_delay_from_startup": probe_delay_from_startup,
    "storage_class_that_exists": storage_class_that_exists,
    "image_the_driver_supports": image_the_driver_supports,

    "interface_peers_use": interface_peers_use,
    "newest_complete_step": newest_complete_step,
    "newest_complete_in_resume_path": newest_complete_in_resume_path,
}
