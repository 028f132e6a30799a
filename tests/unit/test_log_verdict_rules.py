"""Rules grown for real logs, each checked on a second line of the same error form.

The lines here are worded the way the tools print them but with other numbers, names, paths and
surroundings than the excerpts in evals/logs/, so a rule that memorised one excerpt fails here.
"""

from __future__ import annotations

import pytest

from crashcart.agent.verdict import diagnose_text

# Memory, distributed, hardware and stuck forms (log batch 3): each line in another framework,
# version or surroundings than its corpus excerpt, with a near miss that must not match.
FAMILY_FORMS = {
    "jaxlib's XlaRuntimeError on a GPU": (
        "I0312 08:14:02.118 train.py:88] compiling train_step\n"
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
        "2147483648 bytes.\n",
        "memory", "cuda_oom", "resubmit_with_changes",
    ),
    "a TPU buffer that does not fit in HBM": (
        "2023-05-02 17:20:11.402 worker-3 Exception in thread train_loop:\n"
        "RuntimeError: Resource exhausted: Attempting to allocate 1.25G. That was not possible. "
        "There are 911.40M free.; (0x0x0_HBM0)\n",
        "memory", "cuda_oom", "resubmit_with_changes",
    ),
    "XLA's compiler over the HBM capacity": (
        "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. "
        "Ran out of memory in memory space hbm. Used 33.91G of 31.75G hbm. Exceeded hbm capacity by 2.16G.\n",
        "memory", "cuda_oom", "resubmit_with_changes",
    ),
    "TensorFlow's OOM when allocating a tensor": (
        "Epoch 3/40\n"
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
        "shape[64,1024,1024] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n",
        "memory", "cuda_oom", "resubmit_with_changes",
    ),
    "torch's OOM printed with the bare class name inside a Ray worker": (
        "(RayTrainWorker pid=4410) Traceback (most recent call last):\n"
        "(RayTrainWorker pid=4410) OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB "
        "(GPU 0; 23.65 GiB total capacity; 21.02 GiB already allocated; 1.12 GiB free; 21.90 GiB reserved in total by PyTorch)\n",
        "memory", "cuda_oom", "resubmit_with_changes",
    ),
    "the vLLM worker wrapper failing initialize_cache": (
        "(RayWorkerWrapper pid=9131, ip=10.2.0.7) INFO 11-02 10:01:55 gpu_executor.py:122] # GPU blocks: 0, # CPU blocks: 4096\n"
        "(RayWorkerWrapper pid=9131, ip=10.2.0.7) ERROR 11-02 10:01:55 worker_base.py:464] "
        "Error executing method 'initialize_cache'. This might cause deadlock in distributed execution.\n",
        "memory", "vllm_kv_cache_too_small", "resubmit_with_changes",
    ),
    "RoCE modify_qp refused for a GID index that is not RoCEv2": (
        "node07:2231:2290 [3] NCCL INFO NET/IB : Using [0]mlx5_2:1/RoCE [1]mlx5_3:1/RoCE ; OOB eth1:10.4.1.7<0>\n"
        "node07:2231:2290 [3] misc/ibvwrap.cc:307 NCCL WARN Call to ibv_modify_qp failed with 22 Invalid argument, "
        "on dev mlx5_2:1, curr state INIT, next state RTR, local GID index 1, local GID ::, remote GID ::\n"
        "node07:2231:2290 [3] NCCL INFO transport/net_ib.cc:1082 -> 2\n",
        "distributed", "nccl_ib_gid_missing", "resubmit_with_changes",
    ),
    "an empty GID table entry": (
        "NCCL WARN Call to ibv_modify_qp failed with 61 No data available, on dev rocep65s0f0:1\n"
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error\n",
        "distributed", "nccl_ib_gid_missing", "resubmit_with_changes",
    ),
    "NCCL's socket layer refused the address family": (
        "gpu-0:811:811 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.4<0>\n"
        "gpu-0:811:860 [0] misc/socket.cc:50 NCCL WARN Socket creation failed : Address family not supported by protocol\n",
        "distributed", "nccl_socket_ifname_missing", "resubmit_with_changes",
    ),
    "an HCA port in error under a running job": (
        "[2024-02-11 03:12:44] iteration 5120/100000 | lm loss 2.113\n"
        "gpu-b12:40110:40188 [5] NCCL WARN NET/IB : mlx5_5:1 Got async event : port error\n"
        "gpu-b12:40110:40188 [5] NCCL WARN NET/IB : mlx5_5:1 Got async event : port active\n"
        "gpu-b12:40110:40188 [5] NCCL WARN NET/IB : mlx5_5:1 Got async event : port error\n",
        "hardware", "ib_port_error_event", "exclude_node",
    ),
    "a RoCE peer that never acknowledged (status 12)": (
        "[rank5]:[W ProcessGroupNCCL.cpp:1250] Warning: NCCL logs follow\n"
        "trn-17:5512:5601 [5] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
        "10.12.3.44<51230> with status=12 opcode=1 len=0 vendor err 129 (Recv) localGid ::ffff:10.12.3.17\n",
        "distributed", "nccl_ib_retry_exceeded", "escalate_network",
    ),
    "torchrun's agent cannot reach the store it was pointed at": (
        "W1104 02:11:40.812000 140233 torch/distributed/run.py:793] *****************************************\n"
        "[E socket.cpp:1011] [c10d] The client socket has timed out after 900000ms while trying to connect to "
        "(head-node.cluster.local, 29400).\n"
        "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/4 clients joined.\n",
        "distributed", "rendezvous_endpoint_unreachable", "resubmit_with_changes",
    ),
    "NCCL's CUDA call refused until the fabric is up": (
        "dgx-h100-031:88120:88120 [2] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.\n"
        "RuntimeError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "
        "unhandled cuda error, NCCL version 2.14.3\n"
        "ncclUnhandledCudaError: Call to CUDA function failed.\n"
        "Last error:\n"
        "Cuda failure 'system not yet initialized'\n",
        "hardware", "fabric_manager_down", "exclude_node",
    ),
    "a start-up interrupted while it sat in a JIT build": (
        "[2024-06-01 12:00:03,114] [INFO] [real_accelerator.py:203:get_accelerator] Setting ds_accelerator to cuda\n"
        "Using /root/.cache/torch_extensions/py310_cu121 as PyTorch extensions root...\n"
        "Traceback (most recent call last):\n"
        '  File "/workspace/finetune.py", line 41, in <module>\n'
        "    engine = deepspeed.initialize(model=model, config=cfg)[0]\n"
        '  File "/usr/lib/python3/dist-packages/torch/utils/file_baton.py", line 42, in wait\n'
        "    time.sleep(self.wait_seconds)\n"
        "KeyboardInterrupt\n",
        # The stack names what it waited on: the extension build's lock (batch 4 grew that label).
        "stuck", "jit_build_lock_wait", "resubmit_with_changes",
    ),
    "a start-up interrupted while it sat in a download": (
        "[2024-06-01 12:00:03,114] [INFO] Loading tokenizer\n"
        "^CTraceback (most recent call last):\n"
        '  File "/workspace/serve.py", line 18, in <module>\n'
        "    snapshot_download(repo_id=repo)\n"
        '  File "/usr/lib/python3.11/ssl.py", line 1134, in read\n'
        "    return self._sslobj.read(len, buffer)\n"
        "KeyboardInterrupt\n",
        "stuck", "interrupted_before_progress", "resubmit",
    ),
    "a barrier after start-up that one rank reached too late": (
        "Map (num_proc=16):  41%|████      | 2871000/7002113 [09:58<14:21, 4795.12 examples/s]\n"
        "[rank5]:[E1119 04:12:09.551203 8812 ProcessGroupNCCL.cpp:616] [Rank 5] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600041 "
        "milliseconds before timing out.\n"
        "[rank5]:[E1119 04:12:09.551980 8812 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 5] "
        "Exception (either an error or timeout) detected by watchdog at work: 2, last enqueued NCCL work: 2, "
        "last completed NCCL work: 1.\n",
        "distributed", "nccl_timeout_rank_late_at_startup", "resubmit_with_changes",
    ),
    "py-spy: a prefetch thread's queue never filled": (
        "Process 1877: python -u train.py --cfg gpt.yaml\n"
        "Python v3.11.4 (/opt/conda/bin/python3.11)\n\n"
        "Thread 1877 (idle): \"MainThread\"\n"
        "    wait (threading.py:327)\n"
        "    get (queue.py:171)\n"
        "    __next__ (megatron/core/datasets/prefetch.py:91)\n"
        "    train_step (pretrain.py:412)\n",
        "stuck", "dataloader_wait_stack", "resubmit",
    ),
    "a traceback printed at kill time inside an iterator's get": (
        "^CTraceback (most recent call last):\n"
        '  File "/app/train.py", line 210, in <module>\n'
        "    for batch in loader:\n"
        '  File "/app/data/background.py", line 58, in __next__\n'
        "    item = self._queue.get()\n"
        '  File "/usr/lib/python3.10/queue.py", line 171, in get\n'
        "    self.not_empty.wait()\n"
        "KeyboardInterrupt\n",
        "stuck", "dataloader_wait_stack", "resubmit",
    ),
}

