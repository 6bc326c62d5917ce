"""The sandbox's cost: latency of ``print(1)`` and executions per second, next to a bare subprocess.

One run measures, on the same program (``/usr/bin/python3 -c 'print(1)'``):

* **bare**: ``subprocess.run`` of it, no isolation, no limits (the peer: what any harness pays at least);
* **session**: :meth:`envsuite.sandbox.Sandbox.run` in one open sandbox (bubblewrap, rlimits, a cgroup
  where writable, output capture, the kill at the end);
* **one-shot**: a fresh :class:`Sandbox` per execution, scratch dir made and removed each time (what a
  grader that never reuses a sandbox pays).

Latency: ``--runs`` sequential executions each (after a warm-up), p50 and p99. Throughput: ``--runs``
executions spread over ``--parallel`` threads (2 = this box's cores), executions per second. Goals
(issue 35): session p50 <= 50 ms and throughput >= 0.5x bare. JSON lines on stdout, a table on stderr.

    flock -x /tmp/cpu.lock .venv/bin/python bench/sandbox.py --runs 200
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from _host import cpu_name

from envsuite.sandbox import Sandbox, SandboxConfig, sandbox_support

PROGRAM = ["/usr/bin/python3", "-c", "print(1)"]


def _bare() -> None:
    done = subprocess.run(PROGRAM, capture_output=True, check=False)
    assert done.stdout == b"1\n"


def _in(box: Sandbox) -> Callable[[], None]:
    def run() -> None:
        result = box.run(PROGRAM)
        assert result.ok and result.stdout == "1\n", result

    return run


def _one_shot(config: SandboxConfig) -> Callable[[], None]:
    def run() -> None:
        with Sandbox(config) as box:
            result = box.run(PROGRAM)
        assert result.ok and result.stdout == "1\n", result

    return run


def _latencies(fn: Callable[[], None], runs: int) -> list[float]:
    for _ in range(5):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _throughput(fn: Callable[[], None], runs: int, parallel: int) -> float:
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(lambda _: fn(), range(parallel * 2)))  # warm-up
        start = time.perf_counter()
        list(pool.map(lambda _: fn(), range(runs)))
        return runs / (time.perf_counter() - start)


def _percentile(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="executions per measurement")
    parser.add_argument("--parallel", type=int, default=2, help="threads for the throughput measurement")
    args = parser.parse_args()
    config = SandboxConfig()
    support = sandbox_support(config)
    load_before = os.getloadavg()
    rows = []
    with Sandbox(config) as box:
        for name, fn in (
            ("bare subprocess.run", _bare),
            ("sandbox session", _in(box)),
            ("sandbox one-shot", _one_shot(config)),
        ):
            times = _latencies(fn, args.runs)
            rate = _throughput(fn, args.runs, args.parallel)
            rows.append(
                {
                    "what": name,
                    "p50_ms": round(statistics.median(times) * 1000, 2),
                    "p99_ms": round(_percentile(times, 0.99) * 1000, 2),
                    "executions_per_s": round(rate, 1),
                }
            )
    bare_rate = rows[0]["executions_per_s"]
    for row in rows:
        row["vs_bare"] = round(float(row["executions_per_s"]) / float(bare_rate), 3)
        row |= {
            "runs": args.runs,
            "parallel": args.parallel,
            "sandbox": support.describe(),
            "cpu": cpu_name(),
            "load_before": [round(x, 2) for x in load_before],
        }
        print(json.dumps(row))
    print(f"{'':22s} {'p50 ms':>8s} {'p99 ms':>8s} {'exec/s':>8s} {'vs bare':>8s}", file=sys.stderr)
    for row in rows:
        print(
            f"{row['what']:22s} {row['p50_ms']:8.2f} {row['p99_ms']:8.2f} {row['executions_per_s']:8.1f} "
            f"{row['vs_bare']:8.3f}",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
