"""The ray backend: Ray's Jobs API and state API (ray[default], imported lazily), the
autoscaler's status and the GCS drain-node call."""

from crashcart.tools.backends.ray._backend import RayBackend
from crashcart.tools.backends.ray._config import RaySettings

__all__ = ["RayBackend", "RaySettings"]