# Lines that look alike but are another thing: (text, a diagnosis the verdict must not be).
FAMILY_NEAR_MISSES = {
    "gRPC's RESOURCE_EXHAUSTED for a message too large": (
        "grpc._channel._InactiveRpcError: status = StatusCode.RESOURCE_EXHAUSTED details = "
        "\"Received message larger than max (8388608 vs. 4194304)\"\n",
        "cuda_oom",
    ),
    "Ray's own host-memory OutOfMemoryError": (
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n",
        "cuda_oom",
    ),
    "a modify_qp that timed out (a route, not the GID)": (
        "NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_0:1, "
        "curr state INIT, next state RTR, local GID index 3\n",
        "nccl_ib_gid_missing",
    ),
    "a flushed work request (status 5) follows another failure": (
        "NCCL WARN NET/IB : Got completion from peer 10.0.0.9<40110> with error 5, opcode 1, len 0, vendor err 249\n",
        "nccl_ib_retry_exceeded",
    ),
    "another CUDA failure behind the same NCCL wrapper": (
        "ncclUnhandledCudaError: Call to CUDA function failed.\n"
        "Last error:\n"
        "Cuda failure 'invalid device ordinal'\n",
        "fabric_manager_down",
    ),
    "Ctrl-C after the run had trained": (
        "epoch 3 | step 1200 | loss 1.873 | 5.2 it/s\n"
        "^C\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 88, in <module>\n'
        "    loss.backward()\n"
        "KeyboardInterrupt\n",
        "interrupted_before_progress",
    ),
    "an interrupt after a real error": (
        "^CTraceback (most recent call last):\n"
        '  File "serve.py", line 12, in <module>\n'
        "ModuleNotFoundError: No module named 'flash_attn'\n",
        "interrupted_before_progress",
    ),
    "the very first collective timed out (the ranks never talked)": (
        "[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
        "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800310 milliseconds before timing out.\n",
        "nccl_timeout_rank_late_at_startup",
    ),
    "a scalar all_reduce timed out deep into training": (
        "[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48211, "
        "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800310 milliseconds before timing out.\n",
        "nccl_timeout_rank_late_at_startup",
    ),
    "ranks disagree on the op (a desync, not a late rank)": (
        "[rank2]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000)\n"
        "[rank0]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=67108864, NumelOut=67108864, Timeout(ms)=600000)\n",
        "nccl_timeout_rank_late_at_startup",
    ),
    "a port coming back up is not a port error": (
        "NCCL WARN NET/IB : mlx5_1:1 Got async event : port active\n"
        "NCCL WARN NET/IB : mlx5_1:1 Got async event : client reregistration\n",
        "ib_port_error_event",
    ),
    "a queue.get under a function that is not an iterator": (
        "Thread 22 (idle): \"log-writer\"\n"
        "    wait (threading.py:327)\n"
        "    get (queue.py:171)\n"
        "    run (metrics/writer.py:40)\n",
        "dataloader_wait_stack",
    ),
}

# Log batch 4: the same words in a harmless or another context.
FAMILY_NEAR_MISSES.update({
    "a quota increase that was granted": (
        "INFO: Quota 'NVIDIA_L4_GPUS' increased to 16.0 in region us-east1; request approved.\n",
        "cloud_quota_exceeded",
    ),
    "an instance type the cloud still has capacity for": (
        "INFO: checked capacity for g5.48xlarge in the Availability Zone you requested (us-west-2b): available\n",
        "cloud_capacity_unavailable",
    ),
    "a vCPU limit printed by a quota report": (
        "Running On-Demand G and VT instances: current vCPU limit of 64, 48 in use\n",
        "cloud_quota_exceeded",
    ),
    "a scale-up that did not trigger for a request no node fits": (
        "  Normal  NotTriggerScaleUp  30s  cluster-autoscaler  pod didn't trigger scale-up: 3 Insufficient nvidia.com/gpu\n",
        "capacity_scale_up_backoff",
    ),
    "Karpenter's NodePool limits mentioned by a healthy launch": (
        "karpenter  INFO  launched nodeclaim  {\"NodePool\": {\"name\":\"gpu\"}, \"instance-type\": \"g5.12xlarge\", "
        "\"limits\": {\"nvidia.com/gpu\": \"64\"}}\n",
        "capacity_nodepool_limits_reached",
    ),
    "a maintenance reservation someone asks about": (
        "We have a maintenance reservation on Sunday; jobs that would overlap it show ReqNodeNotAvail.\n",
        "pending_maintenance_reservation",
    ),
    "a pull that succeeded after a rate-limit warning in a doc": (
        "  Normal  Pulled  3s  kubelet  Successfully pulled image \"python:3.11\" in 2.1s "
        "(anonymous pulls may hit Docker Hub's pull rate limit)\n",
        "image_pull_rate_limited",
    ),
    "a PodGroup created and scheduled": (
        "I0412 09:13:55.201  1 podgroup.go:88] PodGroup ml/bert-mpi created (post podgroups.scheduling.volcano.sh), phase Running\n",
        "gang_scheduler_crd_missing",
    ),
    "pod anti-affinity spreading replicas over full nodes": (
        "  Warning  FailedScheduling  5s  default-scheduler  0/4 nodes are available: 1 node(s) didn't match pod "
        "anti-affinity rules, 3 Insufficient nvidia.com/gpu.\n",
        "pod_affinity_unsatisfiable",
    ),
    "a version mismatch that is not Ray's": (
        "RuntimeError: Version mismatch: checkpoint was saved with transformers 4.38, running 4.44\n",
        "ray_version_mismatch",
    ),
    "a 504 from the job's own model server": (
        "requests.exceptions.HTTPError: 504 Server Error: Gateway Time-out for url: http://reward-model:8000/score\n",
        "hf_hub_unavailable",
    ),
    "the Hub refusing a gated model (the owner's access, not an outage)": (
        "huggingface_hub.errors.GatedRepoError: 403 Client Error. Cannot access gated repo for url "
        "https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json.\n",
        "hf_hub_unavailable",
    ),
    "an ignored exception before a real crash": (
        "Exception ignored in: <function Pool.__del__ at 0x7f9e>\n"
        "Traceback (most recent call last):\n"
        "ResourceWarning: unclosed running multiprocessing pool\n"
        "step 120 | loss 2.31\n"
        "Traceback (most recent call last):\n"
        "  File \"train.py\", line 201, in <module>\n"
        "AssertionError: labels out of range\n",
        "ignored_exception_at_teardown",
    ),
    "an ignored exception that names a killed DataLoader worker": (
        "epoch 2 step 900\n"
        "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f11>\n"
        "Traceback (most recent call last):\n"
        "RuntimeError: DataLoader worker (pid 4412) is killed by signal: Killed.\n",
        "ignored_exception_at_teardown",
    ),
    "an ignored exception with nothing around it (could not tell)": (
        "Exception ignored in: <function Socket.__del__ at 0x7f22>\n"
        "Traceback (most recent call last):\n"
        "ValueError: I/O operation on closed file\n",
        "ignored_exception_at_teardown",
    ),
    "a torchelastic worker that failed among succeeded ones": (
        '{"name": "torchelastic.worker.status.SUCCEEDED", "source": "WORKER", "metadata": {"global_rank": 0, "state": "SUCCEEDED", "raw_error": null}}\n'
        '{"name": "torchelastic.worker.status.FAILED", "source": "WORKER", "metadata": {"global_rank": 1, "state": "FAILED", '
        '"raw_error": "{\\"message\\": \\"RuntimeError: CUDA error\\"}"}}\n',
        "elastic_workers_succeeded",
    ),
    "controller-runtime's notice before the command failed": (
        "[controller-runtime] log.SetLogger(...) was never called; logs will not be displayed.\n"
        "Error: failed to create RayJob: admission webhook \"vrayjob.kb.io\" denied the request\n",
        "controller_runtime_logger_unset",
    ),
    "the only node groups the selector allows are at their maximum size": (
        "  Normal  NotTriggerScaleUp  4m (x20 over 1h)  cluster-autoscaler  pod didn't trigger scale-up: "
        "1 max node group size reached, 5 node(s) didn't match Pod's node affinity/selector\n",
        "node_affinity_mismatch",
    ),
})


