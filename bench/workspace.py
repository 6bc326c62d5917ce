"""A workspace command's cost, and workspace episodes per second, next to a bare ``subprocess.run``.

The commands are what an agent types in a data task (``ls``, ``grep -c``, ``head | cut``, a short
Python one-liner, ``jq``, ``sqlite3``, ``git log``), run over the same files:

* **bare**: ``subprocess.run(["bash", "-c", command])`` in a host temp dir (no isolation, no limits:
  the least any harness pays);
* **session**: :meth:`WorkspaceSession.run_shell` in one open workspace (bubblewrap, rlimits, a cgroup
  where writable, output capture, the tree killed after each command, the result text built);
* **tool call**: the same through the ``bash`` tool and :func:`envsuite.tools.run_tool_call` (argument
  checks, a worker thread, the tool message), as an episode runs it.

Latency: ``--rounds`` passes over the commands, sequential, after a warm-up: p50 and p99 over all
commands. Episodes per second over ``--parallel`` threads (2 = this box's cores), ``--episodes`` each:

* **bare episode**: make a temp dir, write the task's files, run the commands, read the answer, remove it;
* **workspace episode**: make a :class:`WorkspaceSession`, lay out a ``workspace/shell_easy`` task, run
  the same commands, grade, close;
* **env episode**: a whole ``workspace/shell_easy`` episode through the env (prompt rendered with the
  tiny model's tokenizer, the reference's calls parsed and run, a closing reply, the hidden check).

JSON lines on stdout, a table on stderr::

    flock -x /tmp/cpu.lock .venv/bin/python bench/workspace.py --rounds 30 --episodes 40
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _host import cpu_name

import envsuite
from envsuite.core import ToolCall, run_tool_call
from envsuite.envs.workspace import WorkspaceLimits, WorkspaceSession, workspace_tools
from envsuite.renderers import reply_to_tokens
from envsuite.sandbox import SandboxConfig, sandbox_support

COMMANDS = (
    "ls -la",
    "grep -c ERROR logs/access.log",
    "head -n 5 data/sales.csv | cut -d, -f1,3",
    "python3 -c 'import json; print(len(json.load(open(\"data/users.json\"))))'",
    "jq '[.[] | select(.age > 30)] | length' data/users.json",
    "sqlite3 db.sqlite 'select count(*), sum(x) from t'",
    "git -C repo log --oneline | wc -l",
)
SETUP = (
    "sqlite3 db.sqlite 'create table t(x); insert into t values (1), (2), (3);' && git init -q -b main repo && "
    "cd repo && echo x > f && git add f && git -c user.name=a -c user.email=a@b commit -qm one"
)


def _task_files() -> dict[str, str]:
    env = envsuite.make_env("workspace/shell_easy", seed=0, model="tiny-random")
    return dict(env.spec.files)  # type: ignore[attr-defined]


def _percentile(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _latencies(run: Callable[[str], None], rounds: int) -> list[float]:
    for command in COMMANDS:
        run(command)
    times = []
    for _ in range(rounds):
        for command in COMMANDS:
            start = time.perf_counter()
            run(command)
            times.append(time.perf_counter() - start)
    return times


def _bare_dir(files: dict[str, str]) -> Path:
    where = Path(tempfile.mkdtemp(prefix="bench-bare-"))
    for path, text in files.items():
        (where / path).parent.mkdir(parents=True, exist_ok=True)
        (where / path).write_text(text)
    subprocess.run(["bash", "-c", SETUP], cwd=where, check=True, capture_output=True)
    return where


def _bare_run(where: Path) -> Callable[[str], None]:
    def run(command: str) -> None:
        done = subprocess.run(["bash", "-c", command], cwd=where, capture_output=True, check=False)
        assert done.returncode == 0, (command, done.stderr)

    return run


def _session(files: dict[str, str]) -> WorkspaceSession:
    # Budgets past anything the bench runs (the defaults end an episode after 40 commands).
    session = WorkspaceSession(WorkspaceLimits(episode_commands=10**6, episode_wall_s=1e6, episode_cpu_s=1e6))
    for path, text in files.items():
        session.write_file(path, text)
    assert session.run_setup(SETUP).ok
    return session


def _session_run(session: WorkspaceSession) -> Callable[[str], None]:
    def run(command: str) -> None:
        assert session.run_shell(command).ok, command

    return run


def _tool_run(session: WorkspaceSession) -> Callable[[str], None]:
    tools = workspace_tools(session)

    def run(command: str) -> None:
        outcome = asyncio.run(run_tool_call(tools, ToolCall.create("bash", {"command": command}, "c")))
        assert outcome.ok and outcome.messages[0]["content"].startswith("exit code: 0"), command

    return run


def _bare_episode(files: dict[str, str]) -> None:
    where = _bare_dir(files)
    try:
        run = _bare_run(where)
        for command in COMMANDS:
            run(command)
        (where / "answer.txt").write_text("1\n")
        assert (where / "answer.txt").read_text()
    finally:
        shutil.rmtree(where)


def _workspace_episode(files: dict[str, str]) -> None:
    with _session(files) as session:
        run = _session_run(session)
        for command in COMMANDS:
            run(command)
        session.write_file("answer.txt", "1\n")
        assert session.read_text("answer.txt")


def _env_episode() -> None:
    env = envsuite.make_env("workspace/shell_easy", seed=0, model="tiny-random")

    async def play() -> float:
        await env.initial_observation()
        renderer = env.renderer  # type: ignore[attr-defined]
        await env.step(reply_to_tokens(renderer, env.reference_reply()))  # type: ignore[attr-defined]
        final = await env.step(reply_to_tokens(renderer, "Done."))
        return final.reward

    assert asyncio.run(play()) == 1.0


def _rate(fn: Callable[[], None], count: int, parallel: int) -> float:
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(lambda _: fn(), range(parallel)))  # warm-up
        start = time.perf_counter()
        list(pool.map(lambda _: fn(), range(count)))
        return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="passes over the commands for latency")
    parser.add_argument("--episodes", type=int, default=40, help="episodes per throughput measurement")
    parser.add_argument("--parallel", type=int, default=2, help="threads for episodes per second")
    args = parser.parse_args()
    files = _task_files()
    load_before = os.getloadavg()
    common = {
        "cpu": cpu_name(),
        "sandbox": sandbox_support(SandboxConfig()).describe(),
        "load_before": [round(x, 2) for x in load_before],
    }
    rows = []
    bare = _bare_dir(files)
    try:
        with _session(files) as session:
            for name, run in (
                ("bare subprocess.run", _bare_run(bare)),
                ("workspace session", _session_run(session)),
                ("workspace tool call", _tool_run(session)),
            ):
                times = _latencies(run, args.rounds)
                rows.append(
                    {
                        "what": name,
                        "p50_ms": round(statistics.median(times) * 1000, 2),
                        "p99_ms": round(_percentile(times, 0.99) * 1000, 2),
                        "commands": len(times),
                    }
                )
    finally:
        shutil.rmtree(bare)
    for name, episode in (
        ("bare episode", lambda: _bare_episode(files)),
        ("workspace episode", lambda: _workspace_episode(files)),
        ("env episode (workspace/shell_easy)", _env_episode),
    ):
        rows.append(
            {
                "what": name,
                "episodes_per_s": round(_rate(episode, args.episodes, args.parallel), 2),
                "episodes": args.episodes,
                "parallel": args.parallel,
            }
        )
    for row in rows:
        print(json.dumps({**row, **common}))
    print(f"{'':36s} {'p50 ms':>8s} {'p99 ms':>8s} {'episodes/s':>11s}", file=sys.stderr)
    for row in rows:
        p50, p99 = row.get("p50_ms"), row.get("p99_ms")
        rate = row.get("episodes_per_s")
        print(
            f"{row['what']:36s} {'' if p50 is None else f'{p50:8.2f}':>8s} {'' if p99 is None else f'{p99:8.2f}':>8s} "
            f"{'' if rate is None else f'{rate:11.2f}':>11s}",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
