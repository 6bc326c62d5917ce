"""A real multi-node Ray cluster (issue 37.4): a head and two worker nodes, each started with ``ray start``
on loopback (separate raylets with their own resources). The trainer runs on the head as a driver
(the head has no CPU for actors), its two sampler replicas run as actors on the worker nodes with their
groups' envs; one worker node is killed mid-run and the run goes on with the other, counting the lost
replica, and ends with every step trained and logged once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from envsuite.trainers import TrainConfig, read_metrics
from tests.support.ray_cluster import local_ray_cluster, wait_for
from tests.test_trainer_run import TURNS_ID

_CHILD = """
import sys
from tests.test_trainer_run import register_toy
from envsuite.trainers import TrainConfig, run_training
register_toy()
result = run_training(TrainConfig.from_json(sys.argv[1]), show_progress=False)
print(result.cause.value, result.steps_completed)
"""


def test_a_worker_node_killed_mid_run_loses_no_trained_step(tmp_path: Path) -> None:
    with local_ray_cluster(workers=2, head_cpus=0, worker_cpus=1) as cluster:
        config = TrainConfig(
            env_id=TURNS_ID,
            log_dir=str(tmp_path / "run"),
            model="tiny-random",
            n_steps=8,
            batch_size=4,
            group_size=2,
            max_tokens=2,
            learning_rate=1e-2,
            lora_rank=8,
            save_every=2,
            eval_every=0,
            executor="ray",
            ray_address=cluster.address,
            samplers=2,
        )
        env = {
            **cluster.env,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONPATH": str(Path.cwd()),
        }
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, config.to_json()],
            env=env,
            cwd=Path.cwd(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        metrics = Path(config.log_dir) / "metrics.jsonl"
        try:
            wait_for(lambda: child.poll() is not None or len(read_metrics(metrics)) >= 2, 300, "two steps")
            assert child.poll() is None, child.communicate()[1][-3000:]
            before = read_metrics(metrics)
            assert cluster.kill_node(2) > 0
            out, err = child.communicate(timeout=300)
        finally:
            if child.poll() is None:
                child.kill()
        assert child.returncode == 0, err[-3000:]
        assert out.split()[-2:] == ["completed", "8"], out
        rows = read_metrics(metrics)
        assert [r["step"] for r in rows] == list(range(8))
        assert rows[: len(before)] == before  # nothing trained before the kill is redone or lost
        assert sum(int(r["replicas/lost"]) for r in rows) == 1  # type: ignore[call-overload]
        assert rows[-1]["replicas/alive"] == 1
        assert all(r["groups/finished"] == 4 and r["groups/failed"] == 0 for r in rows)
        log = (Path(config.log_dir) / "train.log").read_text()
        assert "2 sampler replicas: Ray actor on node" in log
        last = json.loads((Path(config.log_dir) / "checkpoints.jsonl").read_text().splitlines()[-1])
        assert last["step"] == 8 and os.path.isdir(last["state_path"])
