"""An Inspect task for any catalog env: a solver that plays the env and a scorer that reports its reward.

Sample ids are ``<env id with version>@<seed>``, so runs of different models on the same env and seeds
pair up sample by sample. The evaluated model is whatever Inspect was given (``envsuite/...``,
``openai/...``, ``hf/...``); its replies are turned into tokens with the env's renderer (the evaluated
model's own for ``envsuite/`` models, SmolLM2's tokenizer as a plain text codec otherwise), so every env
runs unchanged. Partners (the twenty-questions answerer, game opponents) can be any Inspect model.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import GenerateConfig, Model, get_model
from inspect_ai.scorer import Score, Scorer, Target, mean, scorer, stderr
from inspect_ai.solver import Generate, Solver, TaskState, solver

from envsuite import DEFAULT_MODEL, RendererConfig, episode_seed, make_env
from envsuite.catalog.registration import EnvSpec, spec
from envsuite.core import (
    Env,
    Message,
    StopCondition,
    StopReason,
    ToolCall,
    as_overflow,
    stop_reason_from_metrics,
)
from envsuite.evals._messages import from_inspect_call, inspect_tools, to_inspect, tools_of
from envsuite.evals._rubric import RubricSettings, rubric_score
from envsuite.evals._workers import active_pool
from envsuite.executors import WorkerLostError, WorkerPool
from envsuite.renderers import encodable_text, reply_message_tokens, reply_to_tokens

if TYPE_CHECKING:
    from envsuite.renderers import Renderer

RESULT_KEY = "envsuite_result"
MAX_TURNS_GUARD = 512


def sample_id(env_id: str, seed: int) -> str:
    """The id pairing samples across models: full env id (with version) and seed."""
    return f"{spec(env_id).id}@{seed}"


def episode_seeds(env_id: str, episodes: int, seed: int) -> list[int]:
    """The seed set of a benchmark run: stable for (env, episodes, seed).

    An eval set of fixed items (its env class says how many with ``item_count_of(kwargs)``, and
    ``seed % n`` picks an item: BFCL, HumanEval, the standard sets) is played in order, item ``k`` of
    episode ``k`` from ``seed * episodes`` on: ``--seed 0`` plays the set's first ``episodes`` items, as
    reports count them, and no item twice until the set is used up. Other envs draw their items from
    the seed, so their episodes take hashed seeds.
    """
    env_spec = spec(env_id)
    count = _item_count(env_spec)
    if count:
        return [(seed * episodes + i) % count for i in range(episodes)]
    return [episode_seed(seed, "bench", env_spec.id, i) % (2**31) for i in range(episodes)]


def _item_count(env_spec: EnvSpec) -> int | None:
    """How many fixed items ``env_spec``'s episodes pick from (None: it draws them from the seed)."""
    hook = getattr(env_spec.load(), "item_count_of", None)
    if not callable(hook):
        return None
    try:
        count = hook(dict(env_spec.kwargs))
    except Exception:  # data that cannot load here: the bench reports that when it makes the env
        return None
    return count if isinstance(count, int) and count > 0 else None


def sample_seed(episode: int, epoch: int) -> int | None:
    """The sampling seed of play ``epoch`` (1-based) of the episode seeded ``episode`` when a bench plays
    each episode several times: None for the first (the bench's own seed, so one play per episode
    samples exactly as it always did), a seed derived from the episode and the play for the others."""
    if epoch < 1:
        raise ValueError(f"plays are numbered from 1, got {epoch}")
    return None if epoch == 1 else episode_seed(episode, "sample", epoch) % (2**31)


def _codec_model(model: Model) -> str:
    """Model whose renderer turns the evaluated model's text into env tokens: the envsuite model itself
    (the provider says which, a checkpoint's path included), else SmolLM2's tokenizer as a text codec."""
    local = getattr(model.api, "envsuite_model", None)
    return local if isinstance(local, str) else DEFAULT_MODEL


def _partner_kwargs(env_id: str, partner: str | None) -> dict[str, Any]:
    env_spec = spec(env_id)
    if partner is None or env_spec.partner_kwarg is None:
        return {}
    if partner.startswith("envsuite-builtin:"):
        return {env_spec.partner_kwarg: partner.removeprefix("envsuite-builtin:")}
    from envsuite.evals._partners import InspectMessageCompleter

    return {env_spec.partner_kwarg: InspectMessageCompleter(partner)}


def _partner_identity(env: object) -> str:
    """Which partner/opponent ran: part of a result's identity on the leaderboard."""
    for attribute in ("answerer_identity", "opponent_identity"):
        identity = getattr(env, attribute, None)
        if isinstance(identity, str) and identity:
            return identity
    return "none"


