"""GRPO step time and reward: envsuite's trainer against TRL's ``GRPOTrainer``, same model, task and shape.

    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/grpo_vs_trl.py [--steps 8] [--lora-rank 32] [--out runs/grpo_vs_trl]

Needs TRL (``pip install -e '.[bench]'``); nothing else in the project imports it.

Both sides: SmolLM2-135M-Instruct in fp32 on CPU, the ``arithmetic`` env with two-digit addition and
"Reply with the number only", 8 problems × 4 rollouts per step, at most 16 new tokens at temperature 1
(no top-k/top-p), Adam at lr 1e-5 (betas 0.9/0.95, no weight decay, no gradient clipping, constant
rate), no KL term, advantages = reward − group mean (no std scaling), one optimizer step per batch.
``TrainConfig`` trains LoRA adapters only, so TRL gets the same LoRA through peft: the same rank,
alpha 32, no dropout, on ``q/k/v/o/gate/up/down_proj`` (envsuite also adapts ``lm_head``, which TRL
refuses). TRL's gradient checkpointing (on by default in its configs) is turned off: it only trades
time for memory, and this model fits many times over.

Same prompts and the same reward: the TRL dataset is built from the very env batches envsuite's trainer
draws (``make_dataset_builder`` with the trainer's seed; step ``i`` = batch ``i``), each prompt given as
the exact text of envsuite's rendered prompt tokens (checked to re-tokenize to the same ids), in order
(``shuffle_dataset=False``). TRL's reward function replays each completion's token ids through a fresh
env of its problem, so both sides score with the env's own grading: correct (1 or 0) minus 0.1 unless
the reply is a bare number, and −0.1 for a reply cut off at 16 tokens. TRL's loss is ``dr_grpo`` (token
sum over a constant), envsuite's ``importance_sampling`` (token sum): with one pass per batch both
gradients point the same way up to a constant factor, which Adam ignores. One difference stays: envsuite
drops groups whose four rewards are all equal (no signal) before training, TRL runs forward/backward on
all 32 rollouts, so the table also scales envsuite's training phase to all 32 ("all rows").

Phases. envsuite (its ``metrics.jsonl``): ``rollout`` (sampling + grading), ``assemble``, ``train``
(forward/backward + Adam), ``save`` (new sampling weights). TRL (timers around its methods):
``generate``, ``reward``, ``score_other`` (the rest of its scoring), ``fwd_bwd`` (loss forward and
backward), ``optim_other`` (the rest of the step: Adam, logging, callbacks).

Each side runs in its own child process, one after the other, so they do not share the 2 cores. The
parent prints a table: median seconds per step (step 0, the warm-up, excluded), where the time goes,
and the mean reward over the last half of the steps. ``--side`` runs one side in the current process
(the parent uses it for its children).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ENV_ID = "arithmetic"
ENV_KWARGS: dict[str, Any] = {"digits": 2, "operations": ["+"], "n_terms": 2, "answer_format": "number"}
MODEL = "smollm2-135m-instruct"
LORA_ALPHA = 32
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
"""TRL refuses an ``lm_head`` adapter (it computes logprobs from ``lm_head.weight`` directly), so its LoRA
lacks the unembedding adapter envsuite's LoRA has (at rank 32 about 1.2% of the base model's FLOPs
per token)."""


@dataclass(frozen=True)
class Shape:
    """The settings both sides share."""

    steps: int = 8
    batch_size: int = 8
    group_size: int = 4
    max_tokens: int = 16
    learning_rate: float = 1e-5
    lora_rank: int = 32
    seed: int = 0
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8

    @property
    def rollouts(self) -> int:
        """Sequences sampled per step."""
        return self.batch_size * self.group_size


@dataclass
class SideResult:
    """One side's measurements, per step (step 0 included; the summary drops it)."""

    name: str
    step_s: list[float]
    phases_s: dict[str, list[float]]
    reward: list[float]
    run_s: float
    """Wall time of the whole run, model load and setup included."""
    load_avg: list[float] = field(default_factory=list)
    """1-minute load average before and after the run."""
    versions: dict[str, str] = field(default_factory=dict)
    threads: int = 0
    """torch's intra-op threads in the child."""
    rows_trained: list[int] = field(default_factory=list)
    """Sequences through forward/backward per step (envsuite drops groups whose rewards are all equal)."""
    train_phase: str = "train"


