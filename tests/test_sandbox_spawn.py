"""The sandbox's long-lived process (``Sandbox.spawn``): talked to over pipes, contained like a run.

A Python read-eval loop is spawned in a real bubblewrap sandbox and asked, line by line, to reach out:
the host's loopback TCP listener, a write into its read-only bind and into the host's ``/usr``. Each
attempt must fail from inside; closing the sandbox must kill the process and remove its root.
"""

from __future__ import annotations

import json
import os
import socket
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from envsuite.sandbox import Limits, Sandbox, SandboxPathError, SandboxProcess, live_cgroups
from tests.support.sandbox import needs_sandbox

pytestmark = needs_sandbox

SITE = "/opt/site"
_LOOP = """
import json, sys
for line in sys.stdin:
    try:
        exec(json.loads(line))
        print(json.dumps("ok"), flush=True)
    except BaseException as exc:
        print(json.dumps(f"{type(exc).__name__}: {exc}"), flush=True)
"""


def _ask(process: SandboxProcess, code: str) -> str:
    process.stdin.write((json.dumps(code) + "\n").encode())
    process.stdin.flush()
    line = process.stdout.readline()
    assert line, process.stderr_tail()
    answer: str = json.loads(line)
    return answer


@pytest.fixture
def loop() -> Iterator[tuple[Sandbox, SandboxProcess]]:
    with Sandbox() as box:
        site = sysconfig.get_paths()["purelib"]
        limits = Limits(wall_s=60, cpu_s=30, memory_mb=512, processes=16)
        process = box.spawn(["/usr/bin/python3", "-c", _LOOP], limits=limits, ro_binds={site: SITE})
        yield box, process


def test_a_spawned_process_answers_on_its_pipes_and_sees_its_bind(
    loop: tuple[Sandbox, SandboxProcess],
) -> None:
    _, process = loop
    # A long-lived process holds no run cgroup (the escape suite checks that none is left alive).
    assert not live_cgroups()
    assert _ask(process, f"import os; assert os.path.isdir({SITE + '/mcp'!r})") == "ok"
    assert _ask(process, "open('/work/note', 'w').write('x')") == "ok"
    assert _ask(process, "raise ValueError('shown')") == "ValueError: shown"


def test_a_spawned_process_cannot_reach_the_hosts_network(loop: tuple[Sandbox, SandboxProcess]) -> None:
    _, process = loop
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        answer = _ask(process, f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)")
    assert answer.startswith(("ConnectionRefusedError", "OSError", "TimeoutError")), answer


def test_a_spawned_process_cannot_write_outside_its_root(loop: tuple[Sandbox, SandboxProcess]) -> None:
    _, process = loop
    for target in (f"{SITE}/envsuite-escape", "/usr/envsuite-escape", "/etc/envsuite-escape"):
        answer = _ask(process, f"open({target!r}, 'w').write('x')")
        assert answer.startswith(("OSError", "PermissionError")), (target, answer)
        assert not Path(target).exists()
    assert not Path(sysconfig.get_paths()["purelib"], "envsuite-escape").exists()


def test_closing_the_sandbox_kills_the_process_tree_and_removes_the_root() -> None:
    box = Sandbox()
    process = box.spawn(["/bin/sh", "-c", "sleep 297 & sleep 297 & read line"])
    root = box.root
    pid = process.pid
    assert process.poll() is None
    box.close()
    assert process.closed
    assert not os.path.exists(f"/proc/{pid}")
    assert not root.exists()
    lingering = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p) == b"sleep\x00297\x00"]
    assert lingering == []


def test_a_bind_over_a_system_mount_is_refused() -> None:
    with Sandbox() as box, pytest.raises(SandboxPathError):
        box.spawn(["/bin/true"], ro_binds={"/tmp": "/usr/local"})


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
