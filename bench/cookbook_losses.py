"""tinker-cookbook 0.6.1's ``rl.train`` on envsuite's local compute: ``stable_reinforce`` against
``importance_sampling``, on-policy and off-policy.

    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/cookbook_losses.py [--losses stable_reinforce,importance_sampling]
        [--off-policy 0,2] [--repeats 3] [--steps 40] [--lr 3e-4] [--eval-every 5] [--out runs/cookbook_losses]

Every run is cookbook's own ``rl.train.main``, unchanged, after ``envsuite.backends.local.install()``:
its sampler (``record_stability_info`` when the loss is ``stable_reinforce``), its datum assembly (with
provenance), its ``forward_backward`` + ``optim_step`` pipelining, its checkpoints and its test-set
evaluator. ``--off-policy N`` > 0 runs cookbook's async mode, ``AsyncConfig(max_steps_off_policy=N)``:
rollouts keep sampling while the trainer trains, from weights up to N steps old. ``stable_reinforce``
is the loss cookbook 0.6.1's math_rl recipe, ``rl_loop`` and ``AsyncConfig`` default to.

The task is envsuite's ``arithmetic`` env with two-digit addition and a bare-number answer (the
``two_digit`` task of ``bench/time_to_reward.py``: base reward about 0.03), through envsuite's dataset
builder, which cookbook's ``rl.train`` takes as its own: SmolLM2-135M-Instruct in fp32 on CPU, LoRA rank
16, 8 problems x 4 rollouts per step, <= 16 new tokens at temperature 1, Adam at a constant rate.
Held-out reward: cookbook's ``RLTestSetEvaluator`` on ``--test-problems`` test problems (one sample
each, temperature 1) every ``--eval-every`` steps and after the last. cookbook draws its LoRA init and sampling seeds itself,
so ``--repeats`` runs each setting several times.

Every run is a child process writing cookbook's own log dir under ``--out``; a rerun skips finished runs.
The parent writes ``summary.json`` and ``cookbook_losses.png`` (held-out reward against step, one panel
per off-policy setting).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python -P` leaves bench/ off the path
from _host import cpu_name

MODEL = "smollm2-135m-instruct"
ENV_ID = "arithmetic"
ENV_KWARGS: dict[str, Any] = {"digits": 2, "operations": ["+"], "n_terms": 2, "answer_format": "number"}


@dataclass(frozen=True)
class Run:
    loss: str
    off_policy: int
    repeat: int

    @property
    def name(self) -> str:
        return f"{self.loss}-off{self.off_policy}-r{self.repeat}"


def run_child(run: Run, args: argparse.Namespace) -> None:
    """One cookbook ``rl.train.main`` run on the local backend (in this process)."""
    from tinker.types import LossFnType
    from tinker_cookbook.rl.train import AsyncConfig, Config, main

    import envsuite
    from envsuite.backends import local
    from envsuite.models import resolve_model

    out = Path(args.out) / run.name
    local.install(out / "runs")
    model_dir = str(resolve_model(MODEL).path)
    builder = envsuite.make_dataset_builder(
        ENV_ID,
        batch_size=args.batch_size,
        group_size=args.group_size,
        seed=args.data_seed,
        n_batches=args.steps,
        n_test_groups=args.test_problems,
        model=MODEL,
        **ENV_KWARGS,
    )
    loss = cast(LossFnType, run.loss)
    async_config = (
        AsyncConfig(max_steps_off_policy=run.off_policy, groups_per_batch=args.batch_size, loss_fn=loss)
        if run.off_policy > 0
        else None
    )
    config = Config(
        learning_rate=args.lr,
        dataset_builder=builder,  # type: ignore[arg-type]  # envsuite's builder has cookbook's call
        model_name=model_dir,
        recipe_name="envsuite_bench_cookbook_losses",
        max_tokens=16,
        log_path=str(out / "log"),
        eval_every=args.eval_every,
        save_every=0,
        lora_rank=16,
        loss_fn=loss if async_config is None else "importance_sampling",  # async: AsyncConfig's
        async_config=async_config,
        max_steps=args.steps,
        num_groups_to_log=0,
        rollout_json_export=False,
    )
    start = time.monotonic()
    asyncio.run(main(config))
    (out / "done.json").write_text(json.dumps({"wall_s": time.monotonic() - start, **asdict(run)}) + "\n")


def read_run(out: Path, run: Run) -> dict[str, Any]:
    """A finished run's curves from cookbook's metrics.jsonl."""
    rows = [json.loads(line) for line in (out / run.name / "log" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "env/all/reward/total" in r]  # async rows have no progress/batch
    evals = [r for r in rows if "test/env/all/reward/total" in r]
    done = json.loads((out / run.name / "done.json").read_text())
    return {
        **asdict(run),
        "wall_s": done["wall_s"],
        "train_reward": [r.get("env/all/reward/total") for r in steps],
        "kl_sample_train": [r.get("optim/kl_sample_train_v1") for r in steps],
        "staleness": [r.get("async/staleness_mean", 0.0) for r in steps],
        "eval_steps": [r["step"] for r in evals],
        "eval_reward": [r["test/env/all/reward/total"] for r in evals],
    }


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (loss, off-policy): each repeat's held-out reward at the end (mean of the last three
    evaluations, which halves the noise of 32 one-sample problems), at its best and at the last
    evaluation, the largest sampler-to-learner KL of its steps; and the mean over repeats of the first."""
    table: dict[str, Any] = {}
    for result in results:
        key = f"{result['loss']} off-policy {result['off_policy']}"
        entry = table.setdefault(
            key, {"last3": [], "best": [], "final": [], "max_kl_sample_train": [], "wall_s": []}
        )
        rewards = result["eval_reward"]
        entry["last3"].append(round(sum(rewards[-3:]) / len(rewards[-3:]), 3) if rewards else None)
        entry["best"].append(round(max(rewards), 3) if rewards else None)
        entry["final"].append(round(rewards[-1], 3) if rewards else None)
        kl = [x for x in result["kl_sample_train"] if x is not None]
        entry["max_kl_sample_train"].append(round(max(kl), 4) if kl else None)
        entry["wall_s"].append(round(result["wall_s"], 1))
    for entry in table.values():
        ends = [x for x in entry["last3"] if x is not None]
        entry["mean_last3"] = round(sum(ends) / len(ends), 3) if ends else None
    return table