@pytest.mark.parametrize("name", list(FAMILY_FORMS))
def test_a_family_form_in_other_surroundings_gets_its_verdict(name):
    text, family, diagnosis, remedy = FAMILY_FORMS[name]
    v = diagnose_text(text)
    assert (v.family, v.diagnosis, v.remedy) == (family, diagnosis, remedy), v.evidence


@pytest.mark.parametrize("name", list(FAMILY_NEAR_MISSES))
def test_a_near_miss_does_not_get_the_rule(name):
    text, not_this = FAMILY_NEAR_MISSES[name]
    assert diagnose_text(text).diagnosis != not_this


CASES = {
    "sbatch refuses a node configuration": (
        "$ sbatch --gres=gpu:a100:8 -N 4 train.sh\n"
        "sbatch: error: Batch job submission failed: Requested node configuration is not available\n",
        "scheduling", "submission_rejected", "resubmit_with_changes",
    ),
    "srun refuses under the QOS": (
        "srun: error: QOSMinCpuNotSatisfied\n"
        "srun: error: Unable to allocate resources: Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)\n",
        "scheduling", "submission_rejected", "resubmit_with_changes",
    ),
    "salloc at the per-user job cap": (
        "[alice@login03 ~]$ salloc -p a100 --gres=gpu:2\n"
        "salloc: error: AssocMaxJobsPerUserLimit\n",
        "scheduling", "pending_qos_user_limit", "wait",
    ),
    "a launcher caught the preemption signal": (
        "2024-03-01 10:00:01 | INFO | step 1200 loss 2.31\n"
        "[launcher] WARNING: received SIGTERM on gpu-a17: this job was preempted\n"
        "slurmstepd: error: *** JOB 88123 ON gpu-a17 CANCELLED AT 2024-03-01T10:00:02 DUE TO JOB REQUEUE ***\n",
        "scheduling", "job_preempted", "resubmit",
    ),
    "pod refused by the namespace quota": (
        "Warning  FailedCreate  12s  job-controller  Error creating: pods \"trainer-worker-3\" is forbidden: "
        "exceeded quota: team-gpu-quota, requested: requests.nvidia.com/gpu=8, used: requests.nvidia.com/gpu=24, "
        "limited: requests.nvidia.com/gpu=32\n",
        "scheduling", "namespace_quota_exceeded", "resubmit_with_changes",
    ),
    "kubelet cannot hand out the GPU": (
        "  Warning  UnexpectedAdmissionError  3m  kubelet  Allocate failed due to rpc error: code = Unknown "
        "desc = no healthy devices, which is unexpected\n"
        "Status: Failed\nReason: UnexpectedAdmissionError\n",
        "scheduling", "device_allocation_failed", "escalate_infra",
    ),
    "image repository missing from the registry": (
        "  Warning  Failed  41s  kubelet  Failed to pull image \"123456789012.dkr.ecr.eu-west-1.amazonaws.com/busybox:1.36\": "
        "rpc error: code = NotFound desc = failed to pull and unpack image: name unknown: "
        "The repository with name 'busybox' does not exist in the registry\n",
        "scheduling", "image_pull_bad_tag", "escalate_user",
    ),
    "the kernel killed a container process in its cgroup": (
        "[884211.120334] Memory cgroup out of memory: Killed process 77120 (python3) total-vm:41236000kB, "
        "anon-rss:31998212kB, file-rss:10240kB, shmem-rss:0kB, UID:0 pgtables:63112kB oom_score_adj:1000\n",
        "memory", "host_oom", "resubmit_with_changes",
    ),
    "slurm step over its memory limit": (
        "slurmstepd: error: Job 4410023 exceeded memory limit (131182220 > 125829120), being killed\n"
        "slurmstepd: error: Exceeded job memory limit\n",
        "memory", "host_oom", "resubmit_with_changes",
    ),
    "vLLM left a negative KV cache": (
        "INFO 11-02 14:20:11 worker.py:241] model weights take 14.99GiB; non_torch_memory takes 0.12GiB; "
        "PyTorch activation peak memory takes 2.30GiB; the rest of the memory reserved for KV Cache is -0.37GiB.\n",
        "memory", "vllm_kv_cache_too_small", "resubmit_with_changes",
    ),
    "only the exit warning about the process group": (
        "epoch 3 done, accuracy 0.91\n"
        "[rank3]:[W1104 22:10:05.118273641 ProcessGroupNCCL.cpp:1250] Warning: WARNING: destroy_process_group() "
        "was not called before program exit, which can leak resources.\n",
        "none", "exit_warning_only", "none",
    ),
    "DCGM health watch sees a thermal violation": (
        "2024-05-02 03:11:45 dcgm-exporter WARN Health check failed for GPU 5: Thermal: "
        "'Detected clocks throttling due to thermal violation in GPU 5.'\n",
        "hardware", "gpu_health_check_thermal", "escalate_hardware",
    ),
    "torch.save cannot create its file": (
        "Traceback (most recent call last):\n"
        "  File \"/opt/app/trainer.py\", line 88, in save\n"
        "    torch.save(state, out_path)\n"
        "  File \"/usr/lib/python3/dist-packages/torch/serialization.py\", line 440, in __init__\n"
        "    super().__init__(torch._C.PyTorchFileWriter(self.name))\n"
        "RuntimeError: File /scratch/run7/ckpt/step_4000.pt cannot be opened.\n",
        "storage", "checkpoint_write_failed", "escalate_storage",
    ),
    "a write fails with an I/O error": (
        "    torch.save(model.state_dict(), path)\n"
        "RuntimeError: write(): fd 113 failed with Input/output error\n",
        "storage", "checkpoint_write_failed", "escalate_storage",
    ),
    "no cloud credentials for the checkpoint upload": (
        "  File \"/usr/local/lib/python3.11/site-packages/botocore/auth.py\", line 418, in add_auth\n"
        "    raise NoCredentialsError()\n"
        "botocore.exceptions.NoCredentialsError: Unable to locate credentials\n",
        "storage", "storage_credentials_expired", "escalate_credentials",
    ),
    "the launcher cannot ssh to a worker": (
        "[2024-06-01 09:12:44,101] [INFO] [runner.py:568:main] cmd = pdsh -S -f 1024 -w node-b2,node-b3 ...\n"
        "node-b3: trainer@node-b3: Permission denied (publickey,gssapi-keyex,gssapi-with-mic).\n"
        "pdsh@node-b2: node-b3: ssh exited with exit code 255\n",
        "user_code", "launcher_ssh_denied", "escalate_user",
    ),
    "Lightning asked for more GPUs than the machine has": (
        "lightning.fabric.utilities.exceptions.MisconfigurationException: You requested gpu: [0, 1, 2, 3]\n"
        " But your machine only has: [0, 1]\n",
        "user_code", "launch_exceeds_gpus_per_node", "resubmit_with_changes",
    ),
    "an assertion behind Ray's worker prefix": (
        "(RayTrainWorker pid=5521, ip=10.0.4.7)   File \"/app/data.py\", line 51, in __getitem__\n"
        "(RayTrainWorker pid=5521, ip=10.0.4.7)     assert len(tokens) <= self.max_len\n"
        "(RayTrainWorker pid=5521, ip=10.0.4.7) AssertionError\n",
        "user_code", "assertion_failure", "escalate_user",
    ),
    "the master's name does not resolve yet": (
        "[E socket.cpp:957] [c10d] The client socket has failed to connect to any network address of "
        "(trainer-master-0.trainer.svc, 23456).\n"
        "torch.distributed.DistNetworkError: The IPv4 network addresses of (trainer-master-0.trainer.svc, 23456) "
        "cannot be retrieved (gai error: -2 - Name or service not known).\n",
        "distributed", "rendezvous_host_unresolved", "resubmit",
    ),
    "a JAX process cannot register with its coordinator": (
        "2024-09-10 08:01:12.551 E external/xla/xla/pjrt/distributed/client.cc:121] Failed to connect to "
        "distributed JAX controller: UNAVAILABLE: failed to connect to all addresses\n"
        "RPC: /tensorflow.CoordinationService/RegisterTask\n",
        "distributed", "coordinator_unreachable", "resubmit_with_changes",
    ),
    "a peer hung up while NCCL was setting up": (
        "host-7:91:120 [2] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer host-3<50412>\n"
        "host-7:91:120 [2] NCCL INFO misc/socket.cc:749 -> 6\n"
        "host-7:91:120 [2] NCCL INFO bootstrap.cc:488 -> 6\n"
        "host-7:91:120 [2] NCCL INFO init.cc:1577 -> 6\n",
        "distributed", "nccl_remote_error", "resubmit",
    ),
    "a Ray Train job waits on its placement group": (
        "INFO 07-19 11:02:40 ray_utils.py:188] Waiting for creating a placement group of specs for 120 seconds. "
        "specs=[{'GPU': 1.0}, {'GPU': 1.0}, {'GPU': 1.0}, {'GPU': 1.0}].\n",
        "ray", "ray_placement_group_waiting", "wait",
    ),
    "NCCL's proxy fails its close op at exit": (
        "all 400 checks passed\n"
        "gpu-b-12:881:904 [1] proxy.cc:1602 NCCL WARN [Proxy Service 1] Failed to execute operation Close from rank 1, retcode 6\n",
        "none", "nccl_teardown_noise", "none",
    ),
    "the nodes carry the node controller's own taint": (
        "Warning  FailedScheduling  4m12s  default-scheduler  0/6 nodes are available: 1 Insufficient cpu, "
        "5 node(s) had taint {node.kubernetes.io/not-ready: }, that the pod didn't tolerate.\n",
        "scheduling", "nodes_tainted_unhealthy", "escalate_infra",
    ),
    "the autoscaler says no new node would fit the pod": (
        "  Warning  FailedScheduling   2m   default-scheduler   0/12 nodes are available: 12 Insufficient memory.\n"
        "  Normal   NotTriggerScaleUp  90s  cluster-autoscaler  pod didn't trigger scale-up: 2 Insufficient memory\n",
        "scheduling", "request_exceeds_any_node", "resubmit_with_changes",
    ),
    "an interrupted DataLoader deadlock": (
        "^CTraceback (most recent call last):\n"
        "  File \"/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py\", line 1328, in _next_data\n"
        "    idx, data = self._get_data()\n"
        "  File \"/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py\", line 1294, in _get_data\n"
        "    success, data = self._try_get_data()\n"
        "  File \"/opt/conda/lib/python3.10/multiprocessing/queues.py\", line 113, in get\n"
        "    if not self._poll(timeout):\n"
        "  File \"/opt/conda/lib/python3.10/multiprocessing/connection.py\", line 424, in _poll\n"
        "    r = wait([self], timeout)\n"
        "KeyboardInterrupt\n",
        "user_code", "dataloader_deadlock", "resubmit_with_changes",
    ),
}


