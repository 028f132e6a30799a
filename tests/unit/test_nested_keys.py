"""A fix lands on the key the job reads wherever its config nests it: under a framework's block
(DeepSpeed's, a Lightning trainer's), in the env block the job (or its backend) keeps variables
in, on a Ray Data stage named by its shape, and on the launcher's processes per node as the
allocation says. A key the job does not have is still never added (env vars aside)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from crashcart.agent.policies.allocation import gpus_each_node
from crashcart.agent.policies.config_keys import KeyTable, config_paths, load_key_table
from crashcart.agent.policies.evidence import Evidence, JobFacts
from crashcart.agent.policies.remedy import compute_changes
from crashcart.playbooks import Remedy, load_playbooks
from crashcart.tools.backends.base import set_dotted


def _ev(config: dict, gpus: int = 0, nodes: list[str] | None = None) -> Evidence:
    ev = Evidence(now=None, trigger={"kind": "job_failed", "job": "j1"})
    ev.configs = {"j1": config}
    ev.jobs = {"j1": JobFacts(job="j1", state="FAILED", gpus=gpus, nodes=nodes or [])}
    return ev


def _remedy(label: str) -> Remedy:
    return load_playbooks()[label].label.remedy


# --- where a key sits ------------------------------------------------------------------------

def test_flat_and_nested_spellings_have_one_path():
    assert config_paths({"a.b": 1, "c": {"d": {"e": None}}}) == {"a.b": 1, "c": {"d": {"e": None}}, "c.d": {"e": None}, "c.d.e": None}


@pytest.mark.parametrize("config, path", [
    ({"train_micro_batch_size_per_gpu": 16}, "train_micro_batch_size_per_gpu"),
    ({"deepspeed": {"train_micro_batch_size_per_gpu": 16}}, "deepspeed.train_micro_batch_size_per_gpu"),
    # Any depth: Ray Train's train_loop_config carrying a DeepSpeed block.
    ({"train_loop_config": {"deepspeed": {"train_micro_batch_size_per_gpu": 16}}},
     "train_loop_config.deepspeed.train_micro_batch_size_per_gpu"),
    ({"deepspeed.train_micro_batch_size_per_gpu": 16}, "deepspeed.train_micro_batch_size_per_gpu"),
])
def test_a_key_is_found_under_any_chain_of_nesting_blocks(config, path):
    assert [f.path for f in load_key_table().find(config, "per_gpu_batch")] == [path]


def test_a_block_that_is_not_a_framework_s_is_not_the_setting():
    # An eval loop's own batch is not the per-GPU training batch, nor is a Ray Data stage's.
    table = load_key_table()
    assert table.find({"eval": {"batch_size": 64}, "embed": {"batch_size": 256}}, "per_gpu_batch") == []


def test_the_micro_batch_is_halved_where_deepspeed_keeps_it_and_accumulation_keeps_the_global_batch():
    changes, _ = compute_changes(_remedy("cuda_oom"), _ev({
        "deepspeed": {"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 2,
                      "bf16": {"enabled": True}},
        "gradient_checkpointing": True}), "j1")
    assert changes == {"deepspeed.train_micro_batch_size_per_gpu": 8, "deepspeed.gradient_accumulation_steps": 4}


def test_a_deepspeed_config_that_is_a_file_path_has_no_key_to_change():
    # `deepspeed: ds_zero2.json` keeps the batch in a file crashcart never read: no key, no fix.
    changes, _ = compute_changes(_remedy("cuda_oom"), _ev({"deepspeed": "ds_zero2.json", "max_seq_len": 4096}), "j1")
    assert changes == {}


# --- environment variables -------------------------------------------------------------------

@pytest.mark.parametrize("config, backend, path", [
    ({"runtime_env": {"env_vars": {"NCCL_DEBUG": "WARN"}}}, "ray", "runtime_env.env_vars.PYTORCH_CUDA_ALLOC_CONF"),
    ({"runtime_env": {"pip": ["torch"]}}, "ray", "runtime_env.env_vars.PYTORCH_CUDA_ALLOC_CONF"),
    ({"env": {"NCCL_DEBUG": "WARN"}}, "ray", "env.PYTORCH_CUDA_ALLOC_CONF"),   # the job's own block wins
    ({"batch_size": 4}, "slurm", "env.PYTORCH_CUDA_ALLOC_CONF"),
    ({"batch_size": 4}, "kubernetes", "env.PYTORCH_CUDA_ALLOC_CONF"),
    ({"environment": {"OMP_NUM_THREADS": "8"}}, "slurm", "environment.PYTORCH_CUDA_ALLOC_CONF"),
])
def test_a_new_env_var_goes_where_the_job_or_its_backend_keeps_variables(config, backend, path):
    remedy = Remedy.model_validate({"kind": "resubmit_with_changes",
                                    "changes": {"pytorch_alloc_conf": {"set": "expandable_segments:True"}}})
    ev = _ev(config)
    assert compute_changes(remedy, ev, "j1", backend=backend)[0] == {path: "expandable_segments:True"}


def test_an_env_var_the_job_already_sets_is_changed_where_it_is():
    remedy = Remedy.model_validate({"kind": "resubmit_with_changes", "changes": {"env.NCCL_P2P_DISABLE": {"set": "1"}}})
    ev = _ev({"runtime_env": {"env_vars": {"NCCL_P2P_DISABLE": "0"}}})
    assert compute_changes(remedy, ev, "j1", backend="ray")[0] == {"runtime_env.env_vars.NCCL_P2P_DISABLE": "1"}


def test_the_env_rule_must_add_to_a_block_it_knows():
    with pytest.raises(ValidationError, match="not one of the env blocks"):
        KeyTable.model_validate({"settings": {}, "env": {"blocks": ["env"], "add_to": {"ray": "runtime_env.env_vars"}}})


# --- keys named by their shape ---------------------------------------------------------------

def test_the_cpu_stage_is_the_block_without_gpus_nested_or_flat():
    table = load_key_table()
    nested = {"tokenize": {"concurrency": None, "num_cpus": 1}, "embed": {"concurrency": 4, "num_gpus": 1, "num_cpus": 2}}
    flat = {"preprocess.concurrency": 384, "preprocess.num_cpus": 1, "embed.concurrency": 32, "embed.num_gpus": 1}
    assert [f.path for f in table.find(nested, "ray_data_cpu_stage_concurrency")] == ["tokenize.concurrency"]
    assert [f.path for f in table.find(flat, "ray_data_cpu_stage_concurrency")] == ["preprocess.concurrency"]
    assert [f.path for f in table.find(nested, "ray_data_cpu_stage_cpus")] == ["tokenize.num_cpus"]
    # A stage given a share of a GPU is a GPU stage.
    assert table.find({"detect": {"concurrency": 8, "num_gpus": 0.5}}, "ray_data_cpu_stage_concurrency") == []


def test_a_cpu_stage_s_concurrency_is_capped_with_its_own_num_cpus():
    ev = _ev({"read": {"concurrency": 200, "num_cpus": 2}, "detect": {"concurrency": 16, "num_gpus": 1, "num_cpus": 4}})
    captures = {"cpus_total": "256", "gpus_total": "16", "cpu_each": "4"}
    changes, _ = compute_changes(_remedy("ray_data_gpu_actors_starved_of_cpu"), ev, "j1", captures)
    # (256 - 16 GPU actors x 4 CPUs) / 2 CPUs per read task = 96; the GPU stage stays as it is.
    assert changes == {"read.concurrency": 96}


def test_several_cpu_stages_share_what_the_gpu_actors_leave():
    ev = _ev({"read": {"concurrency": 200, "num_cpus": 2}, "clean": {"concurrency": 50, "num_cpus": 1},
              "detect": {"concurrency": 16, "num_gpus": 1, "num_cpus": 4}})
    captures = {"cpus_total": "256", "gpus_total": "16", "cpu_each": "4"}
    changes, _ = compute_changes(_remedy("ray_data_gpu_actors_starved_of_cpu"), ev, "j1", captures)
    # 192 CPUs left for 450 asked: each stage keeps the same share of what it asked, and no stage
    # is ever raised; together they fit.
    assert changes == {"read.concurrency": 85, "clean.concurrency": 21}
    assert 85 * 2 + 21 * 1 <= 192
    # An unbounded stage (concurrency: null) gets what the bounded ones leave.
    ev.configs["j1"]["read"]["concurrency"] = None
    assert compute_changes(_remedy("ray_data_gpu_actors_starved_of_cpu"), ev, "j1", captures)[0] == {"read.concurrency": 71}


@pytest.mark.parametrize("bad, why", [
    ({"key": "stage*.concurrency"}, "one whole segment"),
    ({"key": "preprocess.*"}, "never the last"),
    ({"key": "preprocess.concurrency", "siblings": {"num_gpus": "zero"}}, "named by its shape"),
])
def test_shape_keys_are_validated(bad, why):
    with pytest.raises(ValidationError, match=why):
        KeyTable.model_validate({"settings": {"a": {"description": "a", "kind": "count", "keys": [bad]}}})


# --- processes per node ----------------------------------------------------------------------

def test_a_pods_gpu_limit_is_what_each_pod_got_even_when_pods_share_nodes():
    # 4 pods of 4 GPUs on 3 nodes: 16 GPUs over 3 nodes says nothing; each pod's limit does.
    ev = _ev({"resources": {"limits": {"nvidia.com/gpu": 4}}, "nproc_per_node": 8}, gpus=16, nodes=["a", "b", "c"])
    assert gpus_each_node(ev, "j1") == 4
    assert compute_changes(_remedy("launch_exceeds_gpus_per_node"), ev, "j1")[0] == {"nproc_per_node": 4}


def test_replica_types_given_different_gpus_have_no_one_count():
    ev = _ev({"pytorchReplicaSpecs": {"Master": {"resources": {"limits": {"nvidia.com/gpu": 1}}},
                                      "Worker": {"resources": {"limits": {"nvidia.com/gpu": "4"}}}}})
    assert gpus_each_node(ev, "j1") is None
    ev.configs["j1"]["pytorchReplicaSpecs"]["Master"]["resources"]["limits"]["nvidia.com/gpu"] = 4
    assert gpus_each_node(ev, "j1") == 4


def test_srun_tasks_per_node_come_down_to_the_gpus_per_node_not_the_gpu_request_itself():
    # sbatch --gpus-per-node is the allocation, not a process count: it is never the key changed.
    ev = _ev({"ntasks_per_node": 8, "gpus_per_node": 4}, gpus=8, nodes=["a", "b"])
    assert compute_changes(_remedy("launch_exceeds_gpus_per_node"), ev, "j1")[0] == {"ntasks_per_node": 4}


def test_without_an_allocation_there_is_no_count():
    assert gpus_each_node(_ev({"nproc_per_node": 8}, gpus=16, nodes=["a", "b", "c"]), "j1") is None


# --- the write itself ------------------------------------------------------------------------

def test_a_resubmit_sets_a_flat_spelt_key_in_place():
    config = {"preprocess.concurrency": 384, "resources": {"limits": {"nvidia.com/gpu": 8}}}
    set_dotted(config, "preprocess.concurrency", 352)
    set_dotted(config, "resources.limits.nvidia.com/gpu", 4)
    set_dotted(config, "runtime_env.env_vars.A", "1")
    assert config == {"preprocess.concurrency": 352, "resources": {"limits": {"nvidia.com/gpu": 4}},
                      "runtime_env": {"env_vars": {"A": "1"}}}


def test_the_pod_s_gpu_limit_is_read_from_kubectl_describe():
    from crashcart.agent.policies.evidence import pod_gpu_limit

    text = """Containers:
  trainer:
    Image:          img
    Limits:
      cpu:             48
      nvidia.com/gpu:  4
    Requests:
      nvidia.com/gpu:  4
  sidecar:
    Limits:
      memory:  1Gi