def plot(results: list[dict[str, Any]], path: Path, cpu: str, args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = sorted({r["off_policy"] for r in results})
    fig, axes = plt.subplots(1, len(settings), figsize=(6 * len(settings), 4.2), sharey=True, squeeze=False)
    colors = {"stable_reinforce": "tab:blue", "importance_sampling": "tab:red"}
    for ax, off in zip(axes[0], settings, strict=True):
        for loss in sorted({r["loss"] for r in results}):
            runs = [r for r in results if r["off_policy"] == off and r["loss"] == loss]
            color = colors.get(loss, "gray")
            for run in runs:
                ax.plot(run["eval_steps"], run["eval_reward"], color=color, alpha=0.3, linewidth=1)
            steps = runs[0]["eval_steps"] if runs else []
            if runs and all(r["eval_steps"] == steps for r in runs):
                mean = [sum(r["eval_reward"][i] for r in runs) / len(runs) for i in range(len(steps))]
                ax.plot(
                    steps, mean, color=color, marker="o", linewidth=2.2, label=f"{loss} (mean of {len(runs)})"
                )
        mode = "on-policy (sync)" if off == 0 else f"off-policy: AsyncConfig(max_steps_off_policy={off})"
        ax.set_title(mode)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"held-out reward ({args.test_problems} problems)")
    axes[0][0].legend(loc="best")
    fig.suptitle(
        f"tinker-cookbook 0.6.1 rl.train on envsuite's local backend: two-digit addition, SmolLM2-135M, "
        f"LoRA r16, lr {args.lr:g}\n{cpu}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--losses", default="stable_reinforce,importance_sampling")
    parser.add_argument("--off-policy", default="0,2", help="max_steps_off_policy values (0: sync)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--test-problems", type=int, default=64)
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--out", default="runs/cookbook_losses")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        loss, off, repeat = args.child.split(",")
        run_child(Run(loss, int(off), int(repeat)), args)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = [
        Run(loss, int(off), repeat)
        for repeat in range(args.repeats)
        for off in args.off_policy.split(",")
        for loss in args.losses.split(",")
    ]
    passthrough = [
        f"--{k.replace('_', '-')}={v}"
        for k, v in vars(args).items()
        if k not in ("child", "losses", "off_policy")
    ]
    for index, run in enumerate(runs):
        if (out / run.name / "done.json").is_file():
            continue
        print(f"[{index + 1}/{len(runs)}] {run.name}", flush=True)
        log = (out / f"{run.name}.log").open("w")
        child = [sys.executable, "-P", __file__, f"--child={run.loss},{run.off_policy},{run.repeat}"]
        subprocess.run([*child, *passthrough], stdout=log, stderr=subprocess.STDOUT, check=True)
    results = [read_run(out, run) for run in runs]
    summary: dict[str, Any] = {
        "settings": {k: v for k, v in vars(args).items() if k != "child"},
        "table": summarize(results),
        "runs": results,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot(results, out / "cookbook_losses.png", cpu_name(), args)
    print(json.dumps(summary["table"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
