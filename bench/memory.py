"""Peak memory (RSS) of the commands a laptop user runs: ``make demo``, ``envsuite bench``, ``envsuite train``.

    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/memory.py [--only demo,bench,train,train_multiturn] [--interval 0.2]
        [--json artifacts/memory.json]

Each command runs as a child process in a scratch directory (its own runs, logs and leaderboard), on
SmolLM2-135M-Instruct with the settings the demo uses for that phase:

* ``demo``: ``envsuite demo`` (what ``make demo`` runs: train, bench base and trained, rank);
* ``bench``: ``envsuite bench`` of the base model on the demo's five envs, 12 episodes each;
* ``train``: ``envsuite train arithmetic_easy`` with the demo's training settings (12 steps of 8 x 4);
* ``train_multiturn``: ``envsuite train tictactoe_easy`` (a multi-turn game against the random
  opponent, one datum per game) with its preset's settings, 4 steps of 8 x 4.

The peak is the largest sum of the resident set sizes of the command and all its children (a
math-verify worker, for instance), sampled every ``--interval`` seconds; the main process's own
high-water mark (``VmHWM``, exact) is reported next to it. Goals (issue 18): demo <= 3 GB,
bench <= 2 GB, train <= 3 GB (both envs).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python -P` leaves bench/ off the path
from _host import offline_env, tree_rss

MODEL = "smollm2-135m-instruct"
DEMO_ENVS = ["arithmetic_easy", "arithmetic", "math", "twenty_questions", "tictactoe"]
GOALS_GB = {"demo": 3.0, "bench": 2.0, "train": 3.0, "train_multiturn": 3.0}


def commands(envsuite: str, scratch: Path) -> dict[str, list[str]]:
    return {
        "demo": [envsuite, "demo", "--out-dir", str(scratch / "demo")],
        "bench": [
            envsuite, "bench", "--model", MODEL, "--envs", *DEMO_ENVS, "--episodes", "12", "--seed", "0",
            "--max-tokens", "64", "--temperature", "0.7", "--log-dir", str(scratch / "bench-logs"),
            "--db", str(scratch / "board.sqlite"),
        ],
        "train": [
            envsuite, "train", "arithmetic_easy", "--model", MODEL, "--steps", "12", "--batch-size", "8",
            "--group-size", "4", "--lr", "5e-4", "--lora-rank", "16", "--max-tokens", "16",
            "--save-every", "12", "--eval-every", "12", "--test-groups", "16", "--no-progress",
            "--log-dir", str(scratch / "train"),
        ],
        "train_multiturn": [
            envsuite, "train", "tictactoe_easy", "--model", MODEL, "--steps", "4", "--batch-size", "8",
            "--group-size", "4", "--lr", "5e-4", "--lora-rank", "16", "--max-tokens", "10",
            "--save-every", "4", "--eval-every", "4", "--test-groups", "8", "--no-progress",
            "--log-dir", str(scratch / "train-multiturn"),
        ],
    }  # fmt: skip


@dataclass(frozen=True)
class MemoryRun:
    name: str
    command: list[str]
    seconds: float
    exit_code: int
    peak_tree_gb: float
    """Largest sampled sum of RSS over the process and its children."""
    peak_main_hwm_gb: float
    """The main process's own RSS high-water mark (VmHWM)."""
    goal_gb: float
    load_before: tuple[float, float, float]


def _hwm_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def measure(name: str, command: list[str], interval: float, cwd: Path) -> MemoryRun:
    load = tuple(round(x, 2) for x in os.getloadavg())
    env = offline_env()
    started = time.perf_counter()
    child = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    proc = psutil.Process(child.pid)
    peaks = {"tree": 0, "hwm": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            try:
                peaks["tree"] = max(peaks["tree"], tree_rss(proc))
                peaks["hwm"] = max(peaks["hwm"], _hwm_bytes(child.pid))
            except psutil.Error:
                pass
            done.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    assert child.stdout is not None
    tail: collections.deque[str] = collections.deque(maxlen=20)
    for raw in child.stdout:
        tail.append(raw.decode(errors="replace").rstrip())
    code = child.wait()
    done.set()
    sampler.join()
    if code != 0:
        print("\n".join(tail), file=sys.stderr)
    return MemoryRun(
        name=name,
        command=command,
        seconds=round(time.perf_counter() - started, 1),
        exit_code=code,
        peak_tree_gb=round(peaks["tree"] / 1e9, 3),
        peak_main_hwm_gb=round(peaks["hwm"] / 1e9, 3),
        goal_gb=GOALS_GB[name],
        load_before=(load[0], load[1], load[2]),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="demo,bench,train,train_multiturn", help="comma-separated subset")
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between RSS samples")
    parser.add_argument("--json", type=Path, default=Path("artifacts/memory.json"))
    args = parser.parse_args()
    envsuite = str(Path(sys.executable).with_name("envsuite"))
    results = []
    with tempfile.TemporaryDirectory(prefix="envsuite-memory-") as tmp:
        scratch = Path(tmp)
        table = commands(envsuite, scratch)
        for name in args.only.split(","):
            run = measure(name, table[name], args.interval, scratch)
            results.append(run)
            verdict = "met" if run.exit_code == 0 and run.peak_tree_gb <= run.goal_gb else "NOT met"
            print(
                f"{name:6s} peak {run.peak_tree_gb:5.2f} GB (main process HWM {run.peak_main_hwm_gb:5.2f} GB), "
                f"goal <= {run.goal_gb} GB: {verdict}; {run.seconds:.0f} s, exit {run.exit_code}, "
                f"load before {run.load_before}",
                flush=True,
            )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
