"""What the scheduler gave a job, per node: the GPUs each of its nodes (pods) really has."""

from __future__ import annotations

from crashcart.agent.policies.config_keys import load_key_table
from crashcart.agent.policies.evidence import Evidence


def gpus_each_node(ev: Evidence, job: str) -> int | None:
    """The GPUs each node (each pod) of the job was given: one launcher process per GPU.

    A pod gets exactly its container's GPU limit from the device plugin, and sbatch's
    --gpus-per-node is what each node's allocation holds, so the job's own key for it wins when
    every place it is given agrees (a PyTorchJob's Master and Worker); then the pod's limit as
    `kubectl describe pod` lists it; without either, the job's GPUs
    in all (sacct's AllocTRES) over its nodes, when they divide evenly. Several pods can share a
    node, so a pod's limit is the better unit wherever there is one. None when nothing says."""
    given = {_count(f.value) for f in load_key_table().find(ev.configs.get(job, {}), "gpus_allocated_per_node")}
    given.discard(None)
    if len(given) == 1:
        return given.pop()
    if given:
        return None  # replica types given different GPUs: no one count for every node
    facts = ev.jobs.get(job)
    if facts and facts.gpus_per_pod:
        return facts.gpus_per_pod  # the pod's limit as `kubectl describe pod` lists it
    if not facts or not facts.gpus or not facts.nodes:
        return None
    per, rest = divmod(facts.gpus, len(facts.nodes))
    return per if per and not rest else None


def _count(value: object) -> int | None:
    """A GPU count as configs write it: 4, or a Kubernetes quantity string "4"."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value) or None
    return None
