"""A loopback Kubernetes API server for tests: the wire format the official client speaks.

No kube-apiserver can be installed on the test machines, so this small server stands in for
one. It keeps objects in memory and answers the way a real API server does, because the
backend under test talks to it through the official `kubernetes` client and nothing else:

- objects get `uid`, `resourceVersion` (one cluster-wide counter), `creationTimestamp`,
  `generation`; `generateName` is honoured; errors are `Status` objects (NotFound,
  AlreadyExists, BadRequest, TooManyRequests, Expired) with real messages;
- lists carry the list's resourceVersion; label selectors (=, ==, !=, in, notin, exists,
  !exists) and field selectors (=, ==, !=; unsupported field labels are a 400, as on a real
  server) filter them;
- `watch=true` (and the Python client's `watch=True`) streams chunked JSON lines from a
  resourceVersion, with BOOKMARK events when asked and an ERROR event carrying a 410
  `Expired` Status when the version has been compacted away;
- `pods/eviction` honours PodDisruptionBudgets (429 with the DisruptionBudget cause);
- `pods/log` serves `previous`, `tailLines`, `sinceSeconds`, `timestamps` and `container`;
- deleting a batch/v1 Job without a propagationPolicy orphans its pods, as the real
  default does; Background/Foreground deletes them (the garbage collector's work);
- `pods/exec` over a WebSocket (the v4 channel protocol the client's stream() speaks):
  stdout, stderr and the exit status on the error channel, from `Store.exec` handlers;
- discovery as `kubectl api-resources` and the dynamic client read it: /api, /apis (an
  APIGroupList naming each group's preferred version) and /api/v1, /apis/GROUP/VERSION (an
  APIResourceList with verbs and subresources); a group with no installed CRD is absent;
- `pods/NAME:PORT/proxy/PATH` relays a GET to a real HTTP server registered for that pod and
  port (`Store.proxies`), as the API server relays to the pod's IP; with none, the 503 a
  refused connection gives;
- merge and strategic-merge patches (no list-merge keys: what crashcart patches are maps
  and scalars) and JSON patches; a JSON-patch content type with an object body is refused
  the way the real server refuses it.

Custom resources exist only once `install_crd()` is called: before that their group answers
404, which is what a cluster without the operator does.

Run `python kube_apiserver.py` to serve an empty cluster on a free loopback port.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import random
import re
import string
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    field_labels: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


_META = ("metadata.name", "metadata.namespace")
BUILTIN = [
    Resource("", "v1", "pods", "Pod", True, _META + (
        "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
        "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName")),
    Resource("", "v1", "nodes", "Node", False, _META + ("spec.unschedulable",)),
    Resource("", "v1", "events", "Event", True, _META + (
        "involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
        "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
        "reason", "reportingComponent", "source", "type")),
    Resource("", "v1", "namespaces", "Namespace", False, _META + ("status.phase",)),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, _META),
    Resource("batch", "v1", "jobs", "Job", True, _META + ("status.successful",)),
]
CRDS = {
    "pytorchjobs": Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", True, _META),
    "mpijobs": Resource("kubeflow.org", "v2beta1", "mpijobs", "MPIJob", True, _META),
    "rayjobs": Resource("ray.io", "v1", "rayjobs", "RayJob", True, _META),
    "rayclusters": Resource("ray.io", "v1", "rayclusters", "RayCluster", True, _META),
    "jobsets": Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", True, _META),
    "vcjobs": Resource("batch.volcano.sh", "v1alpha1", "jobs", "Job", True, _META),
    "workloads": Resource("kueue.x-k8s.io", "v1beta1", "workloads", "Workload", True, _META),
    "clusterqueues": Resource("kueue.x-k8s.io", "v1beta1", "clusterqueues", "ClusterQueue", False, _META),
    "localqueues": Resource("kueue.x-k8s.io", "v1beta1", "localqueues", "LocalQueue", True, _META),
}
VERSION = {"major": "1", "minor": "30", "gitVersion": "v1.30.4", "gitCommit": "a51b3b711150f57ffc1f526a640ec058514f2451",
           "gitTreeState": "clean", "buildDate": "2024-08-14T19:02:46Z", "goVersion": "go1.22.5",
           "compiler": "gc", "platform": "linux/amd64"}
_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_SUBRESOURCES = {"Pod": {"log": ["get"], "eviction": ["create"], "exec": ["create", "get"], "status": ["get", "patch", "update"]},
                 "Node": {"status": ["get", "patch", "update"]}, "Namespace": {"status": ["get", "patch", "update"]}}
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's generateName alphabet


def stamp(t: datetime | None = None) -> str:
    return (t or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code: int, reason: str, message: str, details: dict | None = None) -> dict[str, Any]:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if details is not None:
        body["details"] = details
    return body


class ApiError(Exception):
    def __init__(self, body: dict[str, Any]):
        super().__init__(body["message"])
        self.body = body


def not_found(res: Resource, name: str) -> ApiError:
    group = f".{res.group}" if res.group else ""
    return ApiError(status(404, "NotFound", f'{res.plural}{group} "{name}" not found',
                           {"name": name, "group": res.group or None, "kind": res.plural} if res.group
                           else {"name": name, "kind": res.plural}))


# --- selectors ------------------------------------------------------------------------------


def _split_terms(text: str) -> list[str]:
    terms, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        terms.append(cur.strip())
    return terms


_SET = re.compile(r"^(!?)([\w./-]+)\s*(?:\s(in|notin)\s*\(([^)]*)\))?$")
_EQ = re.compile(r"^([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)$")


def label_matcher(selector: str):
    checks = []
    for term in _split_terms(selector or ""):
        if m := _EQ.match(term):
            key, op, value = m.groups()
            checks.append(lambda l, k=key, op=op, v=value: (l.get(k) == v) != (op == "!="))
        elif m := _SET.match(term):
            neg, key, op, values = m.groups()
            if op:
                vals = {v.strip() for v in values.split(",") if v.strip()}
                checks.append(lambda l, k=key, op=op, vs=vals: (l.get(k) in vs) == (op == "in")
                              if op == "in" else (k not in l or l[k] not in vs))
            else:
                checks.append(lambda l, k=key, neg=neg: (k in l) != bool(neg))
        else:
            raise ApiError(status(400, "BadRequest", f"unable to parse requirement: {term!r}"))
    return lambda labels: all(c(labels or {}) for c in checks)


def _dotted(obj: dict[str, Any], path: str) -> str:
    here: Any = obj
    for part in path.split("."):
        here = here.get(part) if isinstance(here, dict) else None
    if isinstance(here, bool):
        return str(here).lower()
    return "" if here is None else str(here)


def field_matcher(res: Resource, selector: str):
    checks = []
    for term in _split_terms(selector or ""):
        m = re.match(r"^([\w.]+)\s*(==|=|!=)\s*(.*)$", term)
        if not m:
            raise ApiError(status(400, "BadRequest", f"invalid selector: '{selector}'; can't understand '{term}'"))
        key, op, value = m.groups()
        if key not in res.field_labels:
            raise ApiError(status(400, "BadRequest", f'field label not supported: {key}'))
        checks.append(lambda o, k=key, op=op, v=value: (_dotted(o, k) == v) != (op == "!="))
    return lambda obj: all(c(obj) for c in checks)


# --- patches ----------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def json_patch(target: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    doc = copy.deepcopy(target)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent.setdefault(p, {})
        leaf = parts[-1]
        if op["op"] in ("add", "replace"):
            if isinstance(parent, list):
                if leaf == "-":
                    parent.append(op["value"])
                else:
                    parent.insert(int(leaf), op["value"]) if op["op"] == "add" else parent.__setitem__(int(leaf), op["value"])
            else:
                parent[leaf] = op["value"]
        elif op["op"] == "remove":
            parent.pop(int(leaf) if isinstance(parent, list) else leaf)
        else:
            raise ApiError(status(422, "Invalid", f"unsupported JSON patch operation {op['op']!r}"))
    return doc


# --- the store -----------------------------------------------------------------------------------


class Store:
    """Every object, a cluster-wide resourceVersion and the event history watches replay."""

    def __init__(self, history: int = 50_000):
        self.cond = threading.Condition()
        self.rv = 100
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.events: list[tuple[int, str, str, dict[str, Any]]] = []
        self.compacted = 0
        """Watches from a resourceVersion older than this get 410 Expired."""
        self.history = history
        self.resources = {r.plural if not r.group else f"{r.group}/{r.plural}": r for r in BUILTIN}
        self.logs: dict[tuple[str, str, str, bool], list[tuple[datetime, str]]] = {}
        self.proxies: dict[tuple[str, str, int], str] = {}
        """(namespace, pod, port) -> the base URL of a real HTTP server standing in for that pod's port."""
        self.exec: dict[tuple[str, str], Any] = {}
        """(namespace, pod) -> fn(command: list[str]) -> (stdout, stderr, exit code), for pods/exec."""
        self.requests: list[tuple[str, str, dict[str, list[str]], Any]] = []
        """(method, path, query, body) of every request, for tests to assert on."""
        self.latency = 0.0
        self.watches = 0
        """Watches open now: a test that changes something during a watch waits for one (cond)."""

    # Resources ------------------------------------------------------------------
    def key(self, res: Resource) -> str:
        return f"{res.group}/{res.plural}" if res.group else res.plural

    def install_crd(self, *plurals: str) -> None:
        for p in plurals:
            res = CRDS[p]
            self.resources[self.key(res)] = res

    def resource(self, group: str, version: str, plural: str) -> Resource | None:
        res = self.resources.get(f"{group}/{plural}" if group else plural)
        return res if res and res.version == version else None

    def resource_of(self, api_version: str, kind: str) -> Resource:
        group, _, version = api_version.rpartition("/")
        for res in self.resources.values():
            if res.group == group and res.version == version and res.kind == kind:
                return res
        raise KeyError(f"{api_version} {kind} is not served")

    # Discovery ------------------------------------------------------------------
    def api_groups(self) -> dict[str, Any]:
        groups: dict[str, list[str]] = {}
        for res in self.resources.values():
            if res.group and res.version not in groups.setdefault(res.group, []):
                groups[res.group].append(res.version)
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
             "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}} for g, vs in groups.items()]}

    def api_resources(self, group: str, version: str) -> dict[str, Any]:
        served = [r for r in self.resources.values() if r.group == group and r.version == version]
        if not served:
            raise ApiError(status(404, "NotFound", "the server could not find the requested resource", {}))
        rows: list[dict[str, Any]] = []
        for r in served:
            singular = r.kind.lower()
            rows.append({"name": r.plural, "singularName": singular, "namespaced": r.namespaced, "kind": r.kind,
                         "verbs": _VERBS, **({"categories": ["all"]} if r.kind in ("Pod", "Job") else {})})
            subs = _SUBRESOURCES.get(r.kind, {} if not r.group or r.group == "policy" else {"status": ["get", "patch", "update"]})
            rows += [{"name": f"{r.plural}/{sub}", "singularName": "", "namespaced": r.namespaced,
                      "kind": "Eviction" if sub == "eviction" else ("PodExecOptions" if sub == "exec" else r.kind),
                      "verbs": verbs, **({"group": "policy", "version": "v1"} if sub == "eviction" else {})}
                     for sub, verbs in subs.items()]
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version, "resources": rows}

    # Writes ---------------------------------------------------------------------
    def _bump(self, kind: str, res: Resource, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, kind, self.key(res), copy.deepcopy(obj)))
        if len(self.events) > self.history:
            drop = len(self.events) - self.history
            self.compacted = self.events[drop - 1][0] + 1
            del self.events[:drop]
        self.cond.notify_all()

    def compact(self) -> None:
        """Forget the event history, as etcd compaction does: older watches get 410."""
        with self.cond:
            self.compacted = self.rv + 1
            self.events.clear()

    def create(self, res: Resource, namespace: str | None, obj: dict[str, Any],
               created: datetime | None = None) -> dict[str, Any]:
        with self.cond:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                while True:
                    meta["name"] = meta["generateName"] + "".join(random.choices(_NAME_CHARS, k=5))
                    if (self.key(res), namespace or "", meta["name"]) not in self.objects:
                        break
            if not meta.get("name"):
                raise ApiError(status(422, "Invalid", f"{res.kind} \"\" is invalid: metadata.name: Required value: name or generateName is required"))
            if res.namespaced:
                meta["namespace"] = namespace or meta.get("namespace") or "default"
            k = (self.key(res), meta.get("namespace", ""), meta["name"])
            if k in self.objects:
                group = f".{res.group}" if res.group else ""
                raise ApiError(status(409, "AlreadyExists", f'{res.plural}{group} "{meta["name"]}" already exists',
                                      {"name": meta["name"], "kind": res.plural}))
            meta["uid"] = meta.get("uid") or str(uuid.uuid4())
            meta["creationTimestamp"] = meta.get("creationTimestamp") or stamp(created)
            meta.setdefault("generation", 1)
            obj["apiVersion"], obj["kind"] = res.api_version, res.kind
            if res.kind == "Pod" and not res.group:
                obj.setdefault("status", {"phase": "Pending", "qosClass": "BestEffort"})
            self._bump("ADDED", res, obj)
            self.objects[k] = obj
            return copy.deepcopy(obj)

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self.objects.get((self.key(res), namespace or "", name))
        if obj is None:
            raise not_found(res, name)
        return obj

    def replace(self, res: Resource, namespace: str | None, name: str, obj: dict[str, Any]) -> dict[str, Any]:
        with self.cond:
            old = self.get(res, namespace, name)
            new = copy.deepcopy(obj)
            for k in ("uid", "creationTimestamp", "namespace", "name"):
                if k in old["metadata"]:
                    new.setdefault("metadata", {})[k] = old["metadata"][k]
            new["apiVersion"], new["kind"] = res.api_version, res.kind
            if new.get("spec") != old.get("spec"):
                new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
            self._bump("MODIFIED", res, new)
            self.objects[(self.key(res), namespace or "", name)] = new
            return copy.deepcopy(new)

    def patch(self, res: Resource, namespace: str | None, name: str, fn) -> dict[str, Any]:
        """Change an object in place with `fn(obj)` (a test injecting a failure, say)."""
        with self.cond:
            obj = copy.deepcopy(self.get(res, namespace, name))
            fn(obj)
            return self.replace(res, namespace, name, obj)

    def delete(self, res: Resource, namespace: str | None, name: str, propagation: str | None = None) -> dict[str, Any]:
        with self.cond:
            obj = self.get(res, namespace, name)
            del self.objects[(self.key(res), namespace or "", name)]
            obj = copy.deepcopy(obj)
            obj["metadata"]["deletionTimestamp"] = stamp()
            self._bump("DELETED", res, obj)
            uid = obj["metadata"]["uid"]
            # batch/v1 Jobs orphan their pods unless told otherwise (the API default, not kubectl's).
            default = "Orphan" if res.kind == "Job" and res.group == "batch" else "Background"
            policy = propagation or default
            for k, child in list(self.objects.items()):
                refs = child["metadata"].get("ownerReferences") or []
                if not any(r.get("uid") == uid for r in refs):
                    continue
                child_res = self.resources[k[0]]
                if policy == "Orphan":
                    self.patch(child_res, k[1], k[2], lambda o: o["metadata"].__setitem__(
                        "ownerReferences", [r for r in o["metadata"]["ownerReferences"] if r.get("uid") != uid]))
                else:
                    self.delete(child_res, k[1], k[2], policy)
            return obj

    # Reads ------------------------------------------------------------------------
    def items(self, res: Resource, namespace: str | None) -> list[dict[str, Any]]:
        key = self.key(res)
        return [o for (k, ns, _), o in self.objects.items() if k == key and (namespace is None or ns == namespace)]

    # Logs -------------------------------------------------------------------------
    def set_log(self, namespace: str, pod: str, lines: list[tuple[datetime, str]] | str,
                container: str | None = None, previous: bool = False) -> None:
        if isinstance(lines, str):
            now = datetime.now(UTC)
            lines = [(now, line) for line in lines.splitlines()]
        self.logs[(namespace, pod, container or "", previous)] = list(lines)


