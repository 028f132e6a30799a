"""The slurm backend: the real CLI (sacct, squeue, sinfo, scontrol, sbatch, scancel),
run locally or over SSH on a login node; node commands over SSH or srun."""

from crashcart.tools.backends.slurm._backend import JobInfo, SlurmBackend
from crashcart.tools.backends.slurm._config import (
    ConfigFile, Connection, NodeAccess, Progress, Resubmit, SlurmSettings, SSHSettings,
)

__all__ = [
    "ConfigFile", "Connection", "JobInfo", "NodeAccess", "Progress", "Resubmit", "SSHSettings",
    "SlurmBackend", "SlurmSettings",
]
