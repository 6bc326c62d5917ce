"""One env of a direct bench as an ordinary Inspect log (JSON format): the same task, arguments, sample
ids, messages, scores and metrics the Inspect runner's log has, so ``inspect view``, :func:`import_log`
and the leaderboard read it alike (only ``metadata["runner"]`` and the missing event transcript differ).
JSON rather than ``.eval``: the whole log is written once, when the env ends, and Inspect's ``.eval``
writer took 147 ms for 128 episodes against 5 ms (it compresses each sample into the zip)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from inspect_ai.log import (
    EvalConfig,
    EvalDataset,
    EvalError,
    EvalLog,
    EvalMetric,
    EvalPlan,
    EvalPlanStep,
    EvalResults,
    EvalSample,
    EvalScore,
    EvalSpec,
    EvalStats,
    write_eval_log_async,
)
from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessageAssistant,
    GenerateConfig,
    ModelOutput,
    ModelUsage,
)

from envsuite.catalog.registration import spec
from envsuite.core import Message
from envsuite.evals._messages import to_inspect
from envsuite.evals._rubric import task_args
from envsuite.evals._task import EpisodeResult, episode_score, sample_id, task_metadata
from envsuite.evals.bench._budget import env_limits

if TYPE_CHECKING:
    from envsuite.evals.bench._config import BenchConfig

SCORER = "env_reward"


@dataclass(frozen=True)
class Play:
    """One play of an episode: its env seed and which of the bench's ``samples`` plays it is (1-based,
    Inspect's epoch)."""

    seed: int
    epoch: int = 1


@dataclass
class EpisodeRecord:
    """One played episode, as journaled and as written to the env's log."""

    seed: int
    result: EpisodeResult
    conversation: list[Message]
    answer: str
    """The model's last reply (the score's ``answer``)."""
    truncated: bool
    """The last reply stopped at the token limit."""
    started_at: str
    completed_at: str
    total_time: float
    input_tokens: int
    output_tokens: int
    error: str | None = None
    """The model's failure (a traceback): the episode did not finish and is played again on a rerun."""
    epoch: int = 1
    """Which play of the episode this is (``BenchConfig.samples`` plays each; Inspect's epoch)."""

    @property
    def play(self) -> Play:
        return Play(self.seed, self.epoch)

    @property
    def reward(self) -> float:
        return float(self.result["reward"])


async def write_env_log(
    config: BenchConfig,
    env_id: str,
    eval_id: str,
    records: list[EpisodeRecord],
    started_at: str,
    status: Literal["success", "error"],
    location: Path,
) -> None:
    """Write ``records`` (every episode of the env, finished or failed) as one Inspect log at ``location``.

    Async, on the bench's running loop: Inspect's synchronous ``write_eval_log`` would re-enter that loop
    (see ``evals._loops``)."""
    samples = [_sample(config, env_id, record) for record in records]
    scored = [s for s in samples if s.error is None]
    log = EvalLog(
        status=status,
        eval=_spec(config, env_id, eval_id, list(dict.fromkeys(s.id for s in samples)), started_at),
        plan=EvalPlan(
            name="plan",
            steps=[EvalPlanStep(solver="envsuite/play_env", params=_solver_params(config, env_id))],
            config=_generate_config(config, env_id),
        ),
        results=EvalResults(
            total_samples=len(samples), completed_samples=len(scored), scores=_scores(scored)
        ),
        stats=EvalStats(
            started_at=started_at,
            completed_at=datetime.now(UTC).isoformat(timespec="seconds"),
            model_usage={config.inspect_model(): _usage(records)},
        ),
        error=_first_error(records),
        samples=samples,
    )
    await write_eval_log_async(log, str(location), format="json")


def _generate_config(config: BenchConfig, env_id: str) -> GenerateConfig:
    max_tokens = env_limits(config, env_id).max_tokens
    return GenerateConfig(max_tokens=max_tokens, temperature=config.temperature, seed=config.seed)


def _solver_params(config: BenchConfig, env_id: str) -> dict[str, Any]:
    limits = env_limits(config, env_id)
    return (
        {"env_id": env_id, "partner": config.partner, "env_kwargs": None}
        | task_args(config.rubric_settings())
        | {"max_turns": limits.task_args()["max_turns"]}
    )


