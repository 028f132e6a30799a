"""The kubernetes backend: the official `kubernetes` client (extra `.[kubernetes]`, imported
lazily) against a real API server, with kubeconfig/context or in-cluster credentials."""

from crashcart.tools.backends.kubernetes._backend import KubernetesBackend
from crashcart.tools.backends.kubernetes._config import Connection, Drain, KubernetesSettings, NodeAccess

__all__ = ["Connection", "Drain", "KubernetesBackend", "KubernetesSettings", "NodeAccess"]