@dataclass(frozen=True)
class Summary:
    name: str
    median_step_s: float
    median_phase_s: dict[str, float]
    first_reward: float
    last_reward: float
    """Mean reward over the last half of the steps."""
    train_s_per_row: float
    """Median seconds of the training phase per trained sequence (steps that trained)."""
    full_batch_step_s: float
    """Median step time had every rollout been trained (the training phase scaled to the full batch)."""


def summarize(result: SideResult, full_rows: int) -> Summary:
    timed = slice(1, None) if len(result.step_s) > 1 else slice(None)
    tail = result.reward[len(result.reward) // 2 :]
    train = result.phases_s[result.train_phase]
    per_row = statistics.median(
        [t / n for t, n in zip(train[timed], result.rows_trained[timed], strict=True) if n > 0] or [0.0]
    )
    full = [s - t + per_row * full_rows for s, t in zip(result.step_s, train, strict=True)]
    return Summary(
        result.name,
        statistics.median(result.step_s[timed]),
        {name: statistics.median(values[timed]) for name, values in result.phases_s.items()},
        result.reward[0],
        statistics.fmean(tail),
        per_row,
        statistics.median(full[timed]),
    )


def _versions(*names: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str] = {}
    for name in names:
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    return found


# ---------------------------------------------------------------------------------------------- envsuite


def run_envsuite(shape: Shape, out: Path) -> SideResult:
    """envsuite's trainer on the local backend; per-phase times come from its ``metrics.jsonl``."""
    import shutil

    from envsuite.trainers import TrainConfig, read_metrics, run_training

    log_dir = out / "envsuite"
    shutil.rmtree(log_dir, ignore_errors=True)  # a leftover run would be resumed, not re-measured
    config = TrainConfig(
        env_id=ENV_ID,
        log_dir=str(log_dir),
        env_kwargs=ENV_KWARGS,
        model=MODEL,
        n_steps=shape.steps,
        batch_size=shape.batch_size,
        group_size=shape.group_size,
        learning_rate=shape.learning_rate,
        lora_rank=shape.lora_rank,
        max_tokens=shape.max_tokens,
        save_every=shape.steps,
        eval_every=0,
        n_test_groups=0,
        n_transcripts=0,
        seed=shape.seed,
        beta1=shape.beta1,
        beta2=shape.beta2,
        eps=shape.eps,
    )
    started = time.perf_counter()
    run_training(config, show_progress=False)
    run_s = time.perf_counter() - started
    rows = read_metrics(log_dir / "metrics.jsonl")
    names = sorted({k.removeprefix("time/") for row in rows for k in row if k.startswith("time/")})
    phases = {name: [metric_number(row.get(f"time/{name}", 0.0)) for row in rows] for name in names}
    step_s = [sum(values[i] for values in phases.values()) for i in range(len(rows))]
    reward = [metric_number(row["reward/mean"]) for row in rows]
    rows_trained = [int(metric_number(row.get("datums", 0))) for row in rows]
    return SideResult("envsuite", step_s, phases, reward, run_s, rows_trained=rows_trained)


def metric_number(value: object) -> float:
    """A metrics.jsonl value (parsed JSON, typed ``object``) as a float."""
    if not isinstance(value, int | float):
        raise TypeError(f"expected a number in metrics.jsonl, got {value!r}")
    return float(value)


# ---------------------------------------------------------------------------------------------- TRL


@dataclass(frozen=True)
class Problem:
    """One group's prompt as text and token ids, and the env builder that grades its replies."""

    text: str
    prompt_ids: list[int]
    builder: Any


async def draw_problems(
    shape: Shape | Any, env_id: str = ENV_ID, env_kwargs: dict[str, Any] | None = None
) -> list[Problem]:
    """The problems of envsuite's train batches ``0 .. steps-1``, in the order the trainer uses them.

    ``shape`` needs ``batch_size``, ``group_size``, ``seed`` and ``steps`` (this script's ``Shape`` or
    ``bench/time_to_reward.py``'s); ``env_kwargs`` defaults to this script's :data:`ENV_KWARGS`.
    """
    from envsuite import InitialObservationOverflow, make_dataset_builder
    from envsuite.models import get_tokenizer

    tokenizer = get_tokenizer(MODEL)
    builder = make_dataset_builder(
        env_id,
        batch_size=shape.batch_size,
        group_size=shape.group_size,
        seed=shape.seed,
        n_batches=shape.steps,
        n_test_groups=0,
        model=MODEL,
        **(ENV_KWARGS if env_kwargs is None else env_kwargs),
    )
    train, _ = await builder()
    problems: list[Problem] = []
    for step in range(shape.steps):
        for group in train.get_batch(step):
            observation = await (await group.make_envs())[0].initial_observation()
            if isinstance(observation, InitialObservationOverflow):
                raise RuntimeError(f"a {env_id} prompt is longer than the context budget")
            ids = observation[0].to_ints()
            text = str(tokenizer.decode(ids))
            if tokenizer(text)["input_ids"] != ids:
                raise RuntimeError("prompt text does not re-tokenize to envsuite's prompt ids")
            problems.append(Problem(text, ids, group))
    return problems


def make_reward_func(problems: list[Problem]) -> Callable[..., list[float | None]]:
    """A TRL reward function that scores each completion with a fresh env of its problem."""

    async def score(index: int, completion_ids: list[int]) -> float:
        env = (await problems[index].builder.make_envs())[0]
        await env.initial_observation()
        result = await env.step([int(t) for t in completion_ids])
        return float(result.reward)

    def env_reward(completion_ids: list[list[int]], problem: list[int], **_: object) -> list[float | None]:
        async def all_scores() -> list[float | None]:
            return [await score(i, ids) for i, ids in zip(problem, completion_ids, strict=True)]

        return asyncio.run(all_scores())

    return env_reward


class PhaseClock:
    """Accumulates seconds per phase name; ``wrap`` times every call of a method."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.current[name] = self.current.get(name, 0.0) + time.perf_counter() - started

    def wrap(self, owner: object, method: str, name: str) -> None:
        inner = getattr(owner, method)

        def timed(*args: object, **kwargs: object) -> object:
            with self.phase(name):
                return inner(*args, **kwargs)

        setattr(owner, method, timed)

    def take(self) -> dict[str, float]:
        taken, self.current = self.current, {}
        return taken


def trl_config(shape: Shape, out: Path) -> Any:
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(out / "trl"),
        per_device_train_batch_size=shape.rollouts,
        gradient_accumulation_steps=1,
        num_generations=shape.group_size,
        max_completion_length=shape.max_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=shape.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        adam_beta1=shape.beta1,
        adam_beta2=shape.beta2,
        adam_epsilon=shape.eps,
        weight_decay=0.0,
        max_grad_norm=0.0,
        beta=0.0,
        num_iterations=1,
        scale_rewards="none",
        loss_type="dr_grpo",
        shuffle_dataset=False,
        max_steps=shape.steps,
        use_cpu=True,
        bf16=False,
        fp16=False,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        seed=shape.seed,
        dataloader_num_workers=0,
        use_vllm=False,
        gradient_checkpointing=False,
    )


def run_trl(shape: Shape, out: Path) -> SideResult:
    """TRL's GRPOTrainer on the same problems; step time from a callback, phases from wrapped methods."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from envsuite.models import resolve_model

    started = time.perf_counter()
    problems = asyncio.run(draw_problems(shape))
    path = resolve_model(MODEL).path
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path)
    dataset = Dataset.from_dict({"prompt": [p.text for p in problems], "problem": list(range(len(problems)))})
    lora = LoraConfig(
        r=shape.lora_rank,
        lora_alpha=LORA_ALPHA,
        lora_dropout=0.0,
        target_modules=LORA_TARGETS,
        bias="none",
        task_type="CAUSAL_LM",
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=make_reward_func(problems),
        args=trl_config(shape, out),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora,
    )
    clock = PhaseClock()
    for method, name in (
        ("_generate", "generate"),
        ("_calculate_rewards", "reward"),
        ("_generate_and_score_completions", "rollout"),
        ("training_step", "training_step"),
    ):
        clock.wrap(trainer, method, name)
    steps = StepRecorder(clock)
    trainer.add_callback(steps.callback(TrainerCallback))
    trainer.train()
    run_s = time.perf_counter() - started
    rows = [shape.rollouts] * len(steps.step_s)  # TRL trains every rollout
    phases = _trl_phases(steps.phases)
    return SideResult(
        "trl", steps.step_s, phases, steps.reward, run_s, rows_trained=rows, train_phase="fwd_bwd"
    )