def test_a_node_group_at_its_maximum_is_waiting_not_a_request_too_big():
    v = diagnose_text(
        "  Warning  FailedScheduling   2m   default-scheduler   0/3 nodes are available: 3 Insufficient nvidia.com/gpu.\n"
        "  Normal   NotTriggerScaleUp  1m   cluster-autoscaler  pod didn't trigger scale-up: 1 Insufficient nvidia.com/gpu, "
        "1 max node group size reached\n")
    assert v.diagnosis != "request_exceeds_any_node"


def test_a_taint_the_owner_chose_still_asks_for_a_toleration():
    v = diagnose_text("Warning  FailedScheduling  30s  default-scheduler  0/4 nodes are available: "
                      "4 node(s) had untolerated taint {dedicated: inference}. preemption: 0/4 nodes are available\n")
    assert (v.diagnosis, v.remedy) == ("taint_toleration_mismatch", "escalate_user")


def test_a_minor_unhealthy_taint_does_not_outweigh_the_main_reason():
    v = diagnose_text("Warning  FailedScheduling  30s  default-scheduler  0/9 nodes are available: "
                      "8 node(s) had untolerated taint {dedicated: training}, "
                      "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }.\n")
    assert v.diagnosis == "taint_toleration_mismatch"


def test_a_peer_closing_its_socket_at_teardown_is_not_a_network_error():
    # The same warning after the work ended, with no init in the return chain: teardown noise.
    v = diagnose_text(
        "epoch 10 finished, saving checkpoint\n"
        "n2:77:91 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer n1<40211>\n"
        "n2:77:91 [0] NCCL INFO [Service thread] Connection closed by localRank 0\n")
    assert v.diagnosis != "nccl_remote_error"


