"""A cluster config file (cluster.yaml): which backend, how to reach it, and the guard policy.

```yaml
name: gpu-prod                    # the cluster's name in the incident store
backend: slurm
slurm:                            # tools/backends/slurm/_config.py: SlurmSettings
  connection:
    method: ssh                   # local | ssh
    ssh:
      hosts: [login1.example.org, login2.example.org]   # failover, in order
      user: crashcart
      key_file: ~/.ssh/crashcart_ed25519
      key_passphrase_env: CRASHCART_KEY_PASSPHRASE       # or key_passphrase_file; never inline
      known_hosts: ~/.ssh/known_hosts
  env: {SLURM_CONF: /etc/slurm/slurm.conf}
  node_access: {method: ssh}      # ssh | srun | none
  resubmit: {config: args}        # args | file (config_file: ...) | none
guard: guard.yaml                 # a path (relative to this file) or the policy inline
slack: {bot_token_env: SLACK_BOT_TOKEN, app_token_env: SLACK_APP_TOKEN, channel: "#gpu-oncall"}
notifiers:                        # agent/notify: where escalate/notify go (the store always)
  - {kind: webhook, url: "https://hooks.example.org/oncall", token_env: ONCALL_TOKEN}
  - {kind: email, host: smtp.example.org, port: 587, security: starttls, username: crashcart,
     password_env: SMTP_PASSWORD, sender: crashcart@example.org, to: [gpu-oncall@example.org]}
  - {kind: slack, token_env: SLACK_BOT_TOKEN, channel: "#gpu-oncall",     # agent/notify/slack.py
     route: {teams: {hardware: {channel: "#gpu-hardware", group: S0HWTEAM01}}}}
```

or, for Kubernetes (tools/backends/kubernetes/_config.py: KubernetesSettings):

```yaml
name: gpu-k8s
backend: kubernetes
kubernetes:
  connection: {method: kubeconfig, kubeconfig: ~/.kube/config, context: gpu-prod}   # or method: in_cluster
  namespaces: [training, research]
guard: guard.yaml                 # a path (relative to this file) or the policy inline
```

or, for Ray (tools/backends/ray/_config.py: RaySettings):

```yaml
name: ray-prod
backend: ray
ray: {dashboard: "http://ray-head:8265", gcs: "ray-head:6379"}
```

Strict like every crashcart file: an unknown key is an error naming the file and the
field. Secrets are never in the file: a passphrase or password is named by the
environment variable or file that holds it and read only when a connection is made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from crashcart.agent.guard import GuardPolicy, PolicyError, load_policy, policy_from_dict
from crashcart.tools.backends.kubernetes._config import KubernetesSettings
from crashcart.tools.backends.ray._config import RaySettings
from crashcart.tools.backends.slurm import SlurmBackend, SlurmSettings
from crashcart.tools.yamlio import DataFileError, FileError, describe_validation_error, read_yaml_file


class ClusterConfigError(FileError, ValueError):
    """A cluster config is wrong; the message names the file and the field."""


class ClusterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    backend: Literal["slurm", "kubernetes", "ray"]
    slurm: SlurmSettings = SlurmSettings()
    kubernetes: KubernetesSettings = KubernetesSettings()
    ray: RaySettings = RaySettings()
    llm: dict[str, Any] | None = None
    """The model for `--policy llm|auto` (agent/policies/llm/_settings.py: LLMSettings): model,
    base_url, api_key_env or api_key_file (never the key itself), budget, retry."""
    guard: str | dict[str, Any] | None = None
    """A guard policy: a path to a guard.yaml (relative to this file) or the same mapping
    inline. Absent: the built-in policy (dry_run)."""
    slack: Any = None
    """The Slack app's settings (agent/interfaces/slack/_settings.py: SlackSettings): where its tokens
    and signing secret are (env or file, never inline), the default channel."""
    notifiers: list[Any] = []
    """Where escalations and notifications go (agent/notify): NotifierSettings by kind. Declared after
    `slack`, so that a Slack notifier without a token of its own can use the app's."""

    @field_validator("slack", mode="before")
    @classmethod
    def _slack(cls, v: Any) -> Any:
        from crashcart.agent.interfaces.slack._settings import SlackSettings

        return None if v is None else SlackSettings.model_validate(v)

    @field_validator("notifiers", mode="before")
    @classmethod
    def _notifiers(cls, v: Any, info: ValidationInfo) -> Any:
        from crashcart.agent.notify import parse_notifiers

        return parse_notifiers(v, slack_app=info.data.get("slack"))

    def make_backend(self, transport=None):
        return _BACKENDS[self.backend](self, transport)


def _kubernetes(config: ClusterConfig, _transport=None):
    from crashcart.tools.backends.kubernetes import KubernetesBackend  # the client loads on first use

    return KubernetesBackend(config.kubernetes)


def _ray(config: ClusterConfig, _transport=None):
    from crashcart.tools.backends.ray import RayBackend  # Ray's client loads on first use

    return RayBackend(config.ray)


# backend: -> how a cluster config makes it (one line each).
_BACKENDS = {
    "slurm": lambda config, transport: SlurmBackend(config.slurm, transport=transport),
    "kubernetes": _kubernetes,
    "ray": _ray,
}


def parse_cluster_config(data: Any, source: str | Path = "<cluster config>") -> tuple[ClusterConfig, GuardPolicy]:
    if not isinstance(data, dict):
        raise ClusterConfigError(source, "a cluster config is one mapping (name, backend, slurm, guard)")
    try:
        config = ClusterConfig.model_validate(data)
    except ValidationError as e:
        raise ClusterConfigError(source, describe_validation_error(e, data)) from None
    if config.llm is not None:
        from crashcart.agent.policies.llm import LLMConfigError, parse_settings

        try:
            parse_settings(config.llm, f"{source}: llm")
        except LLMConfigError as e:
            raise ClusterConfigError(source, f"llm: {e.message}") from None
    return config, _guard(config.guard, source)


def load_cluster_config(path: str | Path) -> tuple[ClusterConfig, GuardPolicy]:
    """The config and its guard policy; ClusterConfigError names the file and the field."""
    path = Path(path)
    try:
        data = read_yaml_file(path)
    except DataFileError as e:
        raise ClusterConfigError(path, e.message) from None
    return parse_cluster_config(data, path)


def _guard(value: str | dict[str, Any] | None, source: str | Path) -> GuardPolicy:
    try:
        if value is None:
            return load_policy(None)
        if isinstance(value, str):
            base = Path(source).parent if Path(str(source)).exists() else Path.cwd()
            return load_policy(base / Path(value).expanduser())
        return policy_from_dict(value, source=f"{source}: guard")
    except PolicyError as e:
        raise ClusterConfigError(source, f"guard: {e}") from None
