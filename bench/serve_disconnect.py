"""How fast ``envsuite serve`` goes idle after a client abandons a long generation (issue 53).

Starts ``envsuite serve`` as a child process, sends one chat request with ``max_tokens: 100000000``
(whole or streamed), hangs up after ``--leave-after`` seconds, and samples the server's CPU time from
``/proc/<pid>/stat`` every 0.1 s: the figure is the time from the hang-up until the server used under
5 % of a core over a 0.5 s window::

    python bench/serve_disconnect.py                      # tiny-random, n=8, whole and streamed
    python bench/serve_disconnect.py --model smollm2-135m-instruct --n 1
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench._host import offline_env

ENVSUITE = str(Path(sys.executable).parent / "envsuite")
_SAMPLE_S = 0.1
_WINDOW = 5
"""Samples per idle window (0.5 s)."""
_IDLE_CORES = 0.05


@dataclass(frozen=True)
class Measured:
    busy_cores: float
    """CPU seconds per second while the request ran."""
    idle_after_s: float | None
    """Seconds from the hang-up to the start of the first idle window (None: never, within the wait)."""


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        fields = fh.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _abandon(base: str, body: dict[str, object], after_s: float) -> None:
    with contextlib.suppress(httpx.TimeoutException), httpx.Client(timeout=after_s) as client:
        if body.get("stream"):
            # httpx's timeout bounds each read, and a stream's chunks keep coming: leave by the clock
            hang_up = time.monotonic() + after_s
            with client.stream("POST", f"{base}/v1/chat/completions", json=body) as response:
                for _ in response.iter_bytes():
                    if time.monotonic() >= hang_up:
                        break
        else:
            client.post(f"{base}/v1/chat/completions", json=body)


def measure(base: str, pid: int, body: dict[str, object], leave_after: float, wait_s: float) -> Measured:
    """Send ``body``, hang up after ``leave_after`` s, and watch the server's CPU for ``wait_s`` s."""
    client = threading.Thread(target=_abandon, args=(base, body, leave_after))
    start_cpu, start = _cpu_s(pid), time.monotonic()
    client.start()
    client.join()
    left, left_cpu = time.monotonic(), _cpu_s(pid)
    busy = (left_cpu - start_cpu) / (left - start)
    samples = [(left, left_cpu)]
    while time.monotonic() - left < wait_s:
        time.sleep(_SAMPLE_S)
        samples.append((time.monotonic(), _cpu_s(pid)))
        if len(samples) > _WINDOW:
            (t0, c0), (t1, c1) = samples[-1 - _WINDOW], samples[-1]
            if (c1 - c0) / (t1 - t0) < _IDLE_CORES:
                return Measured(busy, t0 - left)
    return Measured(busy, None)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="tiny-random")
    parser.add_argument("--n", type=int, default=8, help="choices per request")
    parser.add_argument("--leave-after", type=float, default=3.0, help="seconds before the client hangs up")
    parser.add_argument("--wait", type=float, default=30.0, help="seconds to watch for idle")
    args = parser.parse_args()
    port = _free_port()
    with tempfile.TemporaryDirectory() as state:
        argv = [ENVSUITE, "serve", "--port", str(port), "--state-dir", state, "--max-tokens", "8000"]
        server = subprocess.Popen(argv, env=offline_env(), stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 600
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{base}/api/v1/healthz", timeout=2).status_code == 200:
                        break
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("envsuite serve did not start")
                time.sleep(0.3)
            chat = {"model": args.model, "messages": [{"role": "user", "content": "Count to a million."}]}
            httpx.post(f"{base}/v1/chat/completions", json={**chat, "max_tokens": 2}, timeout=600)
            time.sleep(3)  # the warm-up's engine thread goes idle
            for stream in (False, True):
                body = {**chat, "max_tokens": 100_000_000, "n": args.n, "temperature": 1.0, "stream": stream}
                got = measure(base, server.pid, body, args.leave_after, args.wait)
                idle = "never" if got.idle_after_s is None else f"{got.idle_after_s:.1f} s"
                kind = "streamed" if stream else "whole"
                print(f"{kind:8} busy {got.busy_cores:.2f} cores; idle after the hang-up: {idle}", flush=True)
                time.sleep(2)
        finally:
            server.terminate()
            server.wait(timeout=60)


if __name__ == "__main__":
    main()