class StepRecorder:
    """Times each optimizer step and collects the phase clock and the logged reward per step."""

    def __init__(self, clock: PhaseClock) -> None:
        self.clock = clock
        self.step_s: list[float] = []
        self.phases: list[dict[str, float]] = []
        self.reward: list[float] = []
        self._started = 0.0

    def callback(self, base: type) -> Any:
        recorder = self

        class Timing(base):  # the base is transformers' TrainerCallback, imported only on the TRL side
            def on_step_begin(self, *args: object, **kwargs: object) -> None:
                recorder.clock.take()
                recorder._started = time.perf_counter()

            def on_step_end(self, *args: object, **kwargs: object) -> None:
                recorder.step_s.append(time.perf_counter() - recorder._started)
                recorder.phases.append(recorder.clock.take())

            def on_log(
                self, args: object, state: object, control: object, logs: Any = None, **_: object
            ) -> None:
                if logs and "reward" in logs:
                    recorder.reward.append(float(logs["reward"]))

        return Timing()


def _trl_phases(per_step: list[dict[str, float]]) -> dict[str, list[float]]:
    """Disjoint phases from the nested method timers (generate ⊂ rollout ⊂ training_step ⊂ step)."""
    phases: dict[str, list[float]] = {"generate": [], "reward": [], "score_other": [], "fwd_bwd": []}
    for seconds in per_step:
        rollout = seconds.get("rollout", 0.0)
        phases["generate"].append(seconds.get("generate", 0.0))
        phases["reward"].append(seconds.get("reward", 0.0))
        phases["score_other"].append(rollout - seconds.get("generate", 0.0) - seconds.get("reward", 0.0))
        phases["fwd_bwd"].append(seconds.get("training_step", 0.0) - rollout)
    return phases


