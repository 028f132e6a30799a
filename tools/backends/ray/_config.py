"""The `ray:` section of a cluster config: where the head is and how crashcart acts on it.

Strict (an unknown key is an error) and secret-free: a token for a Ray cluster behind an
authenticating proxy is named by the environment variable that holds it, never written here.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field, field_validator

from crashcart.tools.backends.kubernetes._config import KubernetesSettings
from crashcart.tools.backends.slurm._config import Progress

# Without this Ray rewrites 127.0.0.1 to the machine's external address and a client on
# loopback hangs ~40 s waiting for the GCS; harmless on a cluster reached by its real address.
CLIENT_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RaySettings(_Strict):
    dashboard: str = "http://127.0.0.1:8265"
    """The head's dashboard: the Jobs API (JobSubmissionClient) and the state API go through it."""
    gcs: str = "127.0.0.1:6379"
    """The GCS address (host:port of `ray start --head --port`): drain-node and `ray status`."""
    token_env: str | None = None
    """An environment variable holding a bearer token for the dashboard (sent as Authorization)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Set in crashcart's process before Ray's client is imported (e.g. RAY_AUTH_MODE)."""
    timeout: float = Field(30, gt=0)
    """Seconds a state API call may take."""
    history_days: int = Field(7, ge=1, le=365)
    max_log_lines: int = Field(20000, ge=100)
    drain_deadline_seconds: int = Field(0, ge=0)
    """node_drain: how long running work may finish before the node is killed (0: no deadline)."""
    progress: Progress = Progress()
    """How training_progress reads a job's driver log (the same regexes as on Slurm)."""
    kubernetes: KubernetesSettings | None = None
    """Under KubeRay: the Kubernetes cluster the Ray pods run in. The kubectl_* tools (RayJob,
    RayCluster, pods, events, nodes) then answer from it, and node_drain also cordons the
    Kubernetes node under the drained Ray node's pod."""

    @field_validator("dashboard")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"{v!r}: the dashboard address is a URL (http://HOST:8265)")
        return v.rstrip("/")

    def headers(self) -> dict[str, str] | None:
        if not self.token_env:
            return None
        token = os.environ.get(self.token_env)
        if not token:
            from crashcart.tools._spec import ToolError

            raise ToolError(f"ray.token_env names {self.token_env}, but that environment variable is not set")
        return {"Authorization": f"Bearer {token}"}

    def client_env(self) -> dict[str, str]:
        return {**CLIENT_ENV, **self.env}
