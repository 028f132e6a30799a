"""The `slurm:` section of a cluster config: how to reach the cluster and how to act on it.

Strict (an unknown key is an error) and secret-free: a passphrase or password
is named by the environment variable or file that holds it, never written here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from crashcart.tools.transport import LocalTransport, Secret, SSHTarget, SSHTransport, Transport

_INLINE_SECRETS = ("password", "passphrase", "key_passphrase", "secret", "token", "private_key")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SSHSettings(_Strict):
    hosts: list[str] = Field(default_factory=list)
    """Login hosts, tried in order (failover)."""
    port: int = Field(22, ge=1, le=65535)
    user: str | None = None
    key_file: str | None = None
    key_passphrase_env: str | None = None
    key_passphrase_file: str | None = None
    password_env: str | None = None
    password_file: str | None = None
    use_agent: bool = False
    known_hosts: str | None = None
    """Checked for every host key (default: ~/.ssh/known_hosts)."""
    allow_unknown_hosts: bool = False
    """Accept a host missing from known_hosts (for this process only). A changed key is always refused."""
    connect_timeout: float = Field(10, gt=0)
    command_timeout: float = Field(60, gt=0)
    retries: int = Field(3, ge=0, le=10)
    backoff_seconds: float = Field(0.5, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _no_inline_secrets(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in _INLINE_SECRETS:
                if key in data:
                    raise ValueError(
                        f"{key!r}: secrets never go in the config file; name an environment variable "
                        f"({'password_env' if key == 'password' else 'key_passphrase_env'}) or a file "
                        f"({'password_file' if key == 'password' else 'key_passphrase_file'}) instead")
        return data

    @field_validator("hosts")
    @classmethod
    def _plain_hosts(cls, hosts: list[str]) -> list[str]:
        for i, host in enumerate(hosts):
            if "@" in host or "://" in host:
                # Not echoed: `user:password@host` would put the password in every message after.
                raise ValueError(f"hosts[{i}] is not a plain host name: give the user as `user:` and a "
                                 "password only through password_env or password_file, never in the host")
        return hosts

    @model_validator(mode="after")
    def _one_source_each(self) -> SSHSettings:
        for name in ("key_passphrase", "password"):
            if getattr(self, f"{name}_env") and getattr(self, f"{name}_file"):
                raise ValueError(f"set {name}_env or {name}_file, not both")
        if not (self.key_file or self.use_agent or self.password_env or self.password_file):
            raise ValueError("no way to log in: set key_file, use_agent: true, or password_env/password_file")
        return self

    @staticmethod
    def _secret(env: str | None, file: str | None) -> Secret | None:
        return Secret(env=env, file=file) if env or file else None

    def target(self, hosts: list[str] | None = None) -> SSHTarget:
        return SSHTarget(
            hosts=tuple(hosts or self.hosts), port=self.port, user=self.user, key_file=self.key_file,
            use_agent=self.use_agent, known_hosts=self.known_hosts,
            allow_unknown_hosts=self.allow_unknown_hosts, connect_timeout=self.connect_timeout,
            command_timeout=self.command_timeout, retries=self.retries, backoff=self.backoff_seconds,
            passphrase=self._secret(self.key_passphrase_env, self.key_passphrase_file),
            password=self._secret(self.password_env, self.password_file),
        )


class Connection(_Strict):
    method: Literal["local", "ssh"] = "local"
    """local: crashcart runs on a login node; ssh: it logs in to one."""
    ssh: SSHSettings | None = None
    timeout: float = Field(60, gt=0)
    """Seconds a local command may take."""

    @model_validator(mode="after")
    def _ssh_needs_hosts(self) -> Connection:
        if self.method == "ssh" and (self.ssh is None or not self.ssh.hosts):
            raise ValueError("method ssh needs ssh.hosts (the login nodes)")
        if self.method == "local" and self.ssh is not None:
            raise ValueError("ssh settings given but method is local; set method: ssh")
        return self


class NodeAccess(_Strict):
    """How node commands (nvidia-smi, the kernel log) reach a compute node."""

    method: Literal["srun", "ssh", "none"] = "srun"
    """srun: a one-task step on the node (inside the job running there, else a tiny job of
    its own, which leaves a `crashcart-probe` record in accounting); ssh: log in to the node;
    none: node commands report that they are not available."""
    host: str = "{address}"
    """ssh: the host to log in to, from the node's {name}, {address} (NodeAddr) or {hostname}."""
    ssh: SSHSettings | None = None
    """ssh: credentials for the nodes (default: the connection's)."""
    timeout: float = Field(30, gt=0)