def _spec(config: BenchConfig, env_id: str, eval_id: str, ids: list[int | str], created: str) -> EvalSpec:
    metadata = task_metadata(env_id, config.partner, config.episodes, config.seed)
    limits = env_limits(config, env_id)
    args = (
        {
            "env_id": env_id,
            "episodes": config.episodes,
            "seed": config.seed,
            "partner": config.partner,
            "max_tokens": limits.max_tokens,
            "temperature": config.temperature,
            "env_kwargs": None,
            "episode_timeout_s": limits.episode_timeout_s,
        }
        | task_args(config.rubric_settings())
        | limits.task_args()
    )
    timeout = limits.episode_timeout_s
    return EvalSpec(
        eval_id=eval_id,
        run_id=eval_id,
        created=created,
        task=f"envsuite/{env_id}",
        task_registry_name="envsuite/env",
        task_args=args,
        task_args_passed=args,
        dataset=EvalDataset(name=env_id, samples=len(ids), sample_ids=ids, shuffled=False),
        model=config.inspect_model(),
        model_args=config.model_args(),
        config=EvalConfig(
            epochs=config.samples,
            fail_on_error=False,
            time_limit=None if timeout is None else max(1, math.ceil(timeout)),
            max_samples=config.max_samples,
            log_samples=True,
        ),
        packages={"inspect_ai": version("inspect_ai"), "envsuite": version("envsuite")},
        metadata=metadata | {"runner": "direct"},
    )


def _sample(config: BenchConfig, env_id: str, record: EpisodeRecord) -> EvalSample:
    env_spec = spec(env_id)
    usage = ModelUsage(
        input_tokens=record.input_tokens,
        output_tokens=record.output_tokens,
        total_tokens=record.input_tokens + record.output_tokens,
    )
    model_name = config.inspect_model().removeprefix("envsuite/")
    failed = record.error is not None
    return EvalSample(
        id=sample_id(env_id, record.seed),
        epoch=record.epoch,
        input=f"{env_spec.id} episode {record.seed}",
        target="",
        messages=to_inspect(record.conversation),
        output=ModelOutput(
            model=model_name,
            choices=[
                ChatCompletionChoice(
                    message=ChatMessageAssistant(content=record.answer, model=model_name, source="generate"),
                    stop_reason="max_tokens" if record.truncated else "stop",
                )
            ],
            usage=usage,
        ),
        scores=None if failed else {SCORER: episode_score(record.result, record.answer)},
        metadata={"env_id": env_spec.id, "seed": record.seed, "version": env_spec.version},
        model_usage={config.inspect_model(): usage},
        started_at=record.started_at,
        completed_at=record.completed_at,
        total_time=record.total_time,
        working_time=record.total_time,
        error=EvalError(message=_last_line(record.error), traceback=record.error, traceback_ansi=record.error)
        if record.error is not None
        else None,
    )


def _scores(samples: list[EvalSample]) -> list[EvalScore]:
    """The scorer's reward and success metrics: Inspect's ``mean`` and ``stderr`` (the sample standard
    deviation over the square root of the count; 0 for fewer than two), computed here because building
    Inspect's per-sample score objects to call them cost more than writing the whole log
    (``tests/test_bench_runners.py`` checks the values against Inspect's own). Several plays of an
    episode (epochs) are first averaged per sample, as Inspect's default ``mean`` reducer does."""
    scores = []
    for name in ("reward", "success"):
        per_sample: dict[int | str, list[float]] = {}
        for sample in samples:
            if sample.scores:
                per_sample.setdefault(sample.id, []).append(_value(sample, name))
        values = [statistics.fmean(plays) for plays in per_sample.values()]
        metrics = {"mean": EvalMetric(name="mean", value=statistics.fmean(values) if values else 0.0)}
        spread = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
        metrics["stderr"] = EvalMetric(name="stderr", value=spread)
        scores.append(
            EvalScore(
                name=name, scorer=SCORER, scored_samples=len(values), unscored_samples=0, metrics=metrics
            )
        )
    return scores


def _value(sample: EvalSample, name: str) -> float:
    value = sample.scores[SCORER].value if sample.scores else None
    return float(value[name]) if isinstance(value, dict) else 0.0


def _usage(records: list[EpisodeRecord]) -> ModelUsage:
    inputs = sum(r.input_tokens for r in records)
    outputs = sum(r.output_tokens for r in records)
    return ModelUsage(input_tokens=inputs, output_tokens=outputs, total_tokens=inputs + outputs)


def _first_error(records: list[EpisodeRecord]) -> EvalError | None:
    failed = [r.error for r in records if r.error is not None]
    if not failed:
        return None
    message = f"{len(failed)} episode(s) failed in the model; rerun the bench to play them again"
    return EvalError(message=message, traceback=failed[0], traceback_ansi=failed[0])


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "error"