# Batch 3's capacity, scheduling, ray, storage, user_code and healthy-run rules, each on a line
# worded as its tool prints it elsewhere.
CASES.update({
    "PyTorch 2.4's exit warning about the process group": (
        "Epoch 9/9: 100%|##########| 500/500 [02:11<00:00, 3.80it/s, loss=0.412]\n"
        "[rank1]:[W1203 08:41:17.553201982 ProcessGroupNCCL.cpp:1168] Warning: WARNING: process group has NOT been "
        "destroyed before we destruct ProcessGroupNCCL. On normal program exit, the application should call "
        "destroy_process_group to ensure that any pending NCCL operations have finished in this process.\n",
        "none", "exit_warning_only", "none",
    ),
    "c10d falls back to IPv4 on a host without IPv6": (
        "+ torchrun --nnodes 1 --nproc_per_node 4 pretrain.py\n"
        "[W1011 13:02:55.991 socket.cpp:663] [c10d] The server socket cannot be initialized on [::]:41000 "
        "(errno: 97 - Address family not supported by protocol).\n"
        "[W1011 13:02:55.993 socket.cpp:697] [c10d] The IPv6 network addresses of (gpu-r3, 41000) cannot be "
        "retrieved (gai error: -9 - Address family for hostname not supported).\n"
        "iter 20 | lm loss 7.21 | 41.3 TFLOPs\n",
        "none", "c10d_ipv6_fallback_only", "none",
    ),
    "Lightning's fit ended before a teardown timeout": (
        "`Trainer.fit` stopped: `max_steps=20000` reached.\n"
        "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=88123, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600412 "
        "milliseconds before timing out.\n",
        "none", "finished_then_teardown_error", "none",
    ),
    "an old kubelet times out mounting an NFS volume": (
        "  Warning  FailedMount  3m (x5 over 14m)  kubelet, node-pool-a-7  Unable to mount volumes for pod "
        "\"trainer-0_ml(0d1e-44)\": timeout expired waiting for volumes to attach or mount for pod \"ml\"/\"trainer-0\". "
        "list of unmounted volumes=[datasets]. list of unattached volumes=[datasets token]\n"
        "Output: mount.nfs4: No route to host\n",
        "storage", "volume_mount_failed", "escalate_storage",
    ),
    "the coscheduling plugin cannot place a whole pod group": (
        "LAST SEEN   TYPE      REASON             OBJECT               MESSAGE\n"
        "12s         Warning   FailedScheduling   pod/ddp-worker-2     0/5 nodes are available: pre-filter pod "
        "ddp-worker-2 cannot find enough sibling pods, current pods number: 2, minMember of group: 4\n",
        "scheduling", "gang_unschedulable", "wait",
    ),
    "a Volcano job's gang waits for GPUs": (
        "Events:\n  Type     Reason         Age                  From     Message\n"
        "  Warning  Unschedulable  2m (x31 over 12m)    volcano  8/8 tasks in gang unschedulable: pod group is not ready, "
        "8 Pending, 8 minAvailable; Pending: 8 Unschedulable\n",
        "scheduling", "gang_unschedulable", "wait",
    ),
    "PBS Pro says why a GPU job does not run yet": (
        "Job Id: 88421.pbs01\n    Job_Name = llm-ft\n    job_state = Q\n    queue = gpuq\n"
        "    comment = Not Running: Insufficient amount of resource: ngpus (R: 4 A: 0 T: 32)\n",
        "scheduling", "queued_waiting_turn", "wait",
    ),
    "Moab's priority-based start estimate": (
        "$ showstart 551902\njob 551902 requires 16 procs for 12:00:00\n\n"
        "Estimated Priority based start in        18:22:10 on Thu Jan  9 04:10:00\n",
        "scheduling", "queued_waiting_turn", "wait",
    ),
    "a pod list where the image never pulls": (
        "NAME                         READY   STATUS             RESTARTS   AGE\n"
        "bert-ft-master-0             0/1     ImagePullBackOff   0          6m\n"
        "bert-ft-worker-0             0/1     Init:ErrImagePull  0          6m\n",
        "scheduling", "image_pull_backing_off", "escalate_user",
    ),
    "an EKS node group cannot grow past the vCPU quota": (
        "LAST SEEN   TYPE      REASON               OBJECT              MESSAGE\n"
        "2m          Warning   FailedScaleUp        pod/sd-finetune-0   Node scale up in zones eu-west-1b associated "
        "with this pod failed: Instance quota exceeded. Pod is at risk of not being scheduled.\n",
        "capacity", "capacity_scale_up_quota", "escalate_infra",
    ),
    "GKE has no A100s left in the zone": (
        "  Warning  FailedScaleUp  47s (x12 over 9m)  cluster-autoscaler  Node scale up in zones asia-east1-c "
        "associated with this pod failed: GCE out of resources. Pod is at risk of not being scheduled.\n",
        "capacity", "capacity_scale_up_stockout", "wait",
    ),
    "ray status with a GPU node still launching": (
        "======== Autoscaler status: 2025-01-04 18:11:02.113 ========\nNode status\n"
        "---------------------------------------------------------------\nActive:\n 1 head\nPending:\n"
        " a10g-worker, 2 launching\n cpu-worker, 1 launching\nRecent failures:\n (no failures)\n\n"
        "Resources\n---------------------------------------------------------------\nUsage:\n 2.0/16.0 CPU\n 0B/40.00GiB memory\n",
        "capacity", "capacity_nodes_launching", "wait",
    ),
    "a driver cannot reach the cluster it was told to join": (
        "2024-08-01 09:12:40,115\tINFO worker.py:1586 -- Connecting to existing Ray cluster at address: 10.8.0.4:6379...\n"
        "[2024-08-01 09:12:50,119 W 8812 8812] gcs_rpc_client.h:151: Failed to connect to GCS at address 10.8.0.4:6379 within 10 seconds.\n"
        "[2024-08-01 09:13:20,121 W 8812 8812] gcs_client.cc:183: Failed to get cluster ID from GCS server: TimedOut: "
        "Timed out while waiting for GCS to become available.\n",
        "ray", "ray_gcs_unreachable", "escalate_infra",
    ),
    "a raylet gives up on a silent GCS": (
        "[2023-03-02 11:00:41,002 C 4410 4460] (raylet) gcs_rpc_client.h:552:  Check failed: "
        "absl::ToInt64Seconds(absl::Now() - gcs_last_alive_time_) < "
        "::RayConfig::instance().gcs_rpc_server_reconnect_timeout_s() Failed to connect to GCS\n*** StackTrace Information ***\n",
        "ray", "ray_gcs_unreachable", "escalate_infra",
    ),
    "ray job submit before the dashboard serves": (
        "$ ray job submit --address http://10.2.0.9:8265 -- python tune.py\n"
        "Traceback (most recent call last):\n  File \"/usr/local/bin/ray\", line 8, in <module>\n"
        "ConnectionError: Failed to connect to Ray at address: http://10.2.0.9:8265.\n",
        "ray", "ray_dashboard_unreachable", "resubmit",
    ),
    "actors keep every GPU of a Ray cluster": (
        "(autoscaler +41s) Warning: The following resource request cannot be scheduled right now: {'CPU': 1.0, 'GPU': 1.0}. "
        "This is likely due to all cluster resources being claimed by actors. Consider creating fewer actors or "
        "adding more nodes to this Ray cluster.\n",
        "ray", "ray_actors_hold_all_resources", "resubmit_with_changes",
    ),
    "an sbatch job killed at its wall time with no checkpoint": (
        "rank 0: processed 18000/250000 shards\n"
        "slurmstepd-gpu-c203: error: *** JOB 7781002 ON gpu-c203 CANCELLED AT 2025-04-18T06:00:14 DUE TO TIME LIMIT ***\n"
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n",
        "scheduling", "job_timeout_no_checkpoint", "resubmit_with_changes",
    ),
    "vLLM's KV heads do not split across the pipeline": (
        "  File \"/usr/local/lib/python3.12/site-packages/vllm/config.py\", line 612, in verify_with_parallel_config\n"
        "    raise ValueError(\n"
        "ValueError: Total number of hidden layers (30) must be divisible by pipeline parallel size (4).\n",
        "user_code", "parallel_size_does_not_divide_model", "resubmit_with_changes",
    ),
    "ranks race on a hub cache over NFS": (
        "  File \"/opt/venv/lib/python3.11/site-packages/huggingface_hub/file_download.py\", line 1722, in _chmod_and_move\n"
        "    cache_dir.chmod(0o755)\n"
        "PermissionError: [Errno 116] Stale file handle: '/nfs/shared/.cache/huggingface/hub/models--org--m/blobs'\n",
        "storage", "stale_handle_in_shared_cache", "resubmit_with_changes",
    ),
    "a Docker Hub name pulled through a mirror that lacks it": (
        "  Warning  Failed     12s (x3 over 50s)  kubelet  Failed to pull image \"busybox:1.36\": rpc error: code = NotFound "
        "desc = failed to pull and unpack image \"docker.io/library/busybox:1.36\": failed to resolve reference: "
        "reading manifest 1.36 from harbor.corp.example:8443/dockerhub-proxy/library/busybox: not found\n",
        "scheduling", "image_pull_redirected_registry", "escalate_infra",
    ),
    "LSF's pending reasons for a GPU job": (
        "JOBID   USER    STAT  QUEUE   FROM_HOST  EXEC_HOST  JOB_NAME  SUBMIT_TIME\n"
        "40117   erin    PEND  gpu_p   login2                bert-mlm  Jun  3 09:12\n"
        " PENDING REASONS:\n Job slot limit reached: 4 hosts;\n",
        "scheduling", "queued_waiting_turn", "wait",
    ),
    "squeue shows the job behind higher-priority ones": (
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"
        "          20451177     a100q  sweep-3    frank PD       0:00      4 (Priority)\n",
        "scheduling", "queued_waiting_turn", "wait",
    ),
    "an older coscheduling plugin waits for the group's pods": (
        "  Warning  FailedScheduling  14s (x9 over 3m)  scheduler-plugins-scheduler  0/8 nodes are available: "
        "cannot find enough sibling pods for PodGroup llama-ft-pg\n",
        "scheduling", "gang_unschedulable", "wait",
    ),
    "PBS kills a job at its walltime": (
        "Epoch 3 batch 1200/5000 loss 0.88\n=>> PBS: job killed: walltime 14412 exceeded limit 14400\n",
        "scheduling", "job_timeout_no_checkpoint", "resubmit_with_changes",
    ),
    "LSF kills a checkpointing job at its run limit": (
        "[INFO] saved checkpoint to /gpfs/u/run/ckpt_0040.pt\n"
        "TERM_RUNLIMIT: job killed after reaching LSF run time limit.\nExited with exit code 140.\n",
        "scheduling", "job_timeout", "resubmit",
    ),
})