# --- HTTP -----------------------------------------------------------------------------------


_PATH = re.compile(r"^/(?:api/(?P<cv>v1)|apis/(?P<group>[^/]+)/(?P<gv>[^/]+))"
                   r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$")

_PROXY = re.compile(r"/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/:]+)(?::(?P<port>\d+))?/proxy(?P<rest>/.*)?")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: KubeApiServer

    def log_message(self, *args) -> None:  # quiet: tests read requests from the store
        pass

    # Plumbing ----------------------------------------------------------------------
    def _send(self, code: int, body: Any, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else (body.encode() if isinstance(body, str) else json.dumps(body).encode())
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ApiError(status(400, "BadRequest", "the body of the request was in an unknown format")) from None

    def _route(self, method: str) -> None:
        store = self.server.store
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        try:
            body = self._body() if method in ("POST", "PUT", "PATCH", "DELETE") else None
            store.requests.append((method, url.path, query, body))
            if store.latency:
                time.sleep(store.latency)
            if url.path.rstrip("/") == "/version":
                return self._send(200, VERSION)
            if url.path.rstrip("/") == "/api":
                return self._send(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": "10.0.0.1:6443"}]})
            if url.path.rstrip("/") == "/apis":
                return self._send(200, store.api_groups())
            if d := re.fullmatch(r"/api/(v1)|/apis/([^/]+)/([^/]+)", url.path.rstrip("/")):
                return self._send(200, store.api_resources(d[2] or "", d[1] or d[3]))
            if p := _PROXY.fullmatch(url.path):
                return self._proxy(p["ns"], p["name"], int(p["port"] or 80), p["rest"] or "/", url.query)
            m = _PATH.match(url.path)
            if not m:
                raise ApiError(status(404, "NotFound", "the server could not find the requested resource", {}))
            group, version = (m["group"], m["gv"]) if m["group"] else ("", m["cv"])
            res = store.resource(group, version, m["plural"])
            if res is None:
                raise ApiError(status(404, "NotFound", "the server could not find the requested resource", {}))
            ns, name, sub = m["ns"], m["name"], m["sub"]
            q = {k: v[-1] for k, v in query.items()}
            if method == "GET" and name is None:
                if q.get("watch", "").lower() in ("true", "1"):
                    return self._watch(res, ns, q)
                return self._send(200, self._list(res, ns, q))
            if name is None and method == "POST":
                return self._send(201, store.create(res, ns, body or {}))
            if sub == "log" and method == "GET":
                return self._log(ns, name, q)
            if sub == "exec" and method in ("GET", "POST"):
                return self._exec(ns, name, query)
            if sub == "eviction" and method == "POST":
                return self._evict(ns, name, body or {})
            if sub not in (None, "status"):
                raise ApiError(status(404, "NotFound", "the server could not find the requested resource", {}))
            if method == "GET":
                return self._send(200, store.get(res, ns, name))
            if method == "PUT":
                return self._send(200, store.replace(res, ns, name, body or {}))
            if method == "PATCH":
                return self._send(200, self._patch(res, ns, name, body))
            if method == "DELETE":
                policy = (body or {}).get("propagationPolicy") or q.get("propagationPolicy")
                return self._send(200, store.delete(res, ns, name, policy))
            raise ApiError(status(405, "MethodNotAllowed", f"the server does not allow this method on the requested resource"))
        except ApiError as e:
            self._send(e.body["code"], e.body)

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def do_PUT(self):
        self._route("PUT")

    def do_PATCH(self):
        self._route("PATCH")

    def do_DELETE(self):
        self._route("DELETE")

    # Verbs ----------------------------------------------------------------------------
    def _selected(self, res: Resource, ns: str | None, q: dict[str, str]):
        labels = label_matcher(q.get("labelSelector", ""))
        fields = field_matcher(res, q.get("fieldSelector", ""))
        return lambda o: labels(o.get("metadata", {}).get("labels")) and fields(o)

    def _list(self, res: Resource, ns: str | None, q: dict[str, str]) -> dict[str, Any]:
        store = self.server.store
        keep = self._selected(res, ns, q)
        with store.cond:
            # Stored objects are replaced, never changed in place, so a shallow snapshot is consistent.
            items = [o for o in store.items(res, ns) if keep(o)]
            rv = str(store.rv)
        if res in BUILTIN:  # built-in list items carry no kind/apiVersion
            items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items]
        return {"kind": f"{res.kind}List", "apiVersion": res.api_version,
                "metadata": {"resourceVersion": rv}, "items": items}

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, res: Resource, ns: str | None, q: dict[str, str]) -> None:
        store = self.server.store
        keep = self._selected(res, ns, q)
        timeout = min(float(q.get("timeoutSeconds") or 1800), 1800)
        bookmarks = q.get("allowWatchBookmarks", "").lower() == "true"
        deadline = time.monotonic() + timeout
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        key = store.key(res)

        def line(kind: str, obj: dict[str, Any]) -> None:
            self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

        with store.cond:
            store.watches += 1
            store.cond.notify_all()
            rv_text = q.get("resourceVersion", "")
            if rv_text in ("", "0"):
                # "Any" version: the current state as ADDED events, then changes.
                start = store.rv
                initial = [copy.deepcopy(o) for o in store.items(res, ns) if keep(o)]
            else:
                start = int(rv_text)
                initial = []
                if start + 1 < store.compacted:
                    body = status(410, "Expired", f"too old resource version: {start} ({store.compacted - 1})")
                    line("ERROR", body)
                    self._chunk(b"")
                    self._watch_closed()
                    return
        try:
            for o in initial:
                line("ADDED", o)
            sent = start
            while True:
                with store.cond:
                    pending = [(rv, t, o) for rv, t, k, o in store.events if rv > sent and k == key
                               and (ns is None or o["metadata"].get("namespace") == ns)]
                    if not pending:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        store.cond.wait(min(left, 0.25))
                        continue
                for rv, t, o in pending:
                    if keep(o):
                        line(t, o)
                    sent = rv
            if bookmarks:
                line("BOOKMARK", {"kind": res.kind, "apiVersion": res.api_version,
                                  "metadata": {"resourceVersion": str(store.rv),
                                               "annotations": {"k8s.io/initial-events-end": "true"}}})
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            self._watch_closed()

    def _watch_closed(self) -> None:
        with self.server.store.cond:
            self.server.store.watches -= 1

    def _patch(self, res: Resource, ns: str | None, name: str, body: Any) -> dict[str, Any]:
        store = self.server.store
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        with store.cond:
            current = store.get(res, ns, name)
            if ctype == "application/json-patch+json":
                if not isinstance(body, list):
                    raise ApiError(status(500, "InternalError", "json: cannot unmarshal object into Go value of type jsonpatch.Patch"))
                new = json_patch(current, body)
            elif ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                if not isinstance(body, dict):
                    raise ApiError(status(400, "BadRequest", "the body of the request was in an unknown format"))
                new = merge_patch(current, body)
            else:
                raise ApiError(status(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"))
            return store.replace(res, ns, name, new)

    def _log(self, ns: str, name: str, q: dict[str, str]) -> None:
        store = self.server.store
        pod = store.get(store.resources["pods"], ns, name)
        containers = [c["name"] for c in pod.get("spec", {}).get("containers", [])]
        container = q.get("container") or ""
        if not container and len(containers) > 1:
            raise ApiError(status(400, "BadRequest", f"a container name must be specified for pod {name}, "
                                                     f"choose one of: [{' '.join(containers)}]"))
        container = container or (containers[0] if containers else "")
        if container not in containers:
            raise ApiError(status(400, "BadRequest", f"container {container} is not valid for pod {name}"))
        previous = q.get("previous", "").lower() == "true"
        lines = store.logs.get((ns, name, container, previous), store.logs.get((ns, name, "", previous)))
        if lines is None:
            if previous:
                raise ApiError(status(400, "BadRequest", f'previous terminated container "{container}" in pod "{name}" not found'))
            phase = pod.get("status", {}).get("phase")
            if phase == "Pending":
                raise ApiError(status(400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'))
            lines = []
        if since := q.get("sinceSeconds"):
            cutoff = datetime.now(UTC) - timedelta(seconds=int(since))
            lines = [(t, l) for t, l in lines if t >= cutoff]
        if tail := q.get("tailLines"):
            lines = lines[-int(tail):] if int(tail) else []
        stamps = q.get("timestamps", "").lower() == "true"
        text = "".join((f"{t.strftime('%Y-%m-%dT%H:%M:%S.%fZ')} " if stamps else "") + l + "\n" for t, l in lines)
        self._send(200, text, "text/plain")

    def _proxy(self, ns: str, name: str, port: int, rest: str, query: str) -> None:
        import urllib.error
        import urllib.request

        store = self.server.store
        pod = store.get(store.resources["pods"], ns, name)
        base = store.proxies.get((ns, name, port))
        ip = (pod.get("status") or {}).get("podIP") or "<none>"
        refused = ApiError(status(503, "ServiceUnavailable",
                                  f"error trying to reach service: dial tcp {ip}:{port}: connect: connection refused"))
        if base is None:
            raise refused
        try:
            with urllib.request.urlopen(base.rstrip("/") + rest + (f"?{query}" if query else ""), timeout=10) as r:
                body, ctype, code = r.read(), r.headers.get("Content-Type") or "text/plain", r.status
        except urllib.error.HTTPError as e:
            body, ctype, code = e.read(), e.headers.get("Content-Type") or "text/plain", e.code
        except OSError:
            raise refused from None
        self._send(code, body, ctype)

    def _exec(self, ns: str, name: str, query: dict[str, list[str]]) -> None:
        store = self.server.store
        store.get(store.resources["pods"], ns, name)
        if (self.headers.get("Upgrade") or "").lower() != "websocket":
            raise ApiError(status(400, "BadRequest", "Upgrade request required"))
        handler = store.exec.get((ns, name))
        command = query.get("command") or []
        if handler is None:
            out, err, rc = b"", f"OCI runtime exec failed: exec failed: unable to start container process: exec: \"{command[0] if command else ''}\": executable file not found in $PATH: unknown\r\n".encode(), 126
        else:
            out, err, rc = handler(command)
            out, err = (x.encode() if isinstance(x, str) else x for x in (out, err))
        accept = base64.b64encode(hashlib.sha1((self.headers["Sec-WebSocket-Key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept.decode())
        self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
        self.end_headers()
        if rc == 0:
            result = {"metadata": {}, "status": "Success"}
        else:
            result = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                      "message": f"command terminated with non-zero exit code: error executing command {command}: exit status {rc}",
                      "details": {"causes": [{"reason": "ExitCode", "message": str(rc)}]}}
        for channel, data in ((1, out), (2, err), (3, json.dumps(result).encode())):
            if data:
                self._frame(0x2, bytes([channel]) + data)
        self._frame(0x8, (1000).to_bytes(2, "big"))
        self.close_connection = True

    def _frame(self, opcode: int, payload: bytes) -> None:
        n = len(payload)
        head = bytes([0x80 | opcode])
        head += bytes([n]) if n < 126 else (bytes([126]) + n.to_bytes(2, "big") if n < 65536 else bytes([127]) + n.to_bytes(8, "big"))
        self.wfile.write(head + payload)
        self.wfile.flush()

    def _evict(self, ns: str, name: str, body: dict[str, Any]) -> None:
        store = self.server.store
        pods, pdbs = store.resources["pods"], store.resources["policy/poddisruptionbudgets"]
        with store.cond:
            pod = store.get(pods, ns, name)
            labels = pod["metadata"].get("labels") or {}
            for pdb in store.items(pdbs, ns):
                sel = pdb.get("spec", {}).get("selector", {}).get("matchLabels") or {}
                if not sel or any(labels.get(k) != v for k, v in sel.items()):
                    continue
                st = pdb.setdefault("status", {})
                if st.get("disruptionsAllowed", 0) < 1:
                    need = st.get("desiredHealthy", 0)
                    raise ApiError(status(429, "TooManyRequests",
                                          "Cannot evict pod as it would violate the pod's disruption budget.",
                                          {"causes": [{"reason": "DisruptionBudget", "message":
                                                       f"The disruption budget {pdb['metadata']['name']} needs {need} healthy pods "
                                                       f"and has {st.get('currentHealthy', 0)} currently"}]}))
                store.patch(pdbs, ns, pdb["metadata"]["name"],
                            lambda o: o["status"].__setitem__("disruptionsAllowed", o["status"]["disruptionsAllowed"] - 1))
            store.delete(pods, ns, name)
        self._send(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})


class KubeApiServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, store: Store | None = None, port: int = 0):
        self.store = store or Store()
        super().__init__(("127.0.0.1", port), Handler)
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> KubeApiServer:
        self.thread = threading.Thread(target=self.serve_forever, name="kube-apiserver", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


if __name__ == "__main__":
    srv = KubeApiServer().start()
    print(srv.url, flush=True)
    try:
        srv.thread.join()
    except KeyboardInterrupt:
        srv.stop()
