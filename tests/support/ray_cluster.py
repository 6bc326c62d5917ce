"""A real multi-node Ray cluster on loopback: a head and worker nodes, each started with ``ray start``.

Every node is its own raylet with its own resources (the head 0 CPUs by default, so actors needing a
CPU land on the workers), all on 127.0.0.1 and one temp dir, so they share the two cores of this box
but not a process. :meth:`LocalRayCluster.kill_node` SIGKILLs one worker node's raylet and everything
under it, as a machine that drops off the network would vanish. The cluster uses token authentication
with a token made here (Ray 2.60 turns it on for a head when ``~/.ray/auth_token`` exists but not for
the worker nodes that join it, so the mode is set explicitly); drivers connect with :attr:`env`.

Used by ``tests/test_ray_cluster.py`` and ``bench/ray_cluster.py``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

RAY_CLI = [sys.executable, "-m", "ray.scripts.scripts"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LocalRayCluster:
    """A running cluster: its address, the env its drivers need, and each node's raylet port."""

    address: str
    temp_dir: Path
    env: dict[str, str]
    node_ports: list[int] = field(default_factory=list)
    """The node manager port of each node, head first."""
    worker_cpus: int = 1

    def start_worker(self, num_cpus: int | None = None) -> int:
        """Add a worker node (``num_cpus`` CPUs); returns its index."""
        port = free_port()
        base = 20000 + 200 * len(self.node_ports) + (os.getpid() % 50) * 1000 % 20000
        _ray_start(
            [
                "--address",
                self.address,
                "--num-cpus",
                str(self.worker_cpus if num_cpus is None else num_cpus),
                "--node-manager-port",
                str(port),
                "--object-manager-port",
                str(free_port()),
                "--min-worker-port",
                str(base),
                "--max-worker-port",
                str(base + 199),
            ],
            self.env,
        )
        self.node_ports.append(port)
        return len(self.node_ports) - 1

    def kill_node(self, index: int) -> int:
        """SIGKILL worker node ``index``'s raylet and the processes under it; returns how many died."""
        import psutil

        if index == 0:
            raise ValueError("node 0 is the head: kill a worker node")
        flag = f"--node_manager_port={self.node_ports[index]}"
        raylets = [p for p in _processes_of(self.temp_dir) if flag in " ".join(_cmdline(p))]
        victims = [q for p in raylets for q in [p, *p.children(recursive=True)]]
        for proc in victims:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        return len(victims)

    def stop(self) -> None:
        """End every process of the cluster (found by its temp dir), then remove the dir."""
        import psutil

        procs = _processes_of(self.temp_dir)
        everything = {p.pid: p for p in procs for p in [p, *_children(p)]}
        for proc in everything.values():
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, alive = psutil.wait_procs(list(everything.values()), timeout=10)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


@contextlib.contextmanager
def local_ray_cluster(
    workers: int = 2, head_cpus: int = 0, worker_cpus: int = 1
) -> Iterator[LocalRayCluster]:
    """A head (``head_cpus`` CPUs) and ``workers`` worker nodes on loopback, stopped on exit."""
    temp_dir = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths must fit
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), "RAY_USAGE_STATS_ENABLED": "0"}
    )
    port = free_port()
    cluster = LocalRayCluster(f"127.0.0.1:{port}", temp_dir, env, worker_cpus=worker_cpus)
    try:
        head_manager = free_port()
        _ray_start(
            [
                "--head",
                "--port",
                str(port),
                "--num-cpus",
                str(head_cpus),
                "--include-dashboard",
                "false",
                "--temp-dir",
                str(temp_dir),
                "--node-manager-port",
                str(head_manager),
                "--object-manager-port",
                str(free_port()),
                "--min-worker-port",
                "19000",
                "--max-worker-port",
                "19199",
            ],
            env,
        )
        cluster.node_ports.append(head_manager)
        for _ in range(workers):
            cluster.start_worker()
        yield cluster
    finally:
        cluster.stop()


def _ray_start(args: list[str], env: dict[str, str]) -> None:
    command = [*RAY_CLI, "start", "--node-ip-address", "127.0.0.1", "--disable-usage-stats", *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180, cwd="/tmp")
    if done.returncode != 0:
        raise RuntimeError(f"ray start failed ({done.returncode}): {done.stderr[-2000:]}")


def _cmdline(proc: object) -> list[str]:
    import psutil

    try:
        return list(proc.cmdline())  # type: ignore[attr-defined]
    except psutil.Error:
        return []


def _processes_of(temp_dir: Path) -> list[object]:
    """Ray's own processes (its binaries and modules) that name this cluster's temp dir."""
    import psutil

    mark = str(temp_dir)
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    found = []
    for proc in psutil.process_iter():
        parts = _cmdline(proc)
        if proc.pid in mine or not any(mark in part for part in parts):
            continue
        if any("/site-packages/ray/" in part for part in parts):
            found.append(proc)
    return found


def _children(proc: object) -> list[object]:
    import psutil

    try:
        return list(proc.children(recursive=True))  # type: ignore[attr-defined]
    except psutil.Error:
        return []


def wait_for(predicate: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise TimeoutError(f"gave up waiting for {what} after {timeout_s:.0f} s")
