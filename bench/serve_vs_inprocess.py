"""GRPO step time through ``envsuite serve`` (the real tinker SDK over HTTP) against the in-process backend.

    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/serve_vs_inprocess.py [--steps 8] [--out runs/serve_vs_inprocess]

The shape is the GRPO benchmark's (``bench/grpo_vs_trl.py``): SmolLM2-135M-Instruct in fp32 on CPU,
``arithmetic`` with two-digit addition and "Reply with the number only", 8 problems x 4 rollouts per
step, at most 16 new tokens at temperature 1, rank-32 LoRA, Adam at lr 1e-5, one optimizer step per
batch. The same ``TrainConfig`` runs twice with envsuite's trainer, each in its own child process, one
after the other:

* ``inprocess``: ``backend="local"``, the compute in the trainer's own process;
* ``server``: ``backend="tinker"`` with ``base_url`` set to an ``envsuite serve`` started for the run
  (a separate process on 127.0.0.1), so every sample, ``forward_backward``, ``optim_step`` and weight
  snapshot goes through the SDK's HTTP API (protobuf bodies, long-polled futures).

Both see the same problems and seeds. With ``--repeats N`` the sides run N times each in ABBA order
(in process, server, server, in process, ...), so a machine whose load drifts during the run weighs on
both alike. The table gives, per side, the median over runs of each run's median seconds per step
(step 0, the warm-up, excluded), the trainer's phases, and the ratio; the goal is at most 10% more time
per step through the server. ``--side`` runs one side in the current process (the parent uses it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV_ID = "arithmetic"
ENV_KWARGS: dict[str, Any] = {"digits": 2, "operations": ["+"], "n_terms": 2, "answer_format": "number"}
MODEL = "smollm2-135m-instruct"
SHAPE: dict[str, Any] = {
    "batch_size": 8,
    "group_size": 4,
    "max_tokens": 16,
    "learning_rate": 1e-5,
    "lora_rank": 32,
    "seed": 0,
    "beta1": 0.9,
    "beta2": 0.95,
    "eps": 1e-8,
}
"""bench/grpo_vs_trl.py's shape (its ``Shape`` defaults)."""
ROOT = Path(__file__).resolve().parent.parent


def run_side(side: str, steps: int, out: Path, base_url: str | None) -> dict[str, Any]:
    """Train ``steps`` steps with envsuite's trainer; per-step times from its ``metrics.jsonl``."""
    from envsuite.trainers import TrainConfig, read_metrics, run_training

    log_dir = out / side
    config = TrainConfig(
        env_id=ENV_ID,
        log_dir=str(log_dir),
        env_kwargs=ENV_KWARGS,
        model=MODEL,
        backend="local" if side == "inprocess" else "tinker",
        base_url=base_url,
        n_steps=steps,
        save_every=steps,
        eval_every=0,
        n_test_groups=0,
        n_transcripts=0,
        **SHAPE,
    )
    started = time.perf_counter()
    run_training(config, show_progress=False)
    rows = read_metrics(log_dir / "metrics.jsonl")
    phases = sorted({k for row in rows for k in row if k.startswith("time/")})
    return {
        "side": side,
        "run_s": time.perf_counter() - started,
        "step_s": [sum(float(row.get(p, 0.0)) for p in phases) for row in rows],
        "phases": {p: [float(row.get(p, 0.0)) for row in rows] for p in phases},
        "reward": [float(row["reward/mean"]) for row in rows],
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(url: str, server: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"envsuite serve exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/api/v1/healthz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"envsuite serve did not answer at {url} within {timeout_s} s")


def run_child(side: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    result_file = out / f"{side}.json"
    for stale in (out / side, out / "serve-state"):
        if stale.exists():
            shutil.rmtree(stale)
    command = [sys.executable, "-P", __file__, "--side", side, "--steps", str(args.steps), "--out", str(out)]
    server = None
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TINKER_TELEMETRY": "0"}
    if side == "server":
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        serve = [str(Path(sys.executable).parent / "envsuite"), "serve", "--port", str(port)]
        server = subprocess.Popen([*serve, "--state-dir", str(out / "serve-state")], env=env, cwd=ROOT)
        _wait_healthy(url, server)
        command += ["--base-url", url]
    try:
        subprocess.run(command, check=True, env=env, cwd=ROOT)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
    result: dict[str, Any] = json.loads(result_file.read_text())
    return result


def _median(values: list[float]) -> float:
    return statistics.median(values[1:]) if len(values) > 1 else float("nan")


def _over_runs(runs: list[dict[str, Any]], pick: Callable[[dict[str, Any]], float]) -> float:
    return statistics.median(pick(run) for run in runs)


def print_table(results: dict[str, list[dict[str, Any]]]) -> None:
    local, remote = results["inprocess"], results["server"]

    def step(run: dict[str, Any]) -> float:
        return _median(run["step_s"])

    rows = [("seconds per step (median, steps 1..)", _over_runs(local, step), _over_runs(remote, step))]
    for phase in sorted(set(local[0]["phases"]) & set(remote[0]["phases"])):

        def of_phase(run: dict[str, Any], phase: str = phase) -> float:
            return _median(run["phases"][phase])

        rows.append((phase.removeprefix("time/"), _over_runs(local, of_phase), _over_runs(remote, of_phase)))
    rows.append(
        ("whole run (s)", _over_runs(local, lambda r: r["run_s"]), _over_runs(remote, lambda r: r["run_s"]))
    )
    print(f"{'':40s} {'in process':>11s} {'server':>11s} {'server/in':>10s}")
    for name, a, b in rows:
        ratio = b / a if a > 0 else float("nan")
        print(f"{name:40s} {a:11.3f} {b:11.3f} {ratio:10.3f}")
    pairs = [f"{step(b) / step(a):.3f}" for a, b in zip(local, remote, strict=True)]
    print(f"server / in process, s/step, per pair of runs: {', '.join(pairs)}")
    rewards = [statistics.mean(run["reward"]) for run in local + remote]
    print(f"mean reward per run: {', '.join(f'{r:.3f}' for r in rewards)}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1, help="runs per side, in ABBA order")
    parser.add_argument("--out", default="runs/serve_vs_inprocess")
    parser.add_argument("--side", choices=["inprocess", "server"], help="run one side here (internal)")
    parser.add_argument("--base-url", default=None, help="server side: the envsuite serve to use (internal)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    out = Path(args.out).resolve()
    if args.side is not None:
        result = run_side(args.side, args.steps, out, args.base_url)
        (out / f"{args.side}.json").write_text(json.dumps(result))
        return
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict[str, Any]]] = {"inprocess": [], "server": []}
    for repeat in range(args.repeats):
        order = ("inprocess", "server") if repeat % 2 == 0 else ("server", "inprocess")
        for side in order:
            results[side].append(run_child(side, args, out))
            (out / "summary.json").write_text(json.dumps(results, indent=2))
    print_table(results)


if __name__ == "__main__":
    main()
