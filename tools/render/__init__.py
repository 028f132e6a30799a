"""Cluster data as text, the way the real commands print it.

A model reads tool output; it has seen real `sacct`, `kubectl describe` and
`nvidia-smi` output far more often than any invented format, so every renderer
here imitates the real command's layout. The fixture backend uses these; a live
backend returns what the command printed and only needs `bound_lines`.
All functions are pure: data in, lines out.

One module a job: `_bounding` (cutting output down, log timestamps), `_formats`
(what several renderers share), `slurm`, `gpu`, `kubernetes`, `ray`, and
`views` (crashcart's own tables). Callers use the names re-exported here.
"""

from crashcart.tools.render._bounding import StampOf, bound_lines, job_log_stamp, kernel_log_stamp
from crashcart.tools.render._formats import aware, elapsed_seconds, is_active, iso_z, slurm_time, table
from crashcart.tools.render.gpu import NVIDIA_SMI_QUERY, gpu_metrics_table, nvidia_smi_csv, throttle_reason, xid_lines
from crashcart.tools.render.kubernetes import (
    describe_node_lines,
    describe_object_lines,
    describe_pod_lines,
    describe_resource_lines,
    event_parts,
    events_lines,
    k8s_age,
    k8s_exit_code,
    kubectl_nodes_lines,
    node_ready,
    node_roles,
    node_status,
    node_taints,
    pod_phase,
    pod_status,
    pods_lines,
    rfc1123z,
    taint_text,
)
from crashcart.tools.render.ray import (
    ray_job_status_lines,
    ray_jobs_lines,
    ray_list_lines,
    ray_message,
    ray_node_id,
    ray_nodes_lines,
    ray_status,
)
from crashcart.tools.render.slurm import (
    SACCT_HEADER,
    compress_hostlist,
    expand_hostlist,
    sacct_lines,
    scontrol_partition_line,
    sinfo_lines,
    sinfo_state,
    slurm_elapsed,
    squeue_lines,
    squeue_time,
)
from crashcart.tools.render.views import history_lines, progress_lines

__all__ = [
    "NVIDIA_SMI_QUERY", "SACCT_HEADER", "StampOf", "aware", "bound_lines", "compress_hostlist",
    "describe_node_lines", "describe_object_lines", "describe_pod_lines", "describe_resource_lines", "elapsed_seconds",
    "event_parts", "events_lines", "expand_hostlist", "gpu_metrics_table", "history_lines",
    "is_active", "iso_z", "job_log_stamp", "k8s_age", "k8s_exit_code", "kernel_log_stamp",
    "kubectl_nodes_lines", "node_ready", "node_roles", "node_status", "node_taints",
    "nvidia_smi_csv", "xid_lines", "pod_phase", "pod_status", "pods_lines", "progress_lines",
    "ray_job_status_lines", "ray_jobs_lines", "ray_list_lines", "ray_message", "ray_node_id", "ray_nodes_lines",
    "ray_status", "rfc1123z", "sacct_lines", "scontrol_partition_line", "sinfo_lines", "sinfo_state", "slurm_elapsed",
    "slurm_time", "squeue_lines", "squeue_time", "table", "taint_text", "throttle_reason",
]
