"""Time to reward: training wall-clock until held-out reward reaches a target, envsuite vs TRL's GRPOTrainer.

    .venv/bin/pip install -e '.[bench]'          # trl, datasets (only the bench scripts use them)
    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/time_to_reward.py [--tasks easy,two_digit]
        [--trainers envsuite,trl] [--lrs 1e-4,3e-4,1e-3] [--steps 40] [--eval-every 4]
        [--eval-problems 64] [--seed 0] [--unembed-lora] [--out runs/time_to_reward]
    .venv/bin/python -P bench/time_to_reward.py --across runs/ttr_s0,runs/ttr_s1,runs/ttr_s2 --out runs/ttr_seeds

For each task, each trainer trains once per learning rate of the sweep (same budget of ``--steps``
GRPO steps), saving its LoRA adapter every ``--eval-every`` steps together with the training
wall-clock so far. Afterwards one shared evaluator scores every saved adapter (and the base model) on
the same held-out problems, so both trainers are judged by the same measure. A run's time to reward is
the training clock of its first adapter whose held-out reward reaches the task's target; each
trainer's result is its best learning rate. Goal (issue 18): envsuite <= 1/3 of TRL's time.

Shared settings: SmolLM2-135M-Instruct in fp32 on CPU, 8 problems x 4 rollouts per step, <= 16 new
tokens at temperature 1, LoRA rank 16 (alpha 32) on ``q/k/v/o/gate/up/down_proj`` (``--unembed-lora``:
envsuite also adapts ``lm_head``, Tinker's default, which TRL refuses), Adam (betas 0.9/0.95, constant
rate, no clipping, no weight decay), no KL term, reward - group mean as advantage. Both see the same prompts in the same order (TRL's dataset
is envsuite's train batches as text) and the same reward (TRL's reward function replays each
completion's token ids through the env), as in ``bench/grpo_vs_trl.py``.

Clocks: envsuite, the sum of its per-step phase times (rollout, assemble, train, new sampling weights;
its metrics.jsonl); TRL, the time from each step's begin to its end (callbacks). Checkpoint saves are
outside both clocks; model loading and imports are outside both. Held-out reward: greedy replies on
``--eval-problems`` test-split problems, mean env reward (1 correct, 0 wrong, -0.1 unless a bare number).

``--across`` reads the ``summary.json`` of finished sweeps (one per seed, say) instead of running
anything: each trainer's median time to target over them (a run that never got there counts as
infinitely slow), the ratio of the medians, and all the sweeps' curves in one picture.

Every run and every evaluation is a child process; their JSON lands in ``--out``, and a rerun skips
what is already there (a sweep killed half-way resumes). The parent shows a progress bar and writes
``summary.json`` and ``time_to_reward.png`` (held-out reward against training seconds, every run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# The TRL side uses grpo_vs_trl's GRPOConfig and LoRA settings: one definition of "TRL at the settings
# that match envsuite's trainer" for both benchmarks.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_vs_trl import LORA_ALPHA, LORA_TARGETS, draw_problems, make_reward_func, metric_number, trl_config
from grpo_vs_trl import Shape as StepShape

MODEL = "smollm2-135m-instruct"


@dataclass(frozen=True)
class Task:
    name: str
    env_id: str
    env_kwargs: dict[str, Any]
    target: float


TASKS = {
    "easy": Task("easy", "arithmetic_easy", {}, 0.8),
    "two_digit": Task(
        "two_digit",
        "arithmetic",
        {"digits": 2, "operations": ["+"], "n_terms": 2, "answer_format": "number"},
        0.6,
    ),
}


@dataclass(frozen=True)
class Shape:
    """What every run shares."""

    steps: int = 40
    eval_every: int = 4
    batch_size: int = 8
    group_size: int = 4
    max_tokens: int = 16
    lora_rank: int = 16
    seed: int = 0
    eval_problems: int = 64
    train_unembed: bool = False
    """envsuite only: LoRA on ``lm_head`` too (TRL's peft cannot wrap it)."""


@dataclass
class Checkpoint:
    step: int
    train_s: float
    """Training wall-clock up to and including this step."""
    path: str
    held_out: float | None = None


@dataclass
class RunResult:
    trainer: str
    task: str
    lr: float
    checkpoints: list[Checkpoint]
    step_s: list[float]
    train_reward: list[float]
    load_before: list[float]
    load_after: list[float] = field(default_factory=list)

    def time_to(self, target: float) -> float | None:
        for checkpoint in self.checkpoints:
            if checkpoint.held_out is not None and checkpoint.held_out >= target:
                return checkpoint.train_s
        return None


def run_name(trainer: str, task: str, lr: float) -> str:
    return f"{trainer}-{task}-lr{lr:g}"


# ---------------------------------------------------------------------------------------------- envsuite


ENVSUITE_MODES: dict[str, dict[str, Any]] = {
    "envsuite": {},
    "envsuite-async": {"async_max_steps_off_policy": 1},
    "envsuite-stream": {"stream_minibatches": 4},
}
"""envsuite's trainers in this bench: synchronous (the default), async off-policy with at most one step of
staleness, and streaming minibatches (issue 37); everything else is the same config."""


def train_envsuite(task: Task, lr: float, shape: Shape, out: Path, trainer: str = "envsuite") -> RunResult:
    import shutil

    from envsuite.trainers import TrainConfig, read_metrics, run_training

    log_dir = out / run_name(trainer, task.name, lr)
    shutil.rmtree(log_dir, ignore_errors=True)
    load = list(os.getloadavg())
    config = TrainConfig(
        env_id=task.env_id,
        log_dir=str(log_dir),
        env_kwargs=task.env_kwargs,
        model=MODEL,
        n_steps=shape.steps,
        batch_size=shape.batch_size,
        group_size=shape.group_size,
        learning_rate=lr,
        lora_rank=shape.lora_rank,
        train_unembed=shape.train_unembed,
        max_tokens=shape.max_tokens,
        save_every=shape.eval_every,
        eval_every=0,
        n_test_groups=0,
        n_transcripts=0,
        seed=shape.seed,
        beta1=0.9,
        beta2=0.95,
        **ENVSUITE_MODES[trainer],
    )
    result = run_training(config, show_progress=False)
    rows = read_metrics(log_dir / "metrics.jsonl")
    step_s = [sum((metric_number(v) for k, v in row.items() if k.startswith("time/")), 0.0) for row in rows]
    clock = [sum(step_s[: i + 1]) for i in range(len(step_s))]
    saved = [json.loads(line) for line in (log_dir / "checkpoints.jsonl").read_text().splitlines() if line]
    checkpoints = [
        Checkpoint(int(c["step"]), clock[int(c["step"]) - 1], str(c["sampler_path"])) for c in saved
    ]
    del result
    return RunResult(
        trainer,
        task.name,
        lr,
        checkpoints,
        step_s,
        [metric_number(row["reward/mean"]) for row in rows],
        load,
    )


# ---------------------------------------------------------------------------------------------- TRL


def train_trl(task: Task, lr: float, shape: Shape, out: Path) -> RunResult:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from envsuite.models import resolve_model

    run_dir = out / run_name("trl", task.name, lr)
    problems = asyncio.run(draw_problems(shape, task.env_id, task.env_kwargs))
    path = resolve_model(MODEL).path
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path)
    dataset = Dataset.from_dict({"prompt": [p.text for p in problems], "problem": list(range(len(problems)))})
    lora = LoraConfig(
        r=shape.lora_rank, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules=LORA_TARGETS,
        bias="none", task_type="CAUSAL_LM",
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=make_reward_func(problems),
        args=trl_config(
            StepShape(
                steps=shape.steps,
                batch_size=shape.batch_size,
                group_size=shape.group_size,
                max_tokens=shape.max_tokens,
                learning_rate=lr,
                lora_rank=shape.lora_rank,
                seed=shape.seed,
            ),
            run_dir,
        ),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora,
    )
    clock = _TrlClock(run_dir, shape.eval_every)
    trainer.add_callback(clock.callback(TrainerCallback))
    load = list(os.getloadavg())
    trainer.train()
    return RunResult("trl", task.name, lr, clock.checkpoints, clock.step_s, clock.reward, load)