# Log batch 4's capacity, scheduling, ray, storage and healthy-run rules: each line in other
# surroundings (another tool, cloud, version, names and numbers) than its corpus excerpt.
CASES.update({
    "the aws CLI refused by the account's instance limit": (
        "$ aws ec2 run-instances --instance-type p4d.24xlarge --count 2 --image-id ami-0abc\n"
        "An error occurred (InstanceLimitExceeded) when calling the RunInstances operation: You have "
        "requested more instances (2) than your current instance limit of 0 allows for the specified instance type.\n",
        "capacity", "cloud_quota_exceeded", "escalate_infra",
    ),
    "Terraform creating a GCE VM over a regional GPU quota": (
        "google_compute_instance.trainer[0]: Creating...\n"
        "Error: Error creating instance: googleapi: Error 403: Quota 'NVIDIA_A100_GPUS' exceeded.  Limit: 8.0 "
        "in region europe-west4., quotaExceeded\n",
        "capacity", "cloud_quota_exceeded", "escalate_infra",
    ),
    "az vm create over the family's core quota": (
        "(OperationNotAllowed) Operation could not be completed as it results in exceeding approved "
        "standardNCADSA100v4Family Cores quota. Additional details - Deployment Model: Resource Manager, "
        "Location: eastus, Current Limit: 0, Current Usage: 0, Additional Required: 24\n",
        "capacity", "cloud_quota_exceeded", "escalate_infra",
    ),
    "a Ray autoscaler's launch refused by the same quota stays Ray's": (
        "2024-02-01 10:00:03,511 INFO autoscaler.py:1330 -- StandardAutoscaler: Queue 3 new nodes for launch\n"
        "2024-02-01 10:00:04,118 ERROR node_launcher.py:100 -- Failed to launch 3 node(s) of type gpu_worker. "
        "(VcpuLimitExceeded): You have requested more vCPU capacity than your current vCPU limit of 32 allows.\n",
        "ray", "ray_autoscaler_quota_exceeded", "escalate_infra",
    ),
    "NotTriggerScaleUp with a node group in backoff among others": (
        "  Normal   NotTriggerScaleUp  2m (x41 over 12m)  cluster-autoscaler  pod didn't trigger scale-up: "
        "2 node(s) didn't match Pod's node affinity/selector, 1 in backoff after failed scale-up\n",
        "capacity", "capacity_scale_up_backoff", "escalate_infra",
    ),
    "a Karpenter v1alpha5 provisioner at its limits": (
        "karpenter-7d9c  controller  ERROR  Could not schedule pod, all available instance types exceed limits for "
        "provisioner: \"a100-pool\"  {\"commit\": \"5a2fe84\", \"pod\": \"train/bert-large-0\"}\n",
        "capacity", "capacity_nodepool_limits_reached", "wait",
    ),
    "gcloud creating a VM in a zone out of A100s": (
        "ERROR: (gcloud.compute.instances.create) Could not fetch resource:\n"
        " - The zone 'projects/ml-prod/zones/us-central1-f' does not have enough resources available to fulfill "
        "the request.  '(resource type:compute)'. [ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS]\n",
        "capacity", "cloud_capacity_unavailable", "wait",
    ),
    "Ray's monitor log with the same stockout stays Ray's": (
        "==> /tmp/ray/session_2024-03-02_10-11-12_000001_77/logs/monitor.log <==\n"
        "2024-03-02 10:20:01,002 INFO node_launcher.py:78 -- NodeLauncher0: Got 2 nodes to launch.\n"
        "2024-03-02 10:20:02,415 INFO node_provider.py:408 -- create_instances: Attempt failed with An error occurred "
        "(InsufficientInstanceCapacity) when calling the RunInstances operation (reached max retries: 0): We currently "
        "do not have sufficient p4d.24xlarge capacity in the Availability Zone you requested (us-east-1c).\n",
        "ray", "ray_autoscaler_no_capacity", "wait",
    ),
    "scontrol show job over a maintenance reservation": (
        "JobId=88120 JobName=pretrain-13b\n"
        "   JobState=PENDING Reason=ReqNodeNotAvail,_Reserved_for_maintenance Dependency=(null)\n"
        "   TimeLimit=7-00:00:00 TimeMin=N/A\n",
        "scheduling", "pending_maintenance_reservation", "wait",
    ),
    "squeue with a job pinned to drained nodes": (
        "  JOBID PARTITION  NAME     USER  ST  TIME  NODES NODELIST(REASON)\n"
        "  51233 a100       eval-7b  kim   PD  0:00      2 (ReqNodeNotAvail, UnavailableNodes:a100-[03-04])\n",
        "scheduling", "pending_required_nodes_unavailable", "escalate_user",
    ),
    "containerd refused by a registry's 429": (
        "  Warning  Failed  41s  kubelet  Failed to pull image \"quay.io/org/infer:2.4\": failed to pull and unpack image "
        "\"quay.io/org/infer:2.4\": failed to copy: httpReadSeeker: failed open: unexpected status code "
        "https://quay.io/v2/org/infer/blobs/sha256:9f1e: 429 Too Many Requests\n",
        "scheduling", "image_pull_rate_limited", "wait",
    ),
    "a PodGroup kind the API server does not know": (
        "E0412 09:13:55.201  1 job_controller.go:311] Sync MPIJob ml/bert-mpi: "
        "no matches for kind \"PodGroup\" in version \"scheduling.x-k8s.io/v1alpha1\"\n",
        "scheduling", "gang_scheduler_crd_missing", "escalate_infra",
    ),
    "a pod affinity that refuses the node with room": (
        "  Warning  FailedScheduling  12s  default-scheduler  0/9 nodes are available: 2 node(s) didn't match pod "
        "affinity rules, 7 Insufficient nvidia.com/gpu. preemption: 0/9 nodes are available: 2 Preemption is not "
        "helpful for scheduling, 7 No preemption victims found for incoming pod.\n",
        "scheduling", "pod_affinity_unsatisfiable", "resubmit_with_changes",
    ),
    "a modern Ray driver joining a cluster of another version": (
        "2024-06-03 14:02:11,330\tINFO worker.py:1540 -- Connecting to existing Ray cluster at address: 10.4.0.2:6379...\n"
        "RuntimeError: Version mismatch: The cluster was started with:\n"
        "    Ray: 2.9.3\n"
        "    Python: 3.10.13\n"
        "This process on node 10.4.0.17 was started with:\n"
        "    Ray: 2.10.0\n"
        "    Python: 3.11.8\n",
        "ray", "ray_version_mismatch", "resubmit_with_changes",
    ),
    "the Hub's 502 while transformers resolves a config": (
        "  File \"/opt/conda/lib/python3.11/site-packages/huggingface_hub/utils/_http.py\", line 477, in hf_raise_for_status\n"
        "huggingface_hub.errors.HfHubHTTPError: 502 Server Error: Bad Gateway for url: "
        "https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json\n",
        "storage", "hf_hub_unavailable", "resubmit",
    ),
    "a read timeout on the Hub's LFS CDN": (
        "requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='cdn-lfs-us-1.hf.co', port=443): "
        "Read timed out. (read timeout=10)\n",
        "storage", "hf_hub_unavailable", "resubmit",
    ),
    "a Lightning epoch that ends, then an ignored destructor error": (
        "Epoch 9: 100%|##########| 250/250 [00:41<00:00, 6.02it/s, v_num=3, train_loss=0.412]\n"
        "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f3a1c2b9ee0>\n"
        "Traceback (most recent call last):\n"
        "  File \"/venv/lib/python3.10/site-packages/torch/utils/data/dataloader.py\", line 1479, in __del__\n"
        "    self._shutdown_workers()\n"
        "OSError: [Errno 9] Bad file descriptor\n",
        "none", "ignored_exception_at_teardown", "none",
    ),
    "an ignored weakref callback as the interpreter exits": (
        "Exception ignored in: <function WeakValueDictionary.__init__.<locals>.remove at 0x7f0e1a2b3c10>\n"
        "Traceback (most recent call last):\n"
        "  File \"/usr/lib/python3.8/weakref.py\", line 103, in remove\n"
        "TypeError: 'NoneType' object is not callable  (sys.meta_path is None, Python is likely shutting down)\n",
        "none", "ignored_exception_at_teardown", "none",
    ),
    "torchrun's agent saying its worker group finished": (
        "INFO:torch.distributed.elastic.agent.server.api:[default] worker group successfully finished. "
        "Waiting 300 seconds for other agents to finish.\n"
        "INFO:torch.distributed.elastic.agent.server.api:Done waiting for other agents. Elapsed: 0.0009 seconds\n"
        '{"name": "torchelastic.worker.status.SUCCEEDED", "source": "AGENT", "timestamp": 0, "metadata": '
        '{"run_id": "job-77", "global_rank": null, "group_rank": 1, "state": "SUCCEEDED", "raw_error": null}}\n',
        "none", "elastic_workers_succeeded", "none",
    ),
    "controller-runtime's logger notice from another Go CLI": (
        "$ kubectl kueue create localqueue team-a-lq -c team-a\n"
        "localqueue.kueue.x-k8s.io/team-a-lq created\n"
        "[controller-runtime] log.SetLogger(...) was never called; logs will not be displayed.\n"
        "Detected at:\n"
        "\t>  goroutine 1 [running]:\n"
        "\t>  runtime/debug.Stack()\n",
        "none", "controller_runtime_logger_unset", "none",
    ),
    "a plain pod's node selector that no node matches": (
        "  Warning  FailedScheduling  3m  default-scheduler  0/12 nodes are available: 4 node(s) had untolerated taint "
        "{node-role: infra}, 8 node(s) didn't match Pod's node affinity/selector. preemption: 0/12 nodes are "
        "available: 12 Preemption is not helpful for scheduling.\n",
        "scheduling", "node_affinity_mismatch", "resubmit_with_changes",
    ),
    "a RayCluster's worker pod on a selector no node matches stays Ray's": (
        "  Normal   CreatedWorkerPod  9m  raycluster-controller  Created worker Pod ml/sft-raycluster-q2-gpu-worker-7x\n"
        "  Warning  FailedScheduling  2m  default-scheduler  0/5 nodes are available: 5 node(s) didn't match Pod's "
        "node affinity/selector.\n",
        "ray", "rayjob_pending_node_selector", "escalate_user",
    ),
})


@pytest.mark.parametrize("name", list(CASES))
def test_a_differently_worded_line_gets_the_same_verdict(name):
    text, family, diagnosis, remedy = CASES[name]
    v = diagnose_text(text)
    assert (v.family, v.diagnosis, v.remedy) == (family, diagnosis, remedy), v.evidence


def test_the_exit_warning_after_a_traceback_is_not_called_healthy():
    v = diagnose_text(
        "Traceback (most recent call last):\n  File \"t.py\", line 3, in <module>\n"
        "ValueError: bad shape\n"
        "[rank0]:[W1104 22:10:05.1 ProcessGroupNCCL.cpp:1250] Warning: WARNING: destroy_process_group() "
        "was not called before program exit, which can leak resources.\n")
    assert v.family != "none"