class ConfigFile(_Strict):
    path: str
    """The config file the job reads, from {workdir}, {job}, {name}, {user}."""
    format: Literal["auto", "yaml", "json"] = "auto"
    pass_as_env: str | None = None
    """The job finds its config in this environment variable..."""
    pass_as_arg: str | None = None
    """...or in this script argument (e.g. --config)."""

    @model_validator(mode="after")
    def _one_way_in(self) -> ConfigFile:
        if bool(self.pass_as_env) == bool(self.pass_as_arg):
            raise ValueError("set exactly one of pass_as_env, pass_as_arg: how the resubmitted job "
                             "finds its changed copy (the original file is never edited)")
        return self


class Resubmit(_Strict):
    config: Literal["args", "file", "none"] = "args"
    """Where the job's knobs live: args = the script's `--key=value` arguments; file = a YAML/JSON
    file (config_file); none = only env.* and Slurm's own keys can change."""
    config_file: ConfigFile | None = None
    script_dir: str = "~/.crashcart/scripts"
    """On the login node: where the resubmitted batch scripts are kept (sbatch reads them)."""

    @model_validator(mode="after")
    def _file_needs_path(self) -> Resubmit:
        if self.config == "file" and self.config_file is None:
            raise ValueError("config: file needs config_file (path, and pass_as_env or pass_as_arg)")
        return self


class Progress(_Strict):
    """How training_progress reads a job's log (Python regexes, case-insensitive)."""

    step: str = r"\bstep[\s=:]+(?P<step>\d+)"
    loss: str = r"\bloss[\s=:]+(?P<loss>[-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?|nan|inf))"
    tokens_per_sec: str = r"(?P<tps>\d+(?:\.\d+)?)\s*tok(?:en)?s?/s"
    checkpoint: str = r"(?:saved|saving|wrote|writing)\s+checkpoint\b(?:.*?\bstep[\s=:_]*(?P<step>\d+))?(?:.*?(?P<path>/\S+))?"


class SlurmSettings(_Strict):
    connection: Connection = Connection()
    env: dict[str, str] = Field(default_factory=dict)
    """Set for every command on the cluster (e.g. SLURM_CONF)."""
    node_access: NodeAccess = NodeAccess()
    json_output: Literal["auto", "never"] = "auto"
    """auto: `sinfo/squeue --json` on the Slurm versions crashcart has checked; never: text only."""
    resubmit: Resubmit = Resubmit()
    history_days: int = Field(7, ge=1, le=365)
    """How far back sacct looks when no job is named."""
    max_log_lines: int = Field(20000, ge=100)
    progress: Progress = Progress()

    @model_validator(mode="after")
    def _node_ssh_credentials(self) -> SlurmSettings:
        if self.node_access.method == "ssh" and self.node_access.ssh is None and self.connection.ssh is None:
            raise ValueError("node_access.method ssh needs node_access.ssh (or a connection over ssh to borrow from)")
        return self

    def login_transport(self) -> Transport:
        env = {**self.env, "TZ": "UTC"}  # Slurm prints local times; UTC makes them unambiguous
        if self.connection.method == "ssh":
            return SSHTransport(self.connection.ssh.target(), env=env)
        return LocalTransport(env=env, timeout=self.connection.timeout)

    def node_ssh(self) -> SSHSettings | None:
        return self.node_access.ssh or self.connection.ssh