class _TrlClock:
    """Times TRL's steps (begin to end) and saves the adapter every ``every`` steps, off the clock."""

    def __init__(self, run_dir: Path, every: int) -> None:
        self.run_dir, self.every = run_dir, every
        self.step_s: list[float] = []
        self.reward: list[float] = []
        self.checkpoints: list[Checkpoint] = []
        self._began = 0.0

    def callback(self, base: type) -> Any:
        clock = self

        class Clock(base):  # transformers' TrainerCallback, imported only in the TRL child
            def on_step_begin(self, *args: object, **kwargs: object) -> None:
                clock._began = time.perf_counter()

            def on_step_end(self, args: object, state: Any, control: object, **kwargs: Any) -> None:
                clock.step_s.append(time.perf_counter() - clock._began)
                step = int(state.global_step)
                if step % clock.every == 0 or step == state.max_steps:
                    path = clock.run_dir / f"adapter-step{step:04d}"
                    kwargs["model"].save_pretrained(str(path))
                    clock.checkpoints.append(Checkpoint(step, sum(clock.step_s), str(path)))

            def on_log(
                self, args: object, state: object, control: object, logs: Any = None, **_: object
            ) -> None:
                if logs and "reward" in logs:
                    clock.reward.append(float(logs["reward"]))

        return Clock()


