"""The official client, built lazily from the settings, answering with the API's own JSON.

Built-in resources are read with raw requests; the training operators' objects (CRDs that
may or may not be installed, in whichever version the cluster serves) through the client's
dynamic client, whose discovery says whether and where each is served.

Responses are read raw (`_preload_content=False`): the objects stay exactly as the API
server sent them (a resubmit re-creates a workload from its own manifest, nothing the
client's models dropped or renamed), and a 10,000-pod list is not turned into 10,000
model objects per poll. Errors become ToolErrors that quote the server's Status message.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from crashcart.tools._spec import ToolError
from crashcart.tools.backends.kubernetes._config import KubernetesSettings


@dataclass(frozen=True)
class Kind:
    """A resource the backend reads: where it lives in the API."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


POD = Kind("", "v1", "pods", "Pod")
NODE = Kind("", "v1", "nodes", "Node", namespaced=False)
EVENT = Kind("", "v1", "events", "Event")
JOB = Kind("batch", "v1", "jobs", "Job")
PDB = Kind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
WORKLOADS = {
    # The training operators' objects, read where their CRDs are installed.
    "pytorchjob": Kind("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
    "mpijob": Kind("kubeflow.org", "v2beta1", "mpijobs", "MPIJob"),
    "rayjob": Kind("ray.io", "v1", "rayjobs", "RayJob"),
    "raycluster": Kind("ray.io", "v1", "rayclusters", "RayCluster"),
    "jobset": Kind("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
    "vcjob": Kind("batch.volcano.sh", "v1alpha1", "jobs", "Job"),
    "workload": Kind("kueue.x-k8s.io", "v1beta1", "workloads", "Workload"),
    "clusterqueue": Kind("kueue.x-k8s.io", "v1beta1", "clusterqueues", "ClusterQueue", namespaced=False),
}
LOCALQUEUE = Kind("kueue.x-k8s.io", "v1beta1", "localqueues", "LocalQueue")
BY_KIND = {(k.api_version, k.kind): k for k in [POD, NODE, EVENT, JOB, PDB, *WORKLOADS.values()]}
BUILTIN = {POD, NODE, EVENT, JOB, PDB}
REDISCOVER_SECONDS = 600
"""How long a CRD found absent stays absent for the watch before discovery is asked again (an
operator installed while crashcart watches is noticed, without rediscovering on every poll);
an explicit read (describe) always asks."""


class NotFound(ToolError):
    pass


class Absent(ToolError):
    """The resource type itself is not served (a CRD that is not installed)."""


class TooManyRequests(ToolError):
    pass


def _status_message(e: Any) -> tuple[int, str, str]:
    code = int(getattr(e, "status", 0) or 0)
    body = getattr(e, "body", None) or getattr(e, "data", None) or b""
    try:
        data = json.loads(body)
        causes = [c.get("message") for c in (data.get("details") or {}).get("causes") or [] if c.get("message")]
        return code, data.get("reason") or "", " ".join([data.get("message") or str(body)[:300], *causes])
    except (ValueError, TypeError):
        return code, getattr(e, "reason", "") or "", (body.decode(errors="replace") if isinstance(body, bytes) else str(body))[:300]


class Api:
    def __init__(self, settings: KubernetesSettings, api_client: Any = None):
        self.settings = settings
        self._client = api_client
        self.absent: dict[str, float] = {}
        """Resource types found not served (plural.group -> when), so a poll does not ask again."""
        self._dynamic: Any = None
        self._discovery_dir: str | None = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._connect()
        return self._client

    def _connect(self) -> Any:
        try:
            from kubernetes import client, config
        except ImportError:
            raise ToolError("the kubernetes backend needs the official client: pip install 'crashcart[kubernetes]'") from None
        c = self.settings.connection
        try:
            if c.method == "in_cluster":
                config.load_incluster_config()
                return client.ApiClient()
            cfg = client.Configuration()
            config.load_kube_config(config_file=c.kubeconfig, context=c.context, client_configuration=cfg)
            return client.ApiClient(cfg)
        except config.ConfigException as e:
            where = "in-cluster service account" if c.method == "in_cluster" else f"kubeconfig {c.kubeconfig or '(default)'}"
            raise ToolError(f"cannot load Kubernetes credentials from the {where}: {e}") from None

    def close(self) -> None:
        if self._discovery_dir:
            shutil.rmtree(self._discovery_dir, ignore_errors=True)
            self._discovery_dir = self._dynamic = None
        if self._client is not None:
            self._client.close()
            self._client = None

    # --- the one request path --------------------------------------------------------

    def call(self, method: str, path: str, query: dict[str, Any] | None = None, body: Any = None,
             content_type: str | None = None, what: str = "", stream: bool = False) -> Any:
        """One request through the client's own call_api (auth, TLS, timeouts as configured)."""
        from kubernetes.client.rest import ApiException

        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        headers = {"Accept": "application/json, */*"}
        if content_type:
            headers["Content-Type"] = content_type
        elif body is not None:
            headers["Content-Type"] = "application/json"
        try:
            _, url, hdrs, req_body, _ = self.client.param_serialize(
                method=method, resource_path=path, query_params=params, header_params=headers, body=body,
                auth_settings=["BearerToken"])
            timeout = None if stream else self.settings.connection.request_timeout
            resp = self.client.call_api(method, url, header_params=hdrs, body=req_body, _request_timeout=timeout)
            if not stream:
                resp.read()
        except ApiException as e:
            self._raise(e, what or f"{method} {path}")
        except Exception as e:  # urllib3's connection and protocol errors
            if type(e).__module__.split(".")[0] not in ("urllib3", "socket", "ssl", "http") and not isinstance(e, OSError):
                raise
            raise ToolError(f"the Kubernetes API server cannot be reached for {what or path}: {e}") from None
        if resp.status >= 400:
            e = ApiException(status=resp.status, reason=resp.reason)
            e.body = resp.data
            self._raise(e, what or f"{method} {path}")
        if stream:
            return resp.response
        data = resp.data
        if (resp.getheader("content-type") or "").startswith("application/json"):
            return json.loads(data) if data else None
        return data.decode(errors="replace") if isinstance(data, bytes) else data

    @staticmethod
    def _raise(e: Any, what: str):
        code, reason, message = _status_message(e)
        if code == 0:
            raise ToolError(f"the Kubernetes API server cannot be reached for {what}: {reason or message}") from None
        if code == 404:
            if "could not find the requested resource" in message:
                raise Absent(f"{what}: the API server does not serve this resource type ({message})") from None
            raise NotFound(f"{what}: {message}") from None
        if code == 429:
            raise TooManyRequests(f"{what}: {message}") from None
        if code in (401, 403):
            raise ToolError(f"{what}: the API server refused crashcart's credentials ({code} {reason}: {message}); "
                            "check the RBAC in deploy/kubernetes/") from None
        raise ToolError(f"{what}: the API server answered {code} {reason}: {message}") from None

    # --- discovery: which operators are installed, in which version ------------------------

    @property
    def dynamic(self) -> Any:
        if self._dynamic is None:
            from kubernetes.dynamic import DynamicClient

            # A discovery cache of its own: the client's default is one file per server URL in
            # /tmp, shared by every process, which would carry one run's CRDs into another.
            try:
                self._discovery_dir = tempfile.mkdtemp(prefix="crashcart-discovery-")
            except OSError as e:
                raise ToolError(f"cannot create the API discovery cache under {tempfile.gettempdir()} "
                                f"(set TMPDIR to a writable directory): {e}") from None
            self._dynamic = self._dynamic_call(lambda: DynamicClient(
                self.client, cache_file=f"{self._discovery_dir}/discovery.json"), "API discovery")
        return self._dynamic

    def _dynamic_call(self, fn, what: str) -> Any:
        from kubernetes.client.rest import ApiException

        try:
            return fn()
        except ApiException as e:
            self._raise(e, what)
        except Exception as e:  # urllib3's connection errors, as in call()
            if type(e).__module__.split(".")[0] not in ("urllib3", "socket", "ssl", "http") and not isinstance(e, OSError):
                raise
            raise ToolError(f"the Kubernetes API server cannot be reached for {what}: {e}") from None

    def groups(self, refresh: bool = False) -> set[str]:
        """The API groups this cluster serves (one GET /apis; `refresh` asks again)."""
        found = self._dynamic_call(lambda: self.dynamic.resources.parse_api_groups(request_resources=False, update=refresh),
                                   "API discovery (/apis)")
        return set(found.get("apis") or {})

    def served(self, kind: Kind) -> Kind:
        """`kind` as this cluster serves it (discovery's preferred version of its group), or
        Absent when its CRD is not installed. Built-in kinds are served as declared."""
        if kind in BUILTIN:
            return kind
        key = f"{kind.plural}.{kind.group}"
        # The group list first (one GET /apis when the cached one lacks it): an absent operator
        # costs that, not the client's full rediscovery on every miss.
        if kind.group not in self.groups() and kind.group not in self.groups(refresh=True):
            self.absent[key] = time.monotonic()
            raise Absent(f"{kind.kind} ({key}) is not installed on this cluster (discovery lists no API group "
                         f"{kind.group})")
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        try:
            found = self._dynamic_call(lambda: self.dynamic.resources.search(group=kind.group, kind=kind.kind),
                                       f"discovery of {key}")
        except ResourceNotFoundError:
            found = []
        found = [r for r in found if getattr(r, "name", "") == kind.plural]
        if not found:
            self.absent[key] = time.monotonic()
            raise Absent(f"{kind.kind} ({key}) is not installed on this cluster (discovery lists no {kind.group} "
                         f"resource {kind.plural})")
        self.absent.pop(key, None)
        best = next((r for r in found if r.preferred), found[0])
        return Kind(kind.group, best.api_version, best.name, kind.kind, bool(best.namespaced))

    def absent_expired(self, key: str) -> bool:
        return time.monotonic() - self.absent.get(key, 0.0) >= REDISCOVER_SECONDS

    def _dynamic_read(self, kind: Kind, namespace: str | None, name: str | None = None,
                      labels: str | None = None, fields: str | None = None) -> dict[str, Any]:
        """One GET of a CRD's objects through the dynamic client, as a plain dict."""
        served = self.served(kind)
        what = (f"get {kind.kind.lower()} {name}" if name else f"list {kind.plural}") + (
            f" in namespace {namespace}" if namespace else "")

        def read():
            res = self.dynamic.resources.get(api_version=served.api_version, kind=served.kind)
            return res.get(name=name, namespace=namespace if served.namespaced else None,
                           label_selector=labels, field_selector=fields,
                           _request_timeout=self.settings.connection.request_timeout).to_dict()

        try:
            return self._dynamic_call(read, what)
        except Absent:
            # Discovery was stale (the CRD went away): absent from now on.
            self.absent[f"{kind.plural}.{kind.group}"] = time.monotonic()
            raise

    # --- paths -------------------------------------------------------------------------

    @staticmethod
    def path(kind: Kind, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{kind.group}/{kind.version}" if kind.group else "/api/v1"
        if kind.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{kind.plural}"
        if name:
            base += f"/{name}"
        if sub:
            base += f"/{sub}"
        return base

    # --- verbs -------------------------------------------------------------------------

    def list(self, kind: Kind, namespace: str | None = None, labels: str | None = None,
             fields: str | None = None) -> tuple[list[dict[str, Any]], str]:
        """Items and the list's resourceVersion. Several configured namespaces: one list each."""
        spaces = [namespace] if namespace or not kind.namespaced else (self.settings.namespaces or [None])
        items: list[dict[str, Any]] = []
        rv = ""
        for ns in spaces:
            if kind in BUILTIN:
                data = self.call("GET", self.path(kind, ns), {"labelSelector": labels, "fieldSelector": fields},
                                 what=f"list {kind.plural}" + (f" in namespace {ns}" if ns else ""))
            else:
                data = self._dynamic_read(kind, ns, labels=labels, fields=fields)
            api_version = (data.get("apiVersion") or kind.api_version) if kind not in BUILTIN else kind.api_version
            for item in data.get("items") or []:
                item.setdefault("kind", kind.kind)
                item.setdefault("apiVersion", api_version)
                items.append(item)
            rv = (data.get("metadata") or {}).get("resourceVersion") or rv
        return items, rv

    def list_if_served(self, kind: Kind, namespace: str | None = None, labels: str | None = None) -> list[dict[str, Any]]:
        """A training operator's objects, or nothing when its CRD is not installed (found so
        within REDISCOVER_SECONDS: a watch poll does not rediscover every time)."""
        key = f"{kind.plural}.{kind.group}"
        if key in self.absent and not self.absent_expired(key):
            return []
        try:
            return self.list(kind, namespace, labels)[0]
        except Absent:
            return []

    def get(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any]:
        if kind in BUILTIN:
            obj = self.call("GET", self.path(kind, namespace, name), what=f"get {kind.kind.lower()} {name}")
        else:
            obj = self._dynamic_read(kind, namespace, name=name)
        obj.setdefault("kind", kind.kind)
        obj.setdefault("apiVersion", kind.api_version)
        return obj

    def create(self, kind: Kind, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", self.path(self.served(kind), namespace), body=body, what=f"create {kind.kind.lower()}")

    def patch(self, kind: Kind, namespace: str | None, name: str, body: dict[str, Any]) -> dict[str, Any]:
        # A merge patch, named: the client's default content type for a patch is a JSON patch,
        # which the API server refuses for a mapping body.
        return self.call("PATCH", self.path(self.served(kind), namespace, name), body=body,
                         content_type="application/merge-patch+json", what=f"patch {kind.kind.lower()} {name}")

    def delete(self, kind: Kind, namespace: str | None, name: str, propagation: str) -> dict[str, Any]:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        return self.call("DELETE", self.path(self.served(kind), namespace, name), body=body,
                         what=f"delete {kind.kind.lower()} {name}")

    def evict(self, namespace: str, name: str) -> None:
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        self.call("POST", self.path(POD, namespace, name, "eviction"), body=body, what=f"evict pod {namespace}/{name}")

    def log(self, namespace: str, pod: str, container: str | None, previous: bool = False,
            tail: int | None = None, since_seconds: int | None = None, timestamps: bool = False) -> str:
        query = {"container": container, "previous": "true" if previous else None,
                 "tailLines": tail, "sinceSeconds": since_seconds, "timestamps": "true" if timestamps else None}
        return self.call("GET", self.path(POD, namespace, pod, "log"), query,
                         what=f"logs of pod {namespace}/{pod}" + (" (previous container)" if previous else ""))

    def watch(self, kind: Kind, namespace: str | None, resource_version: str, seconds: int) -> Iterator[dict[str, Any]]:
        """Events after `resource_version` for `seconds` (bookmarks included), as the API sent them.
        A 410 Expired arrives as an ERROR event; the caller relists."""
        query = {"watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                 "timeoutSeconds": seconds}
        resp = self.call("GET", self.path(self.served(kind), namespace), query, what=f"watch {kind.plural}", stream=True)
        try:
            from kubernetes.watch.watch import iter_resp_lines

            for line in iter_resp_lines(resp):
                if line.strip():
                    yield json.loads(line)
        finally:
            resp.close()
            resp.release_conn()