def test_a_pending_job_under_the_qos_is_not_a_refused_submission():
    # squeue's reason column names the limit without sbatch's refusal: it waits, it was not refused.
    v = diagnose_text("JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)\n"
                      "  9001 gpu train bob PD 0:00 1 (QOSMaxGRESPerUser)\n")
    assert v.diagnosis != "submission_rejected"


def test_c10d_failing_after_its_ipv6_warning_is_not_healthy():
    v = diagnose_text(
        "[W socket.cpp:663] [c10d] The client socket cannot be initialized to connect to [::1]:29500 "
        "(errno: 97 - Address family not supported by protocol).\n"
        "[E socket.cpp:957] [c10d] The client socket has failed to connect to any network address of (master, 29500).\n"
        "torch.distributed.DistNetworkError: Connection refused\n")
    assert v.family != "none"


def test_a_pbs_job_refused_at_submission_is_not_waiting():
    v = diagnose_text("$ qsub -l select=1:ngpus=16 run.pbs\nqsub: Job exceeds queue resource limits MSG=cannot satisfy queue max ngpus requirement\n")
    assert v.diagnosis != "queued_waiting_turn"


def test_a_registry_outage_is_not_the_owners_image_to_fix():
    v = diagnose_text(
        "  Warning  Failed   20s  kubelet  Failed to pull image \"reg.example/ml/trainer:3.1\": unexpected status "
        "from HEAD request to https://reg.example/v2/ml/trainer/manifests/3.1: 503 Service Unavailable\n"
        "  Normal   BackOff  5s   kubelet  Back-off pulling image \"reg.example/ml/trainer:3.1\"\n")
    assert v.diagnosis != "image_pull_backing_off"


def test_a_gang_held_by_a_node_selector_is_not_a_plain_wait():
    v = diagnose_text(
        "  Warning  Unschedulable  1m  volcano  4/4 tasks in gang unschedulable: pod group is not ready, 4 Pending, "
        "4 minAvailable; Pending: 4 Unschedulable\n"
        "  Warning  FailedScheduling  1m  volcano  0/6 nodes are unavailable: 6 node(s) didn't match Pod's node "
        "affinity/selector.\n")
    assert v.diagnosis != "gang_unschedulable"


def test_a_kuberay_worker_that_cannot_scale_up_stays_a_ray_verdict():
    v = diagnose_text(
        "Normal CreatedWorkerPod: Created worker Pod ml/llm-raycluster-x7-gpu-worker-2b\n"
        "Warning FailedScaleUp: Node scale up in zones us-east4-a associated with this pod failed: GCE quota exceeded. "
        "Pod is at risk of not being scheduled.\n")
    assert v.family == "ray"


def test_a_gcs_that_was_killed_is_not_merely_unreachable():
    v = diagnose_text(
        "Failed to connect to GCS within 60 seconds. GCS may have been killed. It's either GCS is terminated by "
        "`ray stop` or is killed unexpectedly.\n"
        "[2024-02-02 03:04:05,000 W 11 11] gcs_rpc_client.h:151: Failed to connect to GCS at address 10.1.1.1:6379 within 5 seconds.\n")
    assert v.diagnosis != "ray_gcs_unreachable"


def test_joining_a_gcs_at_an_empty_host_is_a_config_bug_not_an_outage():
    v = diagnose_text("+ ray start --address=:6379 --block\n"
                      "gcs_rpc_client.h:151: Failed to connect to GCS at address :6379 within 5 seconds.\n")
    assert v.diagnosis != "ray_gcs_unreachable"


def test_a_node_launch_that_failed_is_not_still_launching():
    v = diagnose_text("Pending:\n gpu-a10g, 1 launching\nRecent failures:\n gpu-a10g: InsufficientInstanceCapacity\n")
    assert v.diagnosis != "capacity_nodes_launching"


def test_a_time_limit_after_checkpoints_is_a_plain_resume():
    v = diagnose_text(
        "[2025-04-18 05:40:02] Saving checkpoint to /scratch/run3/checkpoint-4000\n"
        "[2025-04-18 05:41:37] Model weights saved in /scratch/run3/checkpoint-4000/model.safetensors\n"
        "slurmstepd: error: *** JOB 7781002 ON gpu-c203 CANCELLED AT 2025-04-18T06:00:14 DUE TO TIME LIMIT ***\n")
    # The save finished before the limit (a save only begun is timeout_during_checkpoint_save's).
    assert (v.diagnosis, v.remedy) == ("job_timeout", "resubmit")


def test_a_batch_size_not_divisible_is_not_a_parallel_size_problem():
    v = diagnose_text("ValueError: global batch size (30) must be divisible by micro batch size (4) times data parallel size (2)\n")
    assert v.diagnosis != "parallel_size_does_not_divide_model"


def test_a_stale_handle_on_a_plain_output_file_is_not_a_cache_race():
    v = diagnose_text(
        "  File \"/home/u/train/logger.py\", line 40, in write\n    self.fh.flush()\n"
        "OSError: [Errno 116] Stale file handle\n")
    assert v.diagnosis == "stale_file_handle"


def test_a_missing_tag_in_the_registry_the_job_named_is_the_owners():
    v = diagnose_text(
        "  Warning  Failed  9s  kubelet  Failed to pull image \"ghcr.io/acme/trainer:v9\": rpc error: code = NotFound "
        "desc = failed to pull and unpack image \"ghcr.io/acme/trainer:v9\": failed to resolve reference "
        "\"ghcr.io/acme/trainer:v9\": ghcr.io/acme/trainer:v9: not found\n")
    assert (v.diagnosis, v.remedy) == ("image_pull_bad_tag", "escalate_user")


