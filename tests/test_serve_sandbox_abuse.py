"""``envsuite serve-sandbox`` cannot be misused (issue 53): a request's limits are capped by the
server's, a run whose client left is killed, the server refuses to listen beyond loopback without a
key, and ``cpu_time`` is the sandboxed tree's real CPU time.

A real ``envsuite serve-sandbox`` process on 127.0.0.1 (and the app in a thread where only its key
check is under test); every request is bounded and every server stopped by the test.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from envsuite.errors import UsageError
from envsuite.sandbox import Limits, SandboxConfig, SandboxServerConfig, create_fusion_app
from tests.support.sandbox import needs_sandbox
from tests.test_serve import _free_port

ENVSUITE = str(Path(sys.executable).parent / "envsuite")
SPIN = (
    "import time\nlast = 0.0\nwhile True:\n    t = time.process_time()\n"
    "    if t - last >= 0.05:\n        print(t, flush=True)\n        last = t"
)
"""Spins forever, printing its own CPU time every 0.05 s of it."""


pytestmark = needs_sandbox


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (the server's sandboxed runs among them)."""
    parent_of = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/stat", "rb") as fh:
                parent_of[int(entry)] = int(fh.read().rsplit(b")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parent_of.items() if pp == parent]
        found += children
        frontier += children
    return found


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    """``envsuite serve-sandbox`` capped at 3 s and 256 MB per run."""
    port = _free_port()
    argv = [ENVSUITE, "serve-sandbox", "--port", str(port), "--run-timeout", "3", "--memory-mb", "256"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/v1/ping", timeout=2).text == "pong":
                    break
            assert time.monotonic() < deadline, "serve-sandbox did not come up"
            time.sleep(0.2)
        yield base, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _run(base: str, timeout: float = 120, **body: Any) -> dict[str, Any]:
    reply = httpx.post(f"{base}/run_code", json={"language": "python", **body}, timeout=timeout)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def test_a_requests_limits_are_capped_by_the_servers(server: tuple[str, int]) -> None:
    base, _ = server
    hog = _run(base, code="b = bytearray(1 << 30)\nprint('allocated')", memory_limit_MB=999_999_999)
    assert hog["status"] == "Failed" and "allocated" not in hog["run_result"]["stdout"], hog
    assert hog["sandbox"]["memory_MB"] == 256 and hog["sandbox"]["limit"] == "memory"
    spin = _run(
        base, code="import time\nt = time.time()\nwhile time.time() - t < 14:\n    pass", run_timeout=1e12
    )
    assert spin["run_result"]["status"] == "TimeLimitExceeded", spin
    assert spin["sandbox"]["run_timeout"] == 3.0
    shorter = _run(base, code="print(1)", run_timeout=1, memory_limit_MB=64)
    assert shorter["status"] == "Success" and shorter["sandbox"]["run_timeout"] == 1.0
    assert shorter["sandbox"]["memory_MB"] == 64, "a client may always ask for less"
    nan = httpx.post(f"{base}/run_code", content=b'{"code": "", "run_timeout": NaN}', timeout=30)
    assert nan.status_code == 422 and "finite" in nan.text


def test_files_fetched_back_are_bounded(server: tuple[str, int]) -> None:
    """At most 256 paths, and 64 MB of files in all: a 15 MB file named twice comes back once, and the
    fifth one, which would pass the budget, is left out (as a missing file is)."""
    base, _ = server
    many = httpx.post(f"{base}/run_code", json={"code": "", "fetch_files": ["f"] * 257}, timeout=60)
    assert many.status_code == 422
    code = "for name in 'abcde':\n    open(name, 'wb').write(b'x' * (15 << 20))"
    answer = _run(base, code=code, fetch_files=["a", "a", "b", "c", "d", "e"], timeout=300)
    assert answer["status"] == "Success", answer["run_result"]
    assert list(answer["files"]) == ["a", "b", "c", "d"], list(answer["files"])


PROC_RESOLUTION_S = 2 / os.sysconf("SC_CLK_TCK")
"""One process's CPU time as /proc gives it: user and system time, each in whole ticks, rounded down."""


def _last_seen(stdout: str) -> float:
    return float(stdout.split()[-1])


def test_cpu_time_is_the_sandboxed_trees(server: tuple[str, int]) -> None:
    """A program that spins until the wall clock kills it, printing its own CPU time as it goes: the
    reported cpu_time is at least the last it printed (however loaded the machine), in a child too, up
    to the resolution of what the kernel reports: /proc counts each process's user and system time in
    whole clock ticks, rounded down (once seen: 1.96 s reported for 1.974 s printed)."""
    base, _ = server
    spun = _run(base, code=SPIN, run_timeout=2)
    assert spun["sandbox"]["limit"] in ("wall_time", "cpu_time"), spun
    seen = _last_seen(spun["run_result"]["stdout"])
    assert seen > 0.1 and spun["sandbox"]["cpu_time"] >= seen - PROC_RESOLUTION_S, (seen, spun["sandbox"])
    child = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {SPIN!r}])"
    forked = _run(base, code=child, run_timeout=2)
    seen_in_child = _last_seen(forked["run_result"]["stdout"])
    assert seen_in_child > 0.1 and forked["sandbox"]["cpu_time"] >= seen_in_child - PROC_RESOLUTION_S, forked[
        "sandbox"
    ]
    print(f"cpu_time of a 2 s spin: {spun['sandbox']['cpu_time']:.2f} s (the program saw {seen:.2f} s)")


def test_runs_whose_client_left_are_killed(server: tuple[str, int]) -> None:
    """Four sleepers abandoned after 1 s take every slot of a 2-core server; they are killed when their
    clients leave, so a fifth request runs at once and no sandboxed process is left behind."""
    base, pid = server

    def abandon() -> None:
        with contextlib.suppress(httpx.TimeoutException):
            httpx.post(f"{base}/run_code", json={"code": "import time\ntime.sleep(20)"}, timeout=1.0)

    leavers = [threading.Thread(target=abandon) for _ in range(4)]
    for thread in leavers:
        thread.start()
    for thread in leavers:
        thread.join()
    start = time.monotonic()
    quick = _run(base, code="print('next')", timeout=60)
    waited = time.monotonic() - start
    assert quick["status"] == "Success" and quick["run_result"]["stdout"] == "next\n"
    deadline = time.monotonic() + 10
    while _descendants(pid):  # killed within moments; 10 s is a generous bound, not a speed test
        assert time.monotonic() < deadline, f"sandboxed processes left: {_descendants(pid)}"
        time.sleep(0.1)
    print(f"a fifth request after four abandoned 20 s sleepers answered in {waited:.2f} s")
    assert waited < 15, "the fifth request waited for the abandoned sleepers to finish"


def test_listening_beyond_loopback_needs_a_key(tmp_path: Path) -> None:
    refused = subprocess.run(
        [ENVSUITE, "serve-sandbox", "--host", "0.0.0.0", "--port", str(_free_port())],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "ENVSUITE_SANDBOX_API_KEY"},
    )
    assert refused.returncode == 2 and "API key" in refused.stderr, refused.stderr
    with pytest.raises(UsageError, match="API key"):
        create_fusion_app(SandboxServerConfig(host="0.0.0.0"))
    # With a key the app answers only requests that carry it (served here on loopback only).
    config = SandboxServerConfig(host="0.0.0.0", sandbox=SandboxConfig(limits=Limits(wall_s=5, cpu_s=5)))
    app = create_fusion_app(config, api_key="sbx-key")
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}/run_code"
        body = {"code": "print(6 * 7)", "language": "python"}
        assert httpx.post(url, json=body, timeout=60).status_code == 401
        wrong = httpx.post(url, json=body, headers={"X-API-Key": "nope"}, timeout=60)
        assert wrong.status_code == 401 and "API key" in wrong.json()["detail"]
        ok = httpx.post(url, json=body, headers={"Authorization": "Bearer sbx-key"}, timeout=60)
        assert ok.status_code == 200 and ok.json()["run_result"]["stdout"] == "42\n"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
