"""A real local Ray head on loopback, for the Ray integration tests (and by hand).

    python tests/harness/ray_local.py up DIR     # prints the head's addresses as JSON
    python tests/harness/ray_local.py down DIR   # stops it by the pids it recorded
    python tests/harness/ray_local.py join HEAD_DIR DIR NAME   # a worker node joins that head

A worker node (`join`) is a second raylet with its own object store and workers, on 127.0.0.1,
joined to the head's GCS and run in a session of its own, so a test can kill it (a machine
lost under a job) or drain it. `ray start --address` refuses to join with
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, and with 1 it rewrites 127.0.0.1 to the machine's
external address, where this head does not listen; so the worker process does what `ray start
--address --block` does after those checks: it starts a `ray._private.node.Node` (head=False)
with the head's GCS address and blocks, as Ray's own multi-node tests do (ray.cluster_utils).

The head runs `ray start --head --block` in a session of its own: every Ray daemon it
starts (GCS, raylet, dashboard, agents, workers) is in that session, and stopping sends
signals to that session's processes only. `ray stop` is never used: it kills every Ray
process on the machine, other people's included. A test session killed before its teardown
leaves its heads running; `reap` (run when the next session starts) stops the ones under a
directory whose owning session has died (owner.py), by those sessions' ids.

Why each setting (see the Ray section of the project's notes):
- RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 for `ray start` and every client: without it Ray
  rewrites 127.0.0.1 to the machine's external address, binds every interface, and a
  client on loopback hangs ~40 s "waiting for GCS".
- --num-cpus 2 and a 100 MB object store: the machine is shared.
- No memory monitor on a head (RAY_memory_monitor_refresh_ms=0): its threshold is the whole
  machine's, and the machine's other users crossing it made it kill these tests' workers and
  job supervisors. Each raylet kills only its own node's workers, so the OOM test joins a
  worker node (`join` with `memory_monitor=True`) whose monitor's threshold is just above what
  the machine uses at that moment, and pins its task there: the task is the only worker that
  monitor can kill. The job's supervisor and driver run on the head (the Jobs API puts them
  there), out of its reach, so no sample, however late it is handled, can kill them; the
  outcome no longer depends on how the kill policy orders workers or how fast one dies.
- HOME and RAY_AUTH_MODE: a token in ~/.ray from someone else's cluster would otherwise
  be sent to ours; this head runs without token auth.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import owner

OOM_HEADROOM_BYTES = 2_500_000_000
"""How far above the machine's current use the memory monitor starts killing."""
START_TIMEOUT = 90.0


@dataclass
class RayHead:
    dir: str
    gcs_address: str
    dashboard_url: str
    pid: int
    """The `ray start --block` process; its session holds every process of this head."""

    def client_env(self) -> dict[str, str]:
        """What a process needs to talk to this head (a driver, `ray job submit`, a test)."""
        return client_env(self.dir)