Conditions:"""
    assert pod_gpu_limit(text) == 4  # Requests are not counted again
    assert pod_gpu_limit("Containers:\n  main:\n    Limits:\n      memory:  8Gi\n") is None


def test_a_described_pod_limit_counts_before_the_job_s_gpus_over_its_nodes():
    # Two 4-GPU pods on one 8-GPU node: 8 GPUs on 1 node, but each launcher sees 4.
    ev = _ev({}, gpus=8, nodes=["a"])
    assert gpus_each_node(ev, "j1") == 8
    ev.jobs["j1"].gpus_per_pod = 4
    assert gpus_each_node(ev, "j1") == 4


@pytest.mark.parametrize("line, matches", [
    ("SLURM_GPUS_ON_NODE=4 CUDA_VISIBLE_DEVICES=0,1,2,3 SLURM_NTASKS=16", True),   # 16 ranks, 8 GPUs
    ("SLURM_NTASKS_PER_NODE=8", True),                                           # 8 a node, 4 GPUs each
    ("SLURM_NTASKS=2 SLURM_NTASKS_PER_NODE=1", False),                            # torchrun under srun: one a node
])
def test_slurm_s_own_task_counts_against_the_allocation_name_the_launch_mismatch(line, matches):
    from crashcart.agent.policies.evidence import TextDoc
    from crashcart.agent.policies.matching import match_label

    ev = _ev({}, gpus=8, nodes=["a", "b"])
    ev.docs = [TextDoc("log", "job:j1", [line, "RuntimeError: CUDA error: invalid device ordinal"], "get_logs:j1")]
    match = match_label(load_playbooks()["launch_exceeds_gpus_per_node"], ev)
    assert (match is not None) is matches


def test_a_model_may_change_a_playbook_key_wherever_the_job_nests_it():
    from crashcart.agent.policies.llm._containment import _allowed_key

    allowed = {"train_micro_batch_size_per_gpu", "env.PYTORCH_CUDA_ALLOC_CONF"}
    assert _allowed_key("deepspeed.train_micro_batch_size_per_gpu", allowed)
    assert _allowed_key("runtime_env.env_vars.PYTORCH_CUDA_ALLOC_CONF", allowed)
    assert not _allowed_key("eval.train_micro_batch_size_per_gpu", allowed)
    assert not _allowed_key("runtime_env.pip", allowed)


def test_without_ray_data_s_totals_the_running_nodes_of_ray_status_give_them():
    from crashcart.agent.policies.conditions import cluster_totals_unseen
    from crashcart.agent.policies.evidence import TextDoc

    ev = _ev({"tokenize": {"concurrency": None, "num_cpus": 1}, "embed": {"concurrency": 4, "num_gpus": 1, "num_cpus": 2}})
    ev.docs = [TextDoc("log", "job:j1", ["- ReadParquet->Map(tokenize): 48 active, 1912 queued, [cpu: 48.0, objects: 3.1GB]"], "get_logs:j1")]
    remedy = _remedy("ray_data_gpu_actors_starved_of_cpu")
    assert cluster_totals_unseen(ev)
    assert compute_changes(remedy, ev, "j1", {"cpu_each": "2.0"})[0] == {}  # no totals: no guess
    ev.limits["autoscaler"] = {"node_types": [
        {"name": "head", "running": 1, "max_workers": 0, "resources": {"CPU": 0}},
        {"name": "gpu", "running": 1, "max_workers": 1, "resources": {"CPU": 16, "GPU": 4}},
        {"name": "cpu", "running": 2, "max_workers": 4, "resources": {"CPU": 16}}]}
    assert not cluster_totals_unseen(ev)
    # 48 CPUs running, 4 GPU actors of 2 CPUs: 40 left for the unbounded CPU stage.
    assert compute_changes(remedy, ev, "j1", {"cpu_each": "2.0"})[0] == {"tokenize.concurrency": 40}


def test_a_log_with_ray_s_accounting_needs_no_ray_status():
    from crashcart.agent.policies.conditions import cluster_totals_unseen
    from crashcart.agent.policies.evidence import TextDoc

    ev = _ev({})
    ev.docs = [TextDoc("log", "job:j1", ["Running Dataset. Active & requested resources: 384/384 CPU, 0/32 GPU"], "get_logs:j1")]
    assert not cluster_totals_unseen(ev)