# Log batch 4 (distributed, hardware, memory, stuck, user_code forms): each line worded the way the
# tool prints it, in other surroundings, numbers and names than its corpus excerpt.
BATCH4_FORMS = {
    "a DataLoader bus error whose message a terminal wrapped": (
        "Epoch 2/10:  38%|███▊      | 112/295\n"
        "RuntimeError: DataLoader worker (pid 20817) is killed by signal:\n"
        "Bus error. It is possible that dataloader's workers are out of\n"
        "shared memory. Please try to raise your shared memory limit.\n",
        "memory", "shm_exhausted", "resubmit_with_changes",
    ),
    "NCCL 2.8's shm segment failing in posix_fallocate": (
        "gpu-n4:3310:3391 [2] NCCL INFO Channel 00 : 2[41000] -> 3[81000] via P2P/IPC\n"
        "gpu-n4:3310:3391 [2] include/shm.h:28 NCCL WARN Call to posix_fallocate failed: No space left on device\n"
        "gpu-n4:3310:3391 [2] include/shm.h:48 NCCL WARN Error while creating shared memory segment "
        "nccl-shm-send-7d1e0c44aa9b3f60-2-3-0 (size 4460544)\n",
        "memory", "shm_exhausted", "resubmit_with_changes",
    ),
    "a batch script's child ended by SIGKILL": (
        "Loading checkpoint shards:  50%|█████     | 2/4 [00:41<00:41, 20.7s/it]\n"
        "/var/spool/pbs/mom_priv/jobs/88123.pbs01.SC: line 14: 19044 Killed                  python infer.py --model 13b\n",
        "memory", "host_oom", "resubmit_with_changes",
    ),
    "a bare Killed after a model load": (
        "Loading weights from ./ckpt/pytorch_model.bin (26.1 GB)\n"
        "Killed\n",
        "memory", "host_oom", "resubmit_with_changes",
    ),
    "NCCL's interface list pasted one entry a line, with a libvirt bridge in it": (
        "node2:911:911 [0] NCCL INFO NET/Socket : Using\n"
        "[0]ens1f0:10.4.0.12<0>\n"
        "[1]virbr0:192.168.122.1<0>\n"
        "node2:911:911 [0] NCCL INFO Using network Socket\n",
        "distributed", "nccl_socket_interface", "resubmit_with_changes",
    ),
    "a RoCE QP timing out towards a remote NIC on its IPv4-mapped GID": (
        "gpu-r3-07:55120:55301 [3] NCCL INFO NCCL_IB_GID_INDEX set by environment to 3.\n"
        "gpu-r3-07:55120:55301 [3] misc/ibvwrap.cc:214 NCCL WARN Call to ibv_modify_qp failed with 110 Connection "
        "timed out, on dev mlx5_4:1, curr state INIT, next state RTR, local GID index 3, local GID ::ffff:10.20.3.7, "
        "remote GID ::ffff:10.20.9.41\n",
        "distributed", "nccl_ib_cross_rail_timeout", "resubmit_with_changes",
    ),
    "a CUDA error under systemd, then processes that outlive SIGKILL": (
        "CUDA error 999 at /src/llama.cpp/ggml-cuda.cu:1512: unknown error\n"
        "inference-api.service: State 'stop-sigterm' timed out. Killing.\n"
        "inference-api.service: Killing process 7712 (server) with signal SIGKILL.\n"
        "inference-api.service: Processes still around after SIGKILL. Ignoring.\n",
        "hardware", "gpu_wedged_unkillable", "exclude_node",
    ),
    "a CUDA error, then slurmstepd giving up on the step": (
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "slurmstepd: error: *** STEP 5512.0 STEPD TERMINATED ON dgx-b12 AT 2025-03-02T11:04:40 DUE TO JOB NOT "
        "ENDING WITH SIGNALS ***\n",
        "hardware", "gpu_wedged_unkillable", "exclude_node",
    ),
    "Horovod 0.2x's stall inspector with its Missing ranks block": (
        "[2024-01-09 10:12:44.310922: W /tmp/pip-install/horovod/common/stall_inspector.cc:107] One or more tensors "
        "were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of "
        "ranks for more than 120 seconds. This may indicate that different ranks are trying to submit different "
        "tensors or that only subset of ranks is submitting tensors, which will cause deadlock.\n"
        "Missing ranks:\n"
        "1: [DistributedAdam_Allreduce/cond_41/HorovodAllreduce_grads_41_0]\n",
        "stuck", "collective_missing_ranks", "escalate_user",
    ),
    "a single-GPU vLLM engine whose broadcast queue stays full": (
        "INFO 11-02 09:00:01 [loggers.py:118] Avg prompt throughput: 0.0 tokens/s\n"
        "(EngineCore_0 pid=88) INFO 11-02 09:03:12 [shm_broadcast.py:466] No available shared memory broadcast "
        "block found in 60 seconds. This typically happens when some processes are hanging.\n"
        "(EngineCore_0 pid=88) INFO 11-02 09:04:12 [shm_broadcast.py:466] No available shared memory broadcast "
        "block found in 60 seconds. This typically happens when some processes are hanging.\n",
        "stuck", "inference_engine_hang", "escalate_user",
    ),
    "every rank's log ending at the extensions root": (
        "[2025-02-11 08:00:10,004] [INFO] [real_accelerator.py:219:get_accelerator] Setting ds_accelerator to cuda\n"
        "Using /home/jdoe/.cache/torch_extensions/py311_cu124 as PyTorch extensions root...\n"
        "Using /home/jdoe/.cache/torch_extensions/py311_cu124 as PyTorch extensions root...\n",
        "stuck", "jit_build_lock_wait", "resubmit_with_changes",
    ),
    "a log ending inside c10d's store-based barrier": (
        "Loading dataset shards: 100%|██████████| 12/12\n"
        "INFO:torch.distributed.distributed_c10d:Added key: store_based_barrier_key:1 to store for rank: 5\n",
        "stuck", "hang_in_distributed_init", "resubmit_with_changes",
    ),
    "the bf16 check of HF Trainer on a V100": (
        "  File \"/opt/conda/lib/python3.10/site-packages/transformers/training_args.py\", line 1499, in __post_init__\n"
        "    raise ValueError(\n"
        "ValueError: Your setup doesn't support bf16/gpu. You need torch>=1.10, using Ampere GPU with cuda>=11.0\n",
        "user_code", "bf16_unsupported_gpu", "resubmit_with_changes",
    ),
    "vLLM's dtype check on an RTX 2080": (
        "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your NVIDIA GeForce "
        "RTX 2080 Ti GPU has compute capability 7.5.\n",
        "user_code", "bf16_unsupported_gpu", "resubmit_with_changes",
    ),
    "a state dict from another vocabulary size": (
        "RuntimeError: Error(s) in loading state_dict for LlamaForCausalLM:\n"
        "\tsize mismatch for model.embed_tokens.weight: copying a param with shape torch.Size([32000, 4096]) from "
        "checkpoint, the shape in current model is torch.Size([32001, 4096]).\n",
        "user_code", "checkpoint_shape_mismatch", "escalate_user",
    ),
}

# Lines that look alike but are another thing: (text, a diagnosis the verdict must not be).
BATCH4_NEAR_MISSES = {
    "fallocate on a full data disk, not NCCL's shm": (
        "fallocate: fallocate failed: No space left on device\n",
        "shm_exhausted",
    ),
    "a C program's own bus error": (
        "./preprocess: line 3: 4411 Bus error               (core dumped) ./resize_images\n",
        "shm_exhausted",
    ),
    "Killed in a sentence": (
        "INFO cleanup: Killed 3 stale workers from the previous run\n",
        "host_oom",
    ),
    "the shell's Killed after the scheduler's own time limit": (
        "=>> PBS: job killed: walltime 7230 exceeded limit 7200\n"
        "/var/spool/pbs/mom_priv/jobs/4410.pbs01.SC: line 22: 30113 Killed                  python pretrain.py\n",
        "host_oom",
    ),
    "an interface list of real NICs only": (
        "NCCL INFO NET/Socket : Using\n"
        "[0]ens1f0:10.4.0.12<0>\n"
        "[1]ens1f1:10.4.1.12<0>\n"
        "lo: packets 12\n",
        "nccl_socket_interface",
    ),
    "a QP timeout on a link-local GID (the GID's fault)": (
        "NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_0:1, curr state INIT, "
        "next state RTR, local GID index 0, local GID fe80::ba59:9f03:a3:1c2e, remote GID fe80::ba59:9f03:a3:22f0\n",
        "nccl_ib_cross_rail_timeout",
    ),
    "a QP timeout with NCCL_CROSS_NIC already 0": (
        "NCCL INFO NCCL_CROSS_NIC set by environment to 0.\n"
        "NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_2:1, curr state INIT, "
        "next state RTR, local GID index 3, local GID ::ffff:10.1.2.3, remote GID ::ffff:10.1.7.9\n",
        "nccl_ib_cross_rail_timeout",
    ),
    "processes that outlive SIGKILL with no GPU error": (
        "backup.service: State 'stop-sigterm' timed out. Killing.\n"
        "backup.service: Processes still around after SIGKILL. Ignoring.\n",
        "gpu_wedged_unkillable",
    ),
    "vLLM's broadcast notice once, during a compile": (
        "(EngineCore_0 pid=88) INFO [shm_broadcast.py:466] No available shared memory broadcast block found in 60 "
        "seconds. This typically happens when some processes are hanging or doing some time-consuming work "
        "(e.g. compilation).\n"
        "INFO [monitor.py:34] torch.compile takes 71.2 s in total\n",
        "inference_engine_hang",
    ),
    "the extensions root followed by the module loading": (
        "Using /root/.cache/torch_extensions/py310_cu121 as PyTorch extensions root...\n"
        "Loading extension module fused_adam...\n"
        "Time to load fused_adam op: 0.61 seconds\n",
        "jit_build_lock_wait",
    ),
    "a build of the job's own still compiling": (
        "Using /root/.cache/torch_extensions/py310_cu121 as PyTorch extensions root...\n"
        "Emitting ninja build file /root/.cache/torch_extensions/py310_cu121/cpu_adam/build.ninja...\n"
        "Building extension module cpu_adam...\n"
        "Using /root/.cache/torch_extensions/py310_cu121 as PyTorch extensions root...\n",
        "jit_build_lock_wait",
    ),
    "DeepSpeed's init followed by training": (
        "[2024-05-01 09:00:00,100] [INFO] [comm.py:637:init_distributed] cdb=None\n"
        "[2024-05-01 09:00:00,101] [INFO] [comm.py:668:init_distributed] Initializing TorchBackend in DeepSpeed with backend nccl\n"
        "[2024-05-01 09:02:10,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=0, lr=[1e-05]\n",
        "hang_in_distributed_init",
    ),
    "a bf16 setting mentioned in a config dump": (
        "training args: bf16=False, fp16=True, compute capability of at least 8.0 recommended for bf16\n",
        "bf16_unsupported_gpu",
    ),
    "a shape mismatch in the model's own forward": (
        "RuntimeError: The size of tensor a (4096) must match the size of tensor b (4097) at non-singleton dimension 1\n",
        "checkpoint_shape_mismatch",
    ),
}


@pytest.mark.parametrize("name", list(BATCH4_FORMS))
def test_a_batch4_form_in_other_surroundings_gets_its_verdict(name):
    text, family, diagnosis, remedy = BATCH4_FORMS[name]
    v = diagnose_text(text)
    assert (v.family, v.diagnosis, v.remedy) == (family, diagnosis, remedy), v.evidence


@pytest.mark.parametrize("name", list(BATCH4_NEAR_MISSES))
def test_a_batch4_near_miss_does_not_get_the_rule(name):
    text, not_this = BATCH4_NEAR_MISSES[name]
    assert diagnose_text(text).diagnosis != not_this