def client_env(directory: str | Path) -> dict[str, str]:
    home = Path(directory) / "home"
    home.mkdir(parents=True, exist_ok=True)
    return {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled", "HOME": str(home),
            "RAY_USAGE_STATS_ENABLED": "0"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def memory_threshold() -> float:
    """A memory monitor threshold (a fraction of the machine) OOM_HEADROOM_BYTES above its use now."""
    info = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, value = line.partition(":")
        info[key] = int(value.split()[0]) * 1024
    total, available = info["MemTotal"], info["MemAvailable"]
    return round(min(0.95, (total - available + OOM_HEADROOM_BYTES) / total), 3)


def _ray_bin() -> str:
    return str(Path(sys.executable).with_name("ray"))


def up(directory: str | Path, extra_env: dict[str, str] | None = None) -> RayHead:
    """Start the head; wait until the GCS and the Jobs API answer. RuntimeError with the
    head's own log when it does not come up. `extra_env`: Ray settings for this head only
    (RAY_health_check_period_ms, say)."""
    # Its ports are picked free here and bound by Ray later; anyone on the machine may take
    # one in between, and the head then exits at start: it is started again on other ports.
    for _ in range(3):
        head = _up_once(directory, extra_env)
        if head is not None:
            return head
    raise RuntimeError(f"the Ray head exited at start three times:\n"
                       f"{(Path(directory).resolve() / 'ray-start.log').read_text()[-3000:]}")


def _up_once(directory: str | Path, extra_env: dict[str, str] | None) -> RayHead | None:
    """The head, or None when it exited during its start."""
    root = Path(directory).resolve()
    root.mkdir(parents=True, exist_ok=True)
    # Ray's socket paths must stay under 107 bytes: its temp dir is short, under /tmp.
    temp = Path(f"/tmp/ccray-{os.getpid()}-{time.time_ns() // 1000 % 10**9}")
    gcs, dashboard = free_port(), free_port()
    # `python` in a job's entrypoint is this interpreter, the one with Ray, as on a real cluster.
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    env = {**os.environ, **client_env(root), "PATH": path, "RAY_memory_monitor_refresh_ms": "0", **(extra_env or {})}
    argv = [_ray_bin(), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={gcs}",
            "--num-cpus=2", "--object-store-memory=100000000", "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard}", f"--ray-client-server-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}", "--disable-usage-stats", f"--temp-dir={temp}"]
    log = open(root / "ray-start.log", "w")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    head = RayHead(dir=str(root), gcs_address=f"127.0.0.1:{gcs}", dashboard_url=f"http://127.0.0.1:{dashboard}",
                   pid=proc.pid)
    (root / "head.json").write_text(json.dumps({**asdict(head), "temp_dir": str(temp),
                                                "start": owner.start_time(proc.pid)}))
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            down(root)
            return None
        # Our head still running, and answering: a dashboard port someone else holds answers too.
        if _answers(head) and proc.poll() is None:
            return head
        time.sleep(0.5)
    down(root)
    raise RuntimeError(f"the Ray head did not come up within {START_TIMEOUT:.0f} s:\n"
                       f"{(root / 'ray-start.log').read_text()[-3000:]}")


@dataclass
class RayWorker:
    dir: str
    name: str
    node_id: str
    pid: int
    """The process holding the node; its session holds the node's raylet and workers."""


def join(head: RayHead, directory: str | Path, name: str, num_cpus: int = 1,
         resources: dict[str, float] | None = None, memory_monitor: bool = False) -> RayWorker:
    """Start a worker node named `name` joined to `head`; wait until the GCS lists it ALIVE.
    `memory_monitor`: this node's raylet kills its workers once the machine's use crosses a
    threshold just above its use now (its workers see it as RAY_memory_usage_threshold);
    otherwise it has none, as the heads."""
    root = Path(directory).resolve()
    root.mkdir(parents=True, exist_ok=True)
    temp = Path(f"/tmp/ccrayw-{os.getpid()}-{int(time.time() * 1000) % 10**6}")
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    monitor = ({"RAY_memory_usage_threshold": str(memory_threshold()), "RAY_memory_monitor_refresh_ms": "250"}
               if memory_monitor else {"RAY_memory_monitor_refresh_ms": "0"})
    env = {**os.environ, **client_env(head.dir), "PATH": path, **monitor}
    argv = [sys.executable, str(Path(__file__).resolve()), "_node", head.gcs_address, name, str(num_cpus),
            json.dumps(resources or {}), str(temp)]
    log = open(root / "node.log", "w")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    (root / "head.json").write_text(json.dumps({"pid": proc.pid, "temp_dir": str(temp), "name": name,
                                                "start": owner.start_time(proc.pid)}))
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        # The node's own id (it prints it once started): an earlier node of the same name may still be listed.
        started = re.search(r"worker node \S+ started: ([0-9a-f]+)", (root / "node.log").read_text())
        if started and alive(head, started[1]):
            return RayWorker(dir=str(root), name=name, node_id=started[1], pid=proc.pid)
        time.sleep(0.5)
    down(root)
    raise RuntimeError(f"worker node {name} did not join within {START_TIMEOUT:.0f} s:\n"
                       f"{(root / 'node.log').read_text()[-3000:]}")


def kill(directory: str | Path) -> None:
    """SIGKILL every process of a node's session at once: the machine is gone, nothing shuts down."""
    try:
        info = json.loads((Path(directory).resolve() / "head.json").read_text())
    except (OSError, ValueError):
        return
    _stop_session(info["pid"], 0.0, graceful=False, started=info.get("start"))
    subprocess.run(["rm", "-rf", info.get("temp_dir", "/nonexistent")], check=False)


def alive(head: RayHead, node_id: str) -> bool:
    """Whether the GCS lists the node ALIVE."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"{head.dashboard_url}/api/v0/nodes?limit=100&detail=true", timeout=5) as r:
            rows = json.loads(r.read())["data"]["result"]["result"]
    except (OSError, ValueError, KeyError):
        return False
    return any(n.get("node_id") == node_id and n.get("state") == "ALIVE" for n in rows)


def _run_node(gcs: str, name: str, num_cpus: int, resources: dict[str, float], temp: str) -> None:
    """What `ray start --address=GCS --block` does once its checks pass (see the module's notes)."""
    import ray._private.node
    from ray._private.parameter import RayParams

    params = RayParams(node_ip_address="127.0.0.1", gcs_address=gcs, node_name=name, num_cpus=num_cpus,
                       num_gpus=0, resources=resources, object_store_memory=100_000_000, temp_dir=temp,
                       min_worker_port=0, max_worker_port=0, node_manager_port=0)
    node = ray._private.node.Node(params, head=False, shutdown_at_exit=True, spawn_reaper=True)
    print(f"worker node {name} started: {node.node_id} ({node.node_ip_address})", flush=True)

    def stop(*_):
        node.kill_all_processes(check_alive=False, allow_graceful=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    while True:
        time.sleep(1)


def _answers(head: RayHead) -> bool:
    """The Jobs API answers and the head's raylet has registered (the dashboard is up first)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"{head.dashboard_url}/api/version", timeout=2) as r:
            if r.status != 200:
                return False
        with urllib.request.urlopen(f"{head.dashboard_url}/api/v0/nodes?limit=10", timeout=5) as r:
            return b'"ALIVE"' in r.read()
    except OSError:
        return False


def _session_pids(sid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # Field 6 of /proc/PID/stat is the session id (after the command in parentheses).
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            # A zombie has exited already: waiting for it to go would wait for its parent.
            if int(fields[3]) == sid and fields[0] != "Z":
                pids.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return pids


def down(directory: str | Path, timeout: float = 3.0) -> None:
    """Stop the head started in `directory`: its `ray start --block` process first (it stops
    the daemons it started), then whatever is left in its session. Never `ray stop`."""
    root = Path(directory).resolve()
    try:
        info = json.loads((root / "head.json").read_text())
    except (OSError, ValueError):
        return
    # start_new_session: the leader's pid is the session's id.
    _stop_session(info["pid"], timeout, started=info.get("start"))
    subprocess.run(["rm", "-rf", info.get("temp_dir", "/nonexistent")], check=False)


def reap(tmp: str | Path | None = None) -> list[Path]:
    """Stop the heads and worker nodes under /tmp/crashcart-ray-* (or `tmp`) whose owning test
    session has died, and delete their directories. Returns the directories reaped."""
    reaped = []
    for root in owner.orphans("crashcart-ray-*", tmp or tempfile.gettempdir()):
        # A head's head.json is in its directory or one below (root/head, root/spot-a: a node).
        for started in [root / "head.json", *root.glob("*/head.json")]:
            if started.is_file():
                down(started.parent)
        subprocess.run(["rm", "-rf", str(root)], check=False)
        reaped.append(root)
    return reaped


def _stop_session(sid: int, timeout: float, graceful: bool = True, started: int | None = None) -> None:
    """Signal the processes of session `sid`. Linux never hands out a pid still in use as a
    session id, so while any process of the session lives, they are ours; a leader alive
    with another start time than `started` is another process that got the pid after our
    whole session had ended, and is left alone."""
    now = owner.start_time(sid)
    if started is not None and now is not None and now != started:
        return
    steps = ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)) if graceful else ((signal.SIGKILL, 5.0),)
    for sig, wait in steps:
        pids = _session_pids(sid)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and _session_pids(sid):
            time.sleep(0.2)
    try:
        os.waitpid(sid, os.WNOHANG)
    except ChildProcessError:
        pass


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "_node":
        _run_node(sys.argv[2], sys.argv[3], int(sys.argv[4]), json.loads(sys.argv[5]), sys.argv[6])
    if len(sys.argv) == 5 and sys.argv[1] == "join":
        info = json.loads((Path(sys.argv[2]).resolve() / "head.json").read_text())
        head = RayHead(**{k: v for k, v in info.items() if k in RayHead.__dataclass_fields__})
        print(json.dumps(asdict(join(head, sys.argv[3], sys.argv[4]))))
        sys.exit(0)
    if len(sys.argv) != 3 or sys.argv[1] not in {"up", "down"}:
        sys.exit("usage: ray_local.py up|down DIR, or join HEAD_DIR DIR NAME")
    if sys.argv[1] == "up":
        print(json.dumps(asdict(up(sys.argv[2]))))
    else:
        down(sys.argv[2])