class _EnvFailure(Exception):
    """The env (not the model) raised while playing a sample."""


def _sample_env(
    env_id: str, seed: int, renderer: RendererConfig, env_kwargs: dict[str, Any] | None, partner: str | None
) -> Env:
    try:
        kwargs = dict(env_kwargs or {}) | _partner_kwargs(env_id, partner)
        return make_env(env_id, seed=seed, split="test", renderer=renderer, **kwargs)
    except Exception as exc:
        raise _EnvFailure(f"could not make {env_id}: {exc!r}") from exc


@dataclass(frozen=True)
class ModelReply:
    """The evaluated model's answer to one turn (as Inspect gave it)."""

    text: str
    truncated: bool
    """It stopped at the token limit (so no stop sequence is appended)."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """The tools it called (written into the reply in the env's chat format)."""

    def reply_tokens(self, renderer: Renderer, stop: StopCondition) -> list[int]:
        """The tokens the env steps on: the reply's text (and calls) in the env's chat format."""
        if self.tool_calls:
            message: Message = {"role": "assistant", "content": self.text, "tool_calls": self.tool_calls}
            return reply_message_tokens(renderer, message)
        if self.truncated:
            return list(renderer.tokenizer.encode(encodable_text(self.text), add_special_tokens=False))
        return reply_to_tokens(renderer, self.text, stop)


ModelTurn = Callable[[list[Message]], Awaitable[ModelReply]]
"""Asks the evaluated model for the next reply to the conversation so far (lives in the driver)."""


async def play_episode(
    env: Env,
    renderer: RendererConfig,
    model_turn: ModelTurn,
    result: EpisodeResult,
    max_turns: int | None = None,
) -> list[Message]:
    """One episode: the model replies through ``model_turn``, the env steps on the reply's tokens, for at
    most ``max_turns`` turns (a bench budget; the episode then ends as ``max_turns``).

    The same loop runs in process and in a bench worker (where ``model_turn`` calls back to the
    driver). Env failures are raised as :class:`_EnvFailure`; model failures propagate unchanged, so
    Inspect records them as sample errors (retried when the run is resumed) rather than as scores.
    Returns the final conversation.
    """
    try:
        start = await env.initial_observation()
    except Exception as exc:
        raise _EnvFailure(repr(exc)) from exc
    overflow = as_overflow(start)
    if overflow is not None:
        result["reward"] += overflow.reward
        result["stop_reason"] = stop_reason_from_metrics(overflow.metrics)
        return env.conversation()
    _, stop = start  # type: ignore[misc]  # not an overflow, so the (observation, stop) pair
    built = renderer.build()
    for _ in range(min(max_turns or MAX_TURNS_GUARD, MAX_TURNS_GUARD)):
        reply = await model_turn(env.conversation())
        try:
            step = await env.step(reply.reply_tokens(built, stop))
        except Exception as exc:
            raise _EnvFailure(repr(exc)) from exc
        result["turns"] += 1
        result["reward"] += step.reward
        for key, value in step.metrics.items():
            result["metrics"][key] = result["metrics"].get(key, 0.0) + float(value)
        stop = step.next_stop_condition
        if step.episode_done:
            result["stop_reason"] = stop_reason_from_metrics(step.metrics)
            break
    else:
        result["stop_reason"] = StopReason.MAX_TURNS.value
    return env.conversation()


class EpisodeResult(TypedDict):
    """What playing one episode fills in (read by the scorer, journaled by the direct runner)."""

    reward: float
    """The episode's return so far."""
    metrics: dict[str, float]
    """The env's step metrics, summed over the episode's steps."""
    stop_reason: str | None
    """A :class:`~envsuite.core.StopReason` value; None while the episode is still being played."""
    turns: int
    partner: NotRequired[str]
    """Which partner or opponent played (part of the result's identity)."""
    error: NotRequired[str]
    """Why the env failed (with stop reason ``env_error``)."""


@dataclass(frozen=True)
class EpisodeTask:
    """One bench sample's env, as plain data for a worker."""

    env_id: str
    seed: int
    renderer: RendererConfig
    env_kwargs: dict[str, Any] | None
    partner: str | None
    max_turns: int | None = None
    """Turns of the model at most (a bench budget: ``evals.bench._budget``); None: the env's own limit."""


@dataclass(frozen=True)
class EpisodeOutcome:
    result: EpisodeResult
    conversation: list[Message]


def new_result() -> EpisodeResult:
    """An episode's result before its first step (filled in as it plays; read by the scorer)."""
    return {"reward": 0.0, "metrics": {}, "stop_reason": None, "turns": 0}


async def run_episode(
    task: EpisodeTask, model_turn: ModelTurn, result: EpisodeResult | None = None
) -> EpisodeOutcome:
    """Make the sample's env and play it; env failures become an ``env_error`` result.

    This is the whole of a sample's env work: in process it runs on Inspect's loop, with a remote
    executor it is one job in a worker (a module-level function, so the job pickles it by name).
    """
    result = new_result() if result is None else result
    conversation: list[Message] = []
    try:
        env = _sample_env(task.env_id, task.seed, task.renderer, task.env_kwargs, task.partner)
        result["partner"] = _partner_identity(env)
        conversation = await play_episode(env, task.renderer, model_turn, result, task.max_turns)
    except _EnvFailure as exc:
        # A failing env is a defined outcome for that sample, not a crash of the whole run.
        result["stop_reason"] = StopReason.ENV_ERROR.value
        result["error"] = str(exc)[:500]
    return EpisodeOutcome(result, conversation)


async def run_in_pool(pool: WorkerPool, task: EpisodeTask, model_turn: ModelTurn) -> EpisodeOutcome:
    """:func:`run_episode` in a worker, each model turn called back here; a lost worker is an env error."""
    handle = pool.expose(model_turn)
    try:
        return await pool.run(run_episode, task, handle)
    except WorkerLostError as exc:
        result = new_result()
        result["stop_reason"], result["error"] = StopReason.ENV_ERROR.value, str(exc)[:500]
        return EpisodeOutcome(result, [])
    finally:
        pool.release(handle)


async def score_episode(settings: RubricSettings, result: EpisodeResult, conversation: list[Message]) -> None:
    """Add a bench rubric's score of the played episode's final reply to its result: the rubric's reward
    to the episode's, its criteria as ``rubric/<criterion>`` and ``rubric/reward`` metrics. Both bench
    runners call it once an episode is played (``evals._rubric``)."""
    score = await rubric_score(settings, conversation)
    result["reward"] += score.reward
    result["metrics"].update({f"rubric/{c.name}": c.score for c in score.criteria})
    result["metrics"]["rubric/reward"] = score.reward


def _check_env_kwargs(env_id: str, env_kwargs: dict[str, Any], seed: int) -> None:
    try:
        make_env(env_id, seed=seed, split="test", **env_kwargs)
    except Exception as exc:
        raise ValueError(f"env {env_id!r} cannot be built with env_kwargs {env_kwargs}: {exc}") from exc


@solver
def play_env(
    env_id: str,
    partner: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
    rubric: dict[str, Any] | None = None,
    judge: str | None = None,
    judge_cache: str | None = None,
    max_turns: int | None = None,
) -> Solver:
    """Drive one catalog env episode with the evaluated model (multi-turn, partners included).

    A tool env's tools are given to the model as Inspect tools (generated with ``tool_calls="none"``:
    the env, not Inspect, runs them), and the model's calls are written into its reply in the env's
    chat format. With a bench executor (``envsuite bench --executor process|ray``) the env plays in a worker and
    each model turn comes back here, to Inspect's ``generate``. With a ``rubric`` (its content, as
    :meth:`~envsuite.rubrics.Rubric.to_dict` writes it) the played episode's final reply is scored by
    it here, judged by the local model ``judge`` (``evals._rubric``).
    """
    scoring = None if rubric is None else RubricSettings(rubric, judge or DEFAULT_MODEL, judge_cache)

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        task = EpisodeTask(
            env_id=env_id,
            seed=int(state.metadata["seed"]),
            renderer=RendererConfig(model_name=_codec_model(get_model())),
            env_kwargs=env_kwargs,
            partner=partner,
            max_turns=max_turns,
        )
        result = new_result()
        state.store.set(RESULT_KEY, result)

        async def model_turn(messages: list[Message]) -> ModelReply:
            nonlocal state
            # Kept current every turn: an episode cut by the time limit is scored with what it earned.
            state.store.set(RESULT_KEY, result)
            state.messages = to_inspect(messages)
            state.tools = inspect_tools(tools_of(messages))
            # tool_calls="none": the env runs its tools, not Inspect. Each epoch samples with its own seed.
            seed = sample_seed(task.seed, state.epoch)
            if seed is None:
                state = await generate(state, tool_calls="none")
            else:
                state = await generate(state, tool_calls="none", seed=seed)
            calls = [from_inspect_call(call) for call in state.output.message.tool_calls or []]
            return ModelReply(state.output.completion, state.output.stop_reason == "max_tokens", calls)

        pool = active_pool()
        if pool is None:
            outcome = await run_episode(task, model_turn, result)
        else:
            outcome = await run_in_pool(pool, task, model_turn)
        if scoring is not None:
            await score_episode(scoring, outcome.result, outcome.conversation)
        if outcome.conversation:
            state.messages = to_inspect(outcome.conversation)
        state.store.set(RESULT_KEY, outcome.result)
        state.completed = True
        return state

    return solve


def episode_score(result: EpisodeResult, answer: str) -> Score:
    """An episode's score from its result so far and the model's last reply: the env's own return and
    success (its ``correct``/``success`` metric, else reward > 0). An episode that did not finish was
    cut by its time limit: ``rollout_timeout``, scored with the reward it had earned."""
    stop_reason = result["stop_reason"] or StopReason.ROLLOUT_TIMEOUT.value
    metrics = result["metrics"]
    success = metrics.get("success", metrics.get("correct", 1.0 if result["reward"] > 0 else 0.0))
    return Score(
        value={"reward": float(result["reward"]), "success": float(min(1.0, success))},
        answer=answer,
        explanation=f"stop/{stop_reason} after {result.get('turns', 0)} turn(s)",
        metadata={
            "metrics": metrics,
            "stop_reason": stop_reason,
            "partner": result.get("partner"),
            "error": result.get("error"),
        },
    )


@scorer(metrics={"reward": [mean(), stderr()], "success": [mean(), stderr()]})
def env_reward() -> Scorer:
    """The env's own return and success (its ``correct``/``success`` metric, else reward > 0).

    An episode the solver did not finish was cut by the task's time limit: ``rollout_timeout``, scored
    with the reward it had earned.
    """

    async def score(state: TaskState, target: Target) -> Score:
        result: EpisodeResult | None = state.store.get(RESULT_KEY)
        if result is None:  # the solver never started the episode
            result = new_result()
            result["stop_reason"] = StopReason.ENV_ERROR.value
        return episode_score(result, state.output.completion if state.output else "")

    return score


def task_metadata(env_id: str, partner: str | None, episodes: int, seed: int) -> dict[str, str | int]:
    """The metadata of an env's bench task (both bench runners write it into their logs)."""
    return {"env_id": env_id, "partner": partner or "default", "episodes": episodes, "seed": seed}


@task(name="env")  # Inspect prefixes the package: registered as envsuite/env
def envsuite_env(
    env_id: str,
    episodes: int = 20,
    seed: int = 0,
    partner: str | None = None,
    max_tokens: int = 256,
    temperature: float = 0.7,
    env_kwargs: dict[str, Any] | None = None,
    episode_timeout_s: float | None = None,
    rubric: dict[str, Any] | None = None,
    judge: str | None = None,
    judge_cache: str | None = None,
    budget: str | None = None,
    max_turns: int | None = None,
) -> Task:
    """Evaluate a model on ``episodes`` test-split episodes of catalog env ``env_id``.

    ``env_kwargs`` are checked here, by building one episode, so a bad setting (an unknown keyword, an
    unreadable dataset) fails the task at once instead of scoring every sample as ``env_error``.
    ``episode_timeout_s`` bounds each episode's wall-clock time (Inspect's per-sample ``time_limit``, in
    whole seconds); an episode past it is scored as far as it got, as ``rollout_timeout``. ``rubric``,
    ``judge`` and ``judge_cache`` score each finished episode's final reply by a rubric as well (see
    :func:`play_env`); plain data, so the task's arguments stay serializable. ``max_turns`` caps the
    model's turns of an episode, as the bench budget ``budget`` (``evals.bench._budget``) fitted them;
    ``budget`` itself only names it in the log.
    """
    del budget
    env_spec = spec(env_id)
    if env_kwargs:
        _check_env_kwargs(env_spec.id, env_kwargs, seed)
    samples = [
        Sample(
            input=f"{env_spec.id} episode {s}",
            id=sample_id(env_spec.id, s),
            metadata={"env_id": env_spec.id, "seed": s, "version": env_spec.version},
        )
        for s in episode_seeds(env_spec.id, episodes, seed)
    ]
    return Task(
        dataset=MemoryDataset(samples, name=env_spec.id),
        solver=play_env(
            env_spec.id,
            partner=partner,
            env_kwargs=env_kwargs,
            rubric=rubric,
            judge=judge,
            judge_cache=judge_cache,
            max_turns=max_turns,
        ),
        scorer=env_reward(),
        config=GenerateConfig(max_tokens=max_tokens, temperature=temperature, seed=seed),
        time_limit=None if episode_timeout_s is None else max(1, math.ceil(episode_timeout_s)),
        name=f"envsuite/{env_spec.id}",
        metadata=task_metadata(env_spec.id, partner, episodes, seed),
    )
