"""A real local Ray head on loopback, for the Ray integration tests (and by hand).

    python tests/harness/ray_local.py up DIR     # prints the head's addresses as JSON
    python tests/harness/ray_local.py down DIR   # stops it by the pids it recorded

The head runs `ray start --head --block` in a session of its own: every Ray daemon it
starts (GCS, raylet, dashboard, agents, workers) is in that session, and stopping sends
signals to that session's processes only. `ray stop` is never used: it kills every Ray
process on the machine, other people's included.

Why each setting (see the Ray section of the project's notes):
- RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 for `ray start` and every client: without it Ray
  rewrites 127.0.0.1 to the machine's external address, binds every interface, and a
  client on loopback hangs ~40 s "waiting for GCS".
- --num-cpus 2 and a 100 MB object store: the machine is shared.
- RAY_memory_usage_threshold just above what the machine uses now: the memory monitor
  then kills a task that allocates a couple of GB (a real OUT_OF_MEMORY), while ordinary
  tasks keep running. The threshold is node-wide, so it is computed at start.
- HOME and RAY_AUTH_MODE: a token in ~/.ray from someone else's cluster would otherwise
  be sent to ours; this head runs without token auth.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

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
    memory_threshold: float

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


def _memory_threshold() -> float:
    info = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, value = line.partition(":")
        info[key] = int(value.split()[0]) * 1024
    total, available = info["MemTotal"], info["MemAvailable"]
    return round(min(0.95, (total - available + OOM_HEADROOM_BYTES) / total), 3)


def _ray_bin() -> str:
    return str(Path(sys.executable).with_name("ray"))


def up(directory: str | Path) -> RayHead:
    """Start the head; wait until the GCS and the Jobs API answer. RuntimeError with the
    head's own log when it does not come up."""
    root = Path(directory).resolve()
    root.mkdir(parents=True, exist_ok=True)
    # Ray's socket paths must stay under 107 bytes: its temp dir is short, under /tmp.
    temp = Path(f"/tmp/ccray-{os.getpid()}-{int(time.time())}")
    threshold = _memory_threshold()
    gcs, dashboard = free_port(), free_port()
    # `python` in a job's entrypoint is this interpreter, the one with Ray, as on a real cluster.
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    env = {**os.environ, **client_env(root), "PATH": path, "RAY_memory_usage_threshold": str(threshold),
           "RAY_memory_monitor_refresh_ms": "100"}
    argv = [_ray_bin(), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={gcs}",
            "--num-cpus=2", "--object-store-memory=100000000", "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard}", f"--ray-client-server-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}", "--disable-usage-stats", f"--temp-dir={temp}"]
    log = open(root / "ray-start.log", "w")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    head = RayHead(dir=str(root), gcs_address=f"127.0.0.1:{gcs}", dashboard_url=f"http://127.0.0.1:{dashboard}",
                   pid=proc.pid, memory_threshold=threshold)
    (root / "head.json").write_text(json.dumps({**asdict(head), "temp_dir": str(temp)}))
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if _answers(head):
            return head
        time.sleep(0.5)
    down(root)
    raise RuntimeError(f"the Ray head did not come up within {START_TIMEOUT:.0f} s:\n"
                       f"{(root / 'ray-start.log').read_text()[-3000:]}")


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
            if int(fields[3]) == sid:
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
    _stop_session(info["pid"], timeout)
    subprocess.run(["rm", "-rf", info.get("temp_dir", "/nonexistent")], check=False)


def _stop_session(sid: int, timeout: float) -> None:
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
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
    if len(sys.argv) != 3 or sys.argv[1] not in {"up", "down"}:
        sys.exit("usage: ray_local.py up|down DIR")
    if sys.argv[1] == "up":
        print(json.dumps(asdict(up(sys.argv[2]))))
    else:
        down(sys.argv[2])
