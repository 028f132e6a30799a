"""Ray's own clients, imported lazily: the Jobs API (JobSubmissionClient), the state API
(ray.util.state), the autoscaler's cluster status and the GCS (drain-node).

Every SDK failure becomes a ToolError naming the call and the address: an unreachable
head is reported, never a traceback and never an empty (healthy-looking) answer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from crashcart.tools._spec import ToolError
from crashcart.tools.backends.ray._config import RaySettings

T = TypeVar("T")


def _import_ray():
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ToolError("the ray backend needs Ray's client: pip install 'crashcart[ray]'") from None


class RayClient:
    def __init__(self, settings: RaySettings):
        self.settings = settings
        self._jobs = None

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except ToolError:
            raise
        except Exception as e:  # the SDK raises RuntimeError, ConnectionError, requests', grpc's, ...
            raise self._error(what, e) from None

    def _error(self, what: str, e: Exception) -> ToolError:
        text = " ".join(str(e).split())[:400] or type(e).__name__
        return ToolError(f"Ray {what} failed ({self.settings.dashboard}, GCS {self.settings.gcs}): {text}")

    def _prepare(self) -> None:
        for key, value in self.settings.client_env().items():
            os.environ.setdefault(key, value)
        _import_ray()

    @property
    def jobs(self):
        if self._jobs is None:
            self._prepare()
            from ray.job_submission import JobSubmissionClient

            self._jobs = self._call("Jobs API connect", lambda: JobSubmissionClient(
                self.settings.dashboard, headers=self.settings.headers()))
        return self._jobs

    # --- Jobs API -------------------------------------------------------------------------

    def list_jobs(self) -> list[dict[str, Any]]:
        return [_plain(j) for j in self._call("list_jobs", self.jobs.list_jobs)]

    def job(self, submission_id: str) -> dict[str, Any] | None:
        client = self.jobs
        try:
            return _plain(client.get_job_info(submission_id))
        except Exception as e:
            if "does not exist" in str(e):  # the Jobs API's 404: "Job X does not exist."
                return None
            raise self._error(f"get_job_info({submission_id})", e) from None

    def logs(self, submission_id: str) -> str:
        return self._call(f"get_job_logs({submission_id})", lambda: self.jobs.get_job_logs(submission_id))

    def submit(self, **kwargs: Any) -> str:
        return self._call("submit_job", lambda: self.jobs.submit_job(**kwargs))

    def stop(self, submission_id: str) -> bool:
        return self._call(f"stop_job({submission_id})", lambda: self.jobs.stop_job(submission_id))

    # --- state API --------------------------------------------------------------------------

    def state(self, kind: str, filters: list[tuple[str, str, Any]] | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        """`ray list <kind>`: tasks, actors, workers, nodes, placement_groups (detail rows)."""
        self._prepare()
        from ray.util import state

        fn = getattr(state, f"list_{kind}")
        rows = self._call(f"state API list_{kind}", lambda: fn(
            address=self.settings.gcs, filters=filters, limit=limit, detail=True,
            timeout=int(self.settings.timeout), raise_on_missing_output=False))
        return [_plain(r) for r in rows]

    def node_log(self, node_id: str, filename: str, tail: int) -> str:
        self._prepare()
        from ray.util.state import get_log

        return self._call(f"get_log({filename})", lambda: "".join(get_log(
            address=self.settings.gcs, node_id=node_id, filename=filename, tail=tail,
            timeout=int(self.settings.timeout))))

    def cluster_status(self):
        """The autoscaler's view (`ray status`): node states incl. DRAINING, pending demands."""
        self._prepare()
        from ray.autoscaler.v2.sdk import get_cluster_status

        return self._call("cluster status (ray status)", lambda: get_cluster_status(self.settings.gcs))

    def status_text(self, status) -> str:
        from ray.autoscaler.v2.utils import ClusterStatusFormatter

        return ClusterStatusFormatter.format(status, verbose=False)

    def drain(self, node_id: str, message: str, deadline_ms: int) -> tuple[bool, str]:
        """GCS DrainNode, as `ray drain-node --reason DRAIN_NODE_REASON_PREEMPTION` sends it."""
        self._prepare()
        import ray._raylet
        from ray.core.generated import autoscaler_pb2

        def drain() -> tuple[bool, str]:
            gcs = ray._raylet.GcsClient(address=self.settings.gcs)
            reason = autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION")
            return gcs.drain_node(node_id, reason, message, deadline_ms)

        return self._call("drain_node", drain)


def _plain(obj: Any) -> dict[str, Any]:
    """An SDK row (pydantic model, dataclass or dict) as a plain dict with plain values."""
    if isinstance(obj, dict):
        data = dict(obj)
    elif hasattr(obj, "model_dump"):
        data = obj.model_dump()
    elif hasattr(obj, "__dataclass_fields__"):
        data = {k: getattr(obj, k) for k in obj.__dataclass_fields__}
    else:
        data = dict(vars(obj))
    return {k: getattr(v, "value", v) if type(v).__module__.startswith("ray") and hasattr(v, "value") else v
            for k, v in data.items()}
