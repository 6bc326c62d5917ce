"""Load on one OpenEnv server: N concurrent sessions (OpenEnv's own client) playing whole episodes.

Starts ``envsuite serve-env ENV`` on loopback (127.0.0.1 only), opens ``--sessions`` WebSocket sessions
at once, and has each play ``--episodes`` episodes with scripted replies; reports errors and the
p50/p99 latency of one ``step`` round trip. Bounded in count and time (``--deadline``), stops by itself.

    .venv/bin/python bench/openenv_load.py --env tictactoe --sessions 64 --episodes 4
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

# Imported here, not in a coroutine (see envsuite.adapters.openenv._client).
from openenv.core import GenericEnvClient

REPLIES = ("[4]", "[0]", "[8]", "[2]", "[6]", "Is it an animal?", "[1]", "[3]", "[5]", "[7]")


@dataclass
class LoadResult:
    env_id: str
    sessions: int
    episodes: int
    steps: int
    errors: int
    first_error: str
    p50_ms: float
    p99_ms: float
    seconds: float


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def served(
    env_id: str, model: str = "tiny-random", timeout_s: float = 300.0
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``envsuite serve-env`` in a subprocess on a free loopback port; yields its URL and process."""
    port = free_port()
    exe = Path(sys.executable).parent / "envsuite"
    cmd = [str(exe), "serve-env", env_id, "--model", model, "--port", str(port), "--max-sessions", "512"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"serve-env exited: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}"
                )
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"serve-env did not come up on {url}") from None
                time.sleep(0.3)
        yield url, proc
    finally:
        proc.kill()
        proc.wait()


async def _session(url: str, index: int, episodes: int, latencies: list[float], errors: list[str]) -> int:
    steps = 0
    try:
        async with GenericEnvClient(base_url=url, message_timeout_s=120.0) as client:
            for episode in range(episodes):
                result = await client.reset(seed=1000 * index + episode)
                turn = 0
                while not result.done and turn < 64:
                    started = time.perf_counter()
                    result = await client.step({"text": REPLIES[(index + turn) % len(REPLIES)]})
                    latencies.append(time.perf_counter() - started)
                    steps += 1
                    turn += 1
                if not result.done:
                    errors.append(f"session {index}: episode {episode} did not end in 64 turns")
    except Exception as exc:
        errors.append(f"session {index}: {type(exc).__name__}: {exc}"[:300])
    return steps


async def run_load(
    url: str, env_id: str, sessions: int, episodes: int, deadline_s: float = 600.0
) -> LoadResult:
    latencies: list[float] = []
    errors: list[str] = []
    started = time.perf_counter()
    counts = await asyncio.wait_for(
        asyncio.gather(*(_session(url, i, episodes, latencies, errors) for i in range(sessions))), deadline_s
    )
    ordered = sorted(latencies) or [0.0]
    return LoadResult(
        env_id=env_id,
        sessions=sessions,
        episodes=sessions * episodes,
        steps=sum(counts),
        errors=len(errors),
        first_error=errors[0] if errors else "",
        p50_ms=1000 * ordered[len(ordered) // 2],
        p99_ms=1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        seconds=time.perf_counter() - started,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="tictactoe")
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--episodes", type=int, default=4, help="episodes per session")
    parser.add_argument("--model", default="tiny-random", help="tokenizer the server renders with")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds before the load gives up")
    args = parser.parse_args()
    with served(args.env, args.model) as (url, _):
        result = asyncio.run(run_load(url, args.env, args.sessions, args.episodes, args.deadline))
    print(json.dumps(asdict(result), indent=2))


if __name__ == "__main__":
    main()