def _with_rest(result: SideResult, label: str) -> SideResult:
    """Add the step time no phase accounts for (TRL: optimizer step, logging, callbacks)."""
    accounted = [sum(values[i] for values in result.phases_s.values()) for i in range(len(result.step_s))]
    result.phases_s[label] = [total - part for total, part in zip(result.step_s, accounted, strict=True)]
    return result


# ---------------------------------------------------------------------------------------------- driver


def run_side(side: str, shape: Shape, out: Path) -> SideResult:
    load_before = os.getloadavg()[0]
    if side == "envsuite":
        result = run_envsuite(shape, out)
    else:
        result = _with_rest(run_trl(shape, out), "optim_other")
    result.load_avg = [load_before, os.getloadavg()[0]]
    result.versions = _versions("torch", "transformers", "peft", "trl", "datasets", "accelerate")
    import torch

    result.threads = torch.get_num_threads()
    return result


def run_child(side: str, args: argparse.Namespace, out: Path) -> SideResult:
    """Run one side in a child process (a fresh interpreter: no shared threads, caches or allocator)."""
    result_path = out / f"{side}.json"
    result_path.unlink(missing_ok=True)
    command = [sys.executable, "-P", __file__, "--side", side, "--out", str(out)]
    command += ["--steps", str(args.steps), "--lora-rank", str(args.lora_rank), "--seed", str(args.seed)]
    print(f"running {side} ...", flush=True)
    subprocess.run(command, check=True)
    return _load(result_path)