# ---------------------------------------------------------------------------------------------- evaluation


def _sampling_model(trainer: str, path: str | None) -> Any:
    """The weights at a checkpoint (None: the base model), merged, ready for the local sampler."""
    from envsuite.backends.local import load_sampling_model

    if path is None:
        return load_sampling_model(base_model=MODEL).model
    if trainer.startswith("envsuite"):
        return load_sampling_model(model_path=path).model
    from peft import PeftModel

    base = load_sampling_model(base_model=MODEL).model
    merged = PeftModel.from_pretrained(base, path).merge_and_unload()
    merged.requires_grad_(False)
    return merged


def held_out_reward(trainer: str, path: str | None, task: Task, shape: Shape) -> float:
    """Mean env reward of greedy replies on the task's held-out (test split) problems."""
    from envsuite import RendererConfig, episode_seed, make_env
    from envsuite.backends.local import EngineConfig, LocalSamplingClient
    from envsuite.completers import SamplingTokenCompleter
    from envsuite.models import get_tokenizer
    from envsuite.rollouts import do_single_rollout

    client = LocalSamplingClient(
        _sampling_model(trainer, path), get_tokenizer(MODEL), MODEL, config=EngineConfig(prefix_cache_bytes=0)
    )
    policy = SamplingTokenCompleter(client, max_tokens=shape.max_tokens, temperature=0.0)
    renderer = RendererConfig(model_name=MODEL)

    async def one(index: int) -> float:
        seed = episode_seed(shape.seed, f"held-out/{task.name}", index)
        env = make_env(task.env_id, seed=seed, split="test", renderer=renderer, **task.env_kwargs)
        trajectory = await do_single_rollout(policy, env)
        return sum(t.reward for t in trajectory.transitions)

    async def all_rewards() -> list[float]:
        return list(await asyncio.gather(*(one(i) for i in range(shape.eval_problems))))

    rewards = asyncio.run(all_rewards())
    client.close()
    return sum(rewards) / len(rewards)


# ---------------------------------------------------------------------------------------------- jobs


@dataclass(frozen=True)
class Job:
    """One child process: a training run, or the evaluation of one run's checkpoints (or the base)."""

    kind: str  # "train" | "eval" | "base"
    trainer: str
    task: str
    lr: float

    @property
    def name(self) -> str:
        if self.kind == "base":
            return f"base-{self.task}"
        return f"{self.kind}-{run_name(self.trainer, self.task, self.lr)}"

    def result_path(self, out: Path) -> Path:
        return out / f"{self.name}.json"


def run_job(job: Job, shape: Shape, out: Path) -> None:
    task = TASKS[job.task]
    if job.kind == "base":
        value = {"held_out": held_out_reward("envsuite", None, task, shape)}
    elif job.kind == "train":
        if job.trainer in ENVSUITE_MODES:
            result = train_envsuite(task, job.lr, shape, out, job.trainer)
        else:
            result = train_trl(task, job.lr, shape, out)
        result.load_after = list(os.getloadavg())
        value = asdict(result)
    else:
        trained = _load_run(Job("train", job.trainer, job.task, job.lr).result_path(out))
        for checkpoint in trained.checkpoints:
            checkpoint.held_out = held_out_reward(job.trainer, checkpoint.path, task, shape)
        value = asdict(trained)
    job.result_path(out).write_text(json.dumps(value, indent=1) + "\n")


def _load_run(path: Path) -> RunResult:
    data = json.loads(path.read_text())
    data["checkpoints"] = [Checkpoint(**c) for c in data["checkpoints"]]
    return RunResult(**data)


def plan(args: argparse.Namespace) -> list[Job]:
    lrs = [float(x) for x in args.lrs.split(",")]
    jobs = [Job("base", "envsuite", task, 0.0) for task in args.tasks.split(",")]
    for task in args.tasks.split(","):
        for trainer in args.trainers.split(","):
            for lr in lrs:
                jobs += [Job("train", trainer, task, lr), Job("eval", trainer, task, lr)]
    return jobs


