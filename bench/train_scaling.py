"""GRPO training throughput by where sampling and env work run: the process pool, the Ray executor,
sampler replicas (processes, Ray actors), and sampler replicas on a local multi-node Ray cluster.

    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/train_scaling.py --settings inprocess,process-2,ray-2,ray-samplers-2,process-samplers-2
    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/train_scaling.py --nodes 1,2,3
    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/train_scaling.py --kill      # 3 nodes, one worker node killed mid-run

Every run is a fresh ``envsuite train`` (a child process: its own Ray, its own memory) of the same config
(SmolLM2-135M-Instruct on ``arithmetic_easy``, 8 problems x 4 samples, 16 tokens, LoRA rank 16,
synchronous), differing only in ``--executor``/``--workers``/``--samplers``/``--ray-address``. A run's
*steps* are the sum of its per-step phase times (``time/*`` in metrics.jsonl: sampling with env work,
assembling, training, new weights to the samplers); *start* is everything else (imports, loading the
model, starting workers or replicas). Episodes per second = episodes sampled / steps seconds.

``--nodes``: a head and ``n - 1`` worker nodes started with ``ray start`` on loopback
(``tests/support/ray_cluster.py``), one CPU each, and ``--samplers n`` Ray actors spread over them.
On this box every node shares the same two cores: more nodes add processes, not compute.
``--kill``: three such nodes (the head with no CPU: the replicas live on the two workers), a worker node
SIGKILLed after the second step; the run must still finish every step.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support.ray_cluster import local_ray_cluster, wait_for  # noqa: E402

SETTINGS: dict[str, dict[str, Any]] = {
    "inprocess": {"executor": "inprocess"},
    "process-2": {"executor": "process", "workers": 2},
    "ray-2": {"executor": "ray", "workers": 2},
    "process-samplers-2": {"executor": "process", "samplers": 2},
    "ray-samplers-2": {"executor": "ray", "samplers": 2},
}

_CHILD = """
import sys
from envsuite.engine import reexec_under_jemalloc
reexec_under_jemalloc(sys.orig_argv[1:])  # as the envsuite command does: jemalloc where installed
from envsuite.trainers import TrainConfig, run_training
result = run_training(TrainConfig.from_json(sys.argv[1]), show_progress=False)
print("RESULT", result.cause.value, result.steps_completed, flush=True)
"""


def base_config(args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    return {
        "env_id": args.env,
        "log_dir": str(log_dir),
        "model": args.model,
        "n_steps": args.steps,
        "batch_size": 8,
        "group_size": 4,
        "max_tokens": 16,
        "learning_rate": 5e-4,
        "lora_rank": 16,
        "save_every": 1000,
        "eval_every": 0,
        "n_transcripts": 0,
        "seed": args.seed,
    }


def run(name: str, config: dict[str, Any], env: dict[str, str], kill: Any = None) -> dict[str, Any]:
    """One training run in a child process; its throughput from its metrics."""
    from envsuite.trainers import TrainConfig, read_metrics

    text = TrainConfig.from_dict(config).to_json()
    log_dir = Path(config["log_dir"])
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with (log_dir / "stdout.txt").open("w") as out_file, (log_dir / "stderr.txt").open("w") as err_file:
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, text], env=env, cwd=ROOT, stdout=out_file, stderr=err_file
        )
        if kill is not None:
            kill(child, log_dir / "metrics.jsonl")
        child.wait(timeout=3600)
    wall = time.perf_counter() - started
    out, err = (log_dir / "stdout.txt").read_text(), (log_dir / "stderr.txt").read_text()
    if child.returncode != 0:
        raise RuntimeError(f"{name} failed ({child.returncode}): {err[-3000:]}")
    rows = read_metrics(Path(config["log_dir"]) / "metrics.jsonl")
    steps_s = sum(float(v) for r in rows for k, v in r.items() if k.startswith("time/") and k != "time/eval")  # type: ignore[arg-type]
    episodes = sum(int(r["episodes"]) for r in rows)  # type: ignore[call-overload]
    return {
        "setting": name,
        "result": out.split("RESULT", 1)[-1].strip(),
        "episodes": episodes,
        "steps_s": round(steps_s, 2),
        "start_s": round(wall - steps_s, 2),
        "wall_s": round(wall, 2),
        "episodes_per_s": round(episodes / steps_s, 3),
        "per_step_s": round(steps_s / len(rows), 3),
        "replicas_lost": sum(int(r.get("replicas/lost", 0)) for r in rows),  # type: ignore[call-overload]
        "retried_groups": sum(int(r.get("replicas/retried_groups", 0)) for r in rows),  # type: ignore[call-overload]
        "reward_first_last": [rows[0]["reward/mean"], rows[-1]["reward/mean"]],
        "load": [round(x, 2) for x in os.getloadavg()],
    }


def child_env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--settings", default="", help=f"comma-separated, of: {', '.join(SETTINGS)}")
    parser.add_argument("--nodes", default="", help="comma-separated node counts of a local Ray cluster")
    parser.add_argument("--kill", action="store_true", help="3 nodes, a worker node killed after step 2")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--env", default="arithmetic_easy")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="envsuite-train-scaling-"))
    for name in filter(None, args.settings.split(",")):
        config = {**base_config(args, root / name), **SETTINGS[name]}
        print(json.dumps(run(name, config, child_env())), flush=True)
    for nodes in (int(n) for n in filter(None, args.nodes.split(","))):
        with local_ray_cluster(workers=nodes - 1, head_cpus=1) as cluster:
            name = f"cluster-{nodes}-nodes"
            config = {
                **base_config(args, root / name),
                "executor": "ray",
                "ray_address": cluster.address,
                "samplers": nodes,
            }
            print(json.dumps(run(name, config, {**child_env(), **cluster.env})), flush=True)
    if args.kill:
        with local_ray_cluster(workers=2, head_cpus=0) as cluster:

            def kill_after_two_steps(child: subprocess.Popen[str], metrics: Path) -> None:
                from envsuite.trainers import read_metrics

                wait_for(
                    lambda: child.poll() is not None or len(read_metrics(metrics)) >= 2, 1800, "two steps"
                )
                if child.poll() is None:
                    cluster.kill_node(2)

            config = {
                **base_config(args, root / "kill"),
                "executor": "ray",
                "ray_address": cluster.address,
                "samplers": 2,
            }
            print(
                json.dumps(
                    run(
                        "cluster-3-nodes-one-killed",
                        config,
                        {**child_env(), **cluster.env},
                        kill_after_two_steps,
                    )
                )
            )


if __name__ == "__main__":
    main()