def _load(path: Path) -> SideResult:
    return SideResult(**json.loads(path.read_text(encoding="utf-8")))


def print_table(results: list[SideResult], full_rows: int) -> None:
    summaries = [summarize(r, full_rows) for r in results]
    base, base_full = summaries[0].median_step_s, summaries[0].full_batch_step_s
    print(
        "\nmedians over steps 1.. (step 0 is the warm-up); 'all rows' = training phase scaled to every rollout"
    )
    print(
        f"{'side':<10}{'s/step':>9}{'ratio':>8}{'s/step all rows':>17}{'ratio':>8}"
        f"{'train s/row':>13}{'reward step 0':>15}{'reward last half':>18}"
    )
    for s in summaries:
        print(
            f"{s.name:<10}{s.median_step_s:>9.2f}{s.median_step_s / base:>7.2f}x"
            f"{s.full_batch_step_s:>17.2f}{s.full_batch_step_s / base_full:>7.2f}x{s.train_s_per_row:>13.3f}"
            f"{s.first_reward:>15.3f}{s.last_reward:>18.3f}"
        )
    for s, r in zip(summaries, results, strict=True):
        parts = ", ".join(f"{name} {sec:.2f}" for name, sec in s.median_phase_s.items())
        print(f"{s.name} phases (median s): {parts}")
        print(f"{s.name} per step s: {', '.join(f'{x:.1f}' for x in r.step_s)}")
        print(f"{s.name} rows trained per step: {', '.join(str(n) for n in r.rows_trained)}")
        print(f"{s.name} reward per step: {', '.join(f'{x:.3f}' for x in r.reward)}")
        loads = "/".join(f"{x:.1f}" for x in r.load_avg)
        print(f"{s.name} whole run {r.run_s:.0f} s; {r.threads} threads; load average before/after {loads}")
    print(f"versions: {results[-1].versions}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=Shape.steps, help="optimizer steps per side (>= 2)")
    parser.add_argument("--lora-rank", type=int, default=Shape.lora_rank)
    parser.add_argument("--seed", type=int, default=Shape.seed)
    parser.add_argument("--out", default="runs/grpo_vs_trl", help="run directories and per-side JSON")
    parser.add_argument(
        "--side",
        choices=["both", "envsuite", "trl", "report"],
        default="both",
        help="both: run each side in a child and print the table; envsuite/trl: run one side here; "
        "report: print the table from the JSON a previous run left in --out",
    )
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be >= 2 (step 0 is the warm-up and is left out of the median)")
    return args


def main() -> None:
    args = parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shape = Shape(steps=args.steps, lora_rank=args.lora_rank, seed=args.seed)
    if args.side in ("envsuite", "trl"):
        result = run_side(args.side, shape, out)
        (out / f"{args.side}.json").write_text(json.dumps(asdict(result), indent=1), encoding="utf-8")
        return
    if args.side == "report":
        print_table([_load(out / f"{side}.json") for side in ("envsuite", "trl")], shape.rollouts)
        return
    print_table([run_child(side, args, out) for side in ("envsuite", "trl")], shape.rollouts)


if __name__ == "__main__":
    main()