def run_child(job: Job, args: argparse.Namespace, out: Path) -> None:
    command = [sys.executable, "-P", __file__, "--job", json.dumps(asdict(job)), "--out", str(out)]
    command += ["--steps", str(args.steps), "--eval-every", str(args.eval_every)]
    command += ["--eval-problems", str(args.eval_problems), "--lora-rank", str(args.lora_rank)]
    command += ["--seed", str(args.seed)] + (["--unembed-lora"] if args.unembed_lora else [])
    log = out / f"{job.name}.log"
    with log.open("w") as handle:
        code = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, check=False).returncode
    if code != 0:
        raise RuntimeError(f"{job.name} failed (exit {code}); see {log}")


# ---------------------------------------------------------------------------------------------- report


def summarize(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    summary: dict[str, Any] = {"load_now": list(os.getloadavg()), "tasks": {}}
    for task_name in args.tasks.split(","):
        task = TASKS[task_name]
        base = json.loads(Job("base", "envsuite", task_name, 0.0).result_path(out).read_text())["held_out"]
        per_trainer: dict[str, Any] = {}
        for trainer in args.trainers.split(","):
            runs: list[dict[str, Any]] = []
            for lr in (float(x) for x in args.lrs.split(",")):
                run = _load_run(Job("eval", trainer, task_name, lr).result_path(out))
                reached = 0.0 if base >= task.target else run.time_to(task.target)
                runs.append({"lr": lr, "time_to_target_s": reached, "run": asdict(run)})
            timed = [r for r in runs if r["time_to_target_s"] is not None]
            best = min(timed, key=lambda r: float(r["time_to_target_s"])) if timed else None
            per_trainer[trainer] = {"runs": runs, "best": best}
        ratios = {
            trainer: _ratio(per_trainer[trainer]["best"], per_trainer["trl"]["best"])
            for trainer in per_trainer
            if trainer in ENVSUITE_MODES and "trl" in per_trainer
        }
        summary["tasks"][task_name] = {
            "target": task.target, "base_held_out": base, "trainers": per_trainer,
            "envsuite_over_trl": ratios.get("envsuite"), "over_trl": ratios,
        }  # fmt: skip
    return summary


def _ratio(ours: dict[str, Any] | None, trl: dict[str, Any] | None) -> float | None:
    """Our time to target over TRL's: inf when only TRL got there, None when TRL did not (no ratio)."""
    import math

    if trl is None or not trl["time_to_target_s"]:
        return None
    if ours is None:
        return math.inf
    return float(ours["time_to_target_s"]) / float(trl["time_to_target_s"])


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = summary["tasks"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.5 * len(tasks), 4.5), squeeze=False)
    colors = {
        "envsuite": "tab:blue",
        "trl": "tab:orange",
        "envsuite-async": "tab:green",
        "envsuite-stream": "tab:purple",
    }
    for ax, (name, task) in zip(axes[0], tasks.items(), strict=True):
        for trainer, info in task["trainers"].items():
            for run in info["runs"]:
                points = [(0.0, task["base_held_out"])] + [
                    (c["train_s"], c["held_out"])
                    for c in run["run"]["checkpoints"]
                    if c["held_out"] is not None
                ]
                best = info["best"] is not None and info["best"]["lr"] == run["lr"]
                ax.plot(
                    [p[0] for p in points], [p[1] for p in points], "o-" if best else ".--",
                    color=colors.get(trainer), alpha=1.0 if best else 0.45, linewidth=2 if best else 1,
                    label=f"{trainer} lr {run['lr']:g}" + (" (best)" if best else ""),
                )  # fmt: skip
        ax.axhline(task["target"], color="k", linestyle=":", label=f"target {task['target']}")
        ratio = task["envsuite_over_trl"]
        ax.set_title(f"{name}: envsuite / TRL time to target = {ratio:.2f}" if ratio else name, fontsize=10)
        ax.set_xlabel("training wall-clock (s)")
        ax.set_ylabel("held-out reward (greedy)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(
        f"SmolLM2-135M GRPO, 2-core CPU; load average at the end {summary['load_now'][0]:.1f}", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def across(outs: list[Path], out: Path) -> dict[str, Any]:
    """Medians of each trainer's time to target over finished sweeps, and one figure of all of them."""
    import math
    import statistics

    summaries = {path.name: json.loads((path / "summary.json").read_text()) for path in outs}
    report: dict[str, Any] = {"sweeps": [str(p) for p in outs], "tasks": {}}
    for task_name in next(iter(summaries.values()))["tasks"]:
        times: dict[str, list[float]] = {}
        for summary in summaries.values():
            for trainer, info in summary["tasks"][task_name]["trainers"].items():
                best = info["best"]
                times.setdefault(trainer, []).append(math.inf if best is None else best["time_to_target_s"])
        medians = {trainer: statistics.median(values) for trainer, values in times.items()}
        ratio = None
        if {"envsuite", "trl"} <= medians.keys() and math.isfinite(medians["trl"]):
            ratio = medians["envsuite"] / medians["trl"]
        # Issue 37: the median of the per-seed ratios (a seed where TRL never got there has no ratio).
        per_seed: dict[str, list[float]] = {}
        for summary in summaries.values():
            for trainer, value in summary["tasks"][task_name].get("over_trl", {}).items():
                if value is not None:
                    per_seed.setdefault(trainer, []).append(value)
        report["tasks"][task_name] = {
            "times_s": times, "median_s": medians, "envsuite_over_trl": ratio,
            "per_seed_ratios": per_seed,
            "median_of_ratios": {t: statistics.median(v) for t, v in per_seed.items() if v},
        }  # fmt: skip
    merged = {
        "load_now": list(os.getloadavg()),
        "tasks": {
            f"{name} {task}": info for name, s in summaries.items() for task, info in s["tasks"].items()
        },
    }
    plot(merged, out / "time_to_reward_across.png")
    (out / "across.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


# ---------------------------------------------------------------------------------------------- driver


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", default="easy,two_digit", help=f"comma-separated, of {sorted(TASKS)}")
    parser.add_argument("--trainers", default="envsuite,trl")
    parser.add_argument("--lrs", default="1e-4,3e-4,1e-3", help="learning rates swept for each trainer")
    parser.add_argument("--steps", type=int, default=Shape.steps, help="GRPO steps per run (the budget)")
    parser.add_argument(
        "--eval-every", type=int, default=Shape.eval_every, help="steps between saved adapters"
    )
    parser.add_argument("--eval-problems", type=int, default=Shape.eval_problems)
    parser.add_argument("--lora-rank", type=int, default=Shape.lora_rank)
    parser.add_argument("--seed", type=int, default=Shape.seed)
    parser.add_argument(
        "--unembed-lora", action="store_true", help="envsuite's LoRA adapts lm_head too (TRL's cannot)"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/time_to_reward"))
    parser.add_argument("--across", help="comma-separated --out folders of finished sweeps: report only")
    parser.add_argument("--job", help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    shape = Shape(
        args.steps,
        args.eval_every,
        lora_rank=args.lora_rank,
        seed=args.seed,
        eval_problems=args.eval_problems,
        train_unembed=args.unembed_lora,
    )
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.job:
        run_job(Job(**json.loads(args.job)), shape, out)
        return
    if args.across:
        report = across([Path(p) for p in args.across.split(",")], out)
        for name, task in report["tasks"].items():
            times = {k: [f"{t:.0f}" for t in v] for k, v in task["times_s"].items()}
            print(f"{name}: times to target (s) {times}; medians {task['median_s']}")
            if task["envsuite_over_trl"] is not None:
                print(f"  envsuite / TRL (medians) = {task['envsuite_over_trl']:.2f} (goal <= 0.33)")
            for trainer, ratios in task["per_seed_ratios"].items():
                median = task["median_of_ratios"][trainer]
                print(
                    f"  {trainer} / TRL per seed {[round(r, 2) for r in ratios]}: median {median:.2f} (goal <= 0.2)"
                )
        print(f"wrote {out / 'across.json'} and {out / 'time_to_reward_across.png'}")
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    jobs = plan(args)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns) as progress:
        bar = progress.add_task("sweep", total=len(jobs))
        for job in jobs:
            progress.update(bar, description=f"{job.name} (load {os.getloadavg()[0]:.1f})")
            if not job.result_path(out).exists():
                run_child(job, args, out)
            progress.advance(bar)
    summary = summarize(args, out)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    plot(summary, out / "time_to_reward.png")
    for name, task in summary["tasks"].items():
        print(f"{name} (target {task['target']}, base model {task['base_held_out']:.3f}):")
        for trainer, info in task["trainers"].items():
            best = info["best"]
            text = f"{best['time_to_target_s']:.0f} s at lr {best['lr']:g}" if best else "not reached"
            print(f"  {trainer:9s} {text}")
        for trainer, ratio in task["over_trl"].items():
            if ratio is not None:
                print(f"  {trainer} / TRL = {ratio:.2f} (goal <= 0.2)")
    print(f"wrote {out / 'summary.json'} and {out / 'time_to_reward.png'}")


if __name__ == "__main__":
    main()
