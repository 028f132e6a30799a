"""Fixes computed from the evidence, written on the job's own keys: cache dirs, checkpoint tags, precision."""

from __future__ import annotations

from datetime import datetime, timezone

from crashcart.agent.policies.computed import job_df_rows, relocated_path
from crashcart.agent.policies.evidence import Evidence, JobFacts, TextDoc
from crashcart.agent.policies.matching import _config_value
from crashcart.agent.policies.remedy import compute_changes
from crashcart.playbooks import load_playbooks

T0 = datetime(2026, 7, 1, tzinfo=timezone.utc)
# An sbatch prolog's df, then the job's failure and a second df after it (the newest row wins).
LOG = """\
Filesystem                    Size  Used Avail Use% Mounted on
/dev/sda2                      80G   22G   58G  28% /
/dev/sdb1                      40G  2.0G   38G   5% /var/tmp
/dev/nvme0n1                  6.4T   90G  6.3T   2% /lscratch
tmpfs                         500G     0  500G   0% /dev/shm
gpfs01                        4.0P  3.1P  900T  78% /gpfs
Epoch 0:  41%|████      | 4100/10000 [12:01<17:18,  5.68it/s]
OSError: [Errno 28] No space left on device: '/var/tmp/torchinductor_ops/fx_graph_cache/ab12'
+ df -h /var/tmp
Filesystem      Size  Used Avail Use% Mounted on
/dev/sdb1        40G   40G     0 100% /var/tmp
"""


def _ev(config: dict, log: str = LOG) -> Evidence:
    ev = Evidence(now=T0, trigger={"kind": "job_failed", "job": "j1"})
    ev.docs = [TextDoc("log", "job:j1", log.splitlines(), "get_logs:j1")]
    ev.configs = {"j1": config}
    ev.jobs = {"j1": JobFacts(job="j1", state="FAILED", nodes=["cn0412"])}
    return ev


def test_the_jobs_own_df_is_read_newest_row_winning():
    rows = {r["mounted_on"]: r for r in job_df_rows(_ev({}), "j1")}
    assert set(rows) == {"/", "/var/tmp", "/lscratch", "/dev/shm", "/gpfs"}
    assert rows["/var/tmp"]["avail_bytes"] == 0 and rows["/var/tmp"]["use_pct"] == 100


def test_each_directory_moves_its_own_path_to_the_roomiest_local_disk():
    ev = _ev({})
    assert relocated_path(ev, "j1", "/var/tmp/torchinductor_ops") == "/lscratch/torchinductor_ops"
    assert relocated_path(ev, "j1", "/var/tmp") == "/lscratch"
    # Never onto RAM (tmpfs) or the network filesystem, however much room they have.
    assert relocated_path(ev, "j1", "/lscratch/x") is None  # already on the roomiest disk


def test_no_df_anywhere_means_no_guess():
    assert relocated_path(_ev({}, log="OSError: [Errno 28] No space left on device"), "j1", "/var/tmp") is None


def test_disk_full_changes_only_the_keys_the_job_has():
    label = load_playbooks()["disk_full"].label
    changes, _ = compute_changes(label.remedy, _ev({"env": {"TRITON_CACHE_DIR": "/var/tmp/triton", "TMPDIR": "/var/tmp"},
                                                    "batch_size": 8}), "j1")
    assert changes == {"env.TRITON_CACHE_DIR": "/lscratch/triton", "env.TMPDIR": "/lscratch"}


def test_flat_dotted_config_keys_are_read():
    config = {"runtime_env.env_vars.HF_HOME": "/home/ray/.cache/huggingface", "a": {"b.c": 3}}
    assert _config_value(config, "runtime_env.env_vars.HF_HOME") == "/home/ray/.cache/huggingface"
    assert _config_value(config, "a.b.c") == 3
    assert _config_value(config, "runtime_env.env_vars") is None


def test_a_checkpoint_tag_key_takes_the_directory_name_of_the_newest_whole_checkpoint():
    from crashcart.tools.cluster import Checkpoint

    label = load_playbooks()["checkpoint_corrupt"].label
    ev = _ev({"load_tag": "latest", "load_dir": "/ckpt"},
             log="_pickle.UnpicklingError: pickle data was truncated")
    ev.progress = {"j1": ([], [Checkpoint(step=s, time=T0, path=f"/ckpt/global_step{s}") for s in (500, 1000)])}
    changes, _ = compute_changes(label.remedy, ev, "j1")
    assert changes == {"load_tag": "global_step500"}


def test_a_deepspeed_block_nested_in_the_trainer_config_is_the_precision_key():
    label = load_playbooks()["fp16_loss_scale_floor"].label
    ev = _ev({"deepspeed": {"fp16": {"enabled": True}, "bf16": {"enabled": False}}})
    ev.nodes = {"cn0412": {"node": "cn0412", "gpu_model": "NVIDIA H100 80GB HBM3"}}
    changes, _ = compute_changes(label.remedy, ev, "j1")
    assert changes == {"deepspeed.bf16.enabled": True, "deepspeed.fp16.enabled": False}
    ev.nodes = {"cn0412": {"node": "cn0412", "gpu_model": "Tesla V100-SXM2-32GB"}}  # no bf16: fp16 stays
    assert compute_changes(label.remedy, ev, "j1")[0] == {}


def test_a_config_count_above_the_allocation_matches_on_whichever_key_the_job_uses():
    from crashcart.agent.policies.matching import match_label

    entry = load_playbooks()["launch_exceeds_gpus_per_node"]
    for key in ("ntasks_per_node", "devices", "nproc_per_node"):
        ev = _ev({key: 8}, log="RuntimeError: CUDA error: invalid device ordinal")
        ev.jobs["j1"].gpus, ev.jobs["j1"].nodes = 8, ["a", "b"]  # 4 GPUs per node
        assert match_label(entry, ev) is not None, key
        assert compute_changes(entry.label.remedy, ev, "j1")[0] == {key: 4}
    ev = _ev({"ntasks_per_node": 4}, log="RuntimeError: CUDA error: invalid device ordinal")
    ev.jobs["j1"].gpus, ev.jobs["j1"].nodes = 8, ["a", "b"]
    assert match_label(entry, ev) is None  # asks for what it has: not this
