"""The environment layer's contracts: the shapes every env, builder, dataset and completer must have.

This is the one file to read before writing an env. Wherever a name exists in tinker-cookbook 0.5.8's
``rl/types.py`` and ``completers.py`` it has the same fields, call signature and meaning here
(``Env.step(action, *, extra=None)``, ``InitialObservationOverflow``, ``StopReason``,
``Trajectory.stop_reason``, ``TrajectoryGroup.rollout_errors``, ...), so an env, a group builder or a
completer written for one runs in the other's rollouts without an adapter. envsuite only adds (marked
"(envsuite)" below), never renames. Data travels as the Tinker SDK's types (``tinker.ModelInput``).

Object graph (each arrow is "builds", each builder is a small picklable config object)::

    RLDatasetBuilder --> RLDataset --get_batch(i)--> [EnvGroupBuilder]_P --make_envs()--> [Env]_G

Shape suffixes name batched axes: ``_P`` problems (groups) in a batch, ``_G`` members of one group,
``_T`` tokens, ``_D`` datums; a flattened axis is written ``_PG``.

Invariants every implementation keeps:

* An :class:`Env` is **single-use**: ``initial_observation`` once, then ``step`` until a result has
  ``episode_done=True``; then the env is discarded. There is no ``reset``.
* The final :class:`StepResult` of an episode carries a :class:`StopReason` in ``stop_reason`` and the
  metric ``stop/<reason> = 1.0`` (use :meth:`StepResult.final`). Non-final steps carry neither.
  (tinker-cookbook envs return their own ``StepResult``, without ``stop_reason``, and may omit the
  metric; envsuite's rollouts and checker read the metric and accept that.)
* A bad action (garbage tokens, empty, endless, invalid UTF-8, an illegal move) is a defined outcome
  (a parse-error stop with a penalty, or a re-prompt), never an exception.
* All members of one group share one episode (same seed, problem, secret, deal), so group-centred
  advantages compare like with like. Each env owns its RNG; nothing reads or seeds global random state.
* Builders and dataset builders pickle (rollouts may run in worker processes).

Tool calling (envsuite; tinker-cookbook 0.5.8's ``tool_use`` names, re-exported here from
``envsuite.chat`` and ``envsuite.tools``; docs/tools.md):

* An env declares its tools (:class:`Tool`: name, description, JSON-Schema parameters; :func:`tool` makes
  one of a function) and shows them to the model on the conversation's first system message
  (``tools``: :class:`ToolSpec` s), which the renderer formats as the model family expects.
* The renderer parses the model's calls out of the sampled tokens into ``tool_calls``
  (:class:`ToolCall`, OpenAI's shape) or ``unparsed_tool_calls`` (:class:`UnparsedToolCall`).
* Each call runs through :func:`run_tool_call`; its result goes back as ``tool`` messages, which become
  observation tokens. A malformed call (bad JSON, unknown tool, wrong argument types) is an error
  message the model sees, never an exception.
* The episode ends with ``StopReason.TOOL_STOPPED`` (a tool asked to stop), ``MAX_TOOL_CALLS`` (the
  call budget ran out) or an answer (a reply without calls: ``COMPLETED``).

``tinker`` is imported only for type checking here, so ``import envsuite`` stays light.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias, TypedDict

# Re-exported (redundant aliases): the contracts speak of them, and env authors import them from here.
from envsuite.chat import FunctionCall as FunctionCall
from envsuite.chat import Message as Message
from envsuite.chat import Role as Role
from envsuite.chat import StopCondition as StopCondition
from envsuite.chat import ToolCall as ToolCall
from envsuite.chat import ToolSpec as ToolSpec
from envsuite.chat import UnparsedToolCall as UnparsedToolCall
from envsuite.tools import Tool as Tool
from envsuite.tools import ToolError as ToolError
from envsuite.tools import ToolFailure as ToolFailure
from envsuite.tools import ToolInput as ToolInput
from envsuite.tools import ToolOutcome as ToolOutcome
from envsuite.tools import ToolResult as ToolResult
from envsuite.tools import run_tool_call as run_tool_call
from envsuite.tools import tool as tool
from envsuite.tools import tool_spec as tool_spec

if TYPE_CHECKING:
    import tinker

    from envsuite.constraints import Constraint
    from envsuite.renderers.base import Renderer

# --------------------------------------------------------------------------------------------------
# Basic aliases
# --------------------------------------------------------------------------------------------------

Action: TypeAlias = list[int]
"""Token ids sampled by the policy for one turn (including the stop token when it stopped cleanly)."""

Observation: TypeAlias = "tinker.ModelInput"
"""What the policy conditions on: the full prompt so far, as tokens."""

Logprobs: TypeAlias = list[float]
"""Per-token log-probabilities of an :data:`Action` under the sampling policy."""

Metrics: TypeAlias = dict[str, float | int]
"""Numeric per-step or per-episode measurements; aggregated by the trainer and evals."""

Logs: TypeAlias = dict[str, str | int | float]
"""Human-readable diagnostics (the parsed reply, the answer key, ...); never aggregated."""

SampleStop: TypeAlias = Literal["stop", "length"]
"""Why sampling of one reply stopped (``tinker.StopReason``'s values)."""


# --------------------------------------------------------------------------------------------------
# Outcomes
# --------------------------------------------------------------------------------------------------


class StopReason(enum.StrEnum):
    """Why an episode ended. The final transition records it as the metric ``stop/<value>``.

    The first nine members are tinker-cookbook 0.5.8's ``StopReason`` (same names, values and
    meanings); the last four are envsuite's additions.
    """

    COMPLETED = "completed"
    """The task reached its natural end (answer graded, game over, guess made)."""
    TOOL_STOPPED = "tool_stopped"
    """A tool signalled that the episode should stop."""
    MAX_TURNS = "max_turns"
    """The turn cap was reached (e.g. 20 questions asked without a correct guess)."""
    MAX_TOKENS = "max_tokens"
    """The token budget was exhausted: mid-turn (the reply hit the sampler's ``max_tokens`` without a
    stop sequence), between turns, or by an oversized initial prompt (the overflow sentinel)."""
    MAX_SAMPLED_TOKENS = "max_sampled_tokens"
    """The cumulative sampled-token (action-only) budget was exhausted."""
    MAX_TOOL_CALLS = "max_tool_calls"
    """The trajectory-level tool-call budget was exhausted."""
    CONTEXT_OVERFLOW = "context_overflow"
    """The rendered conversation (the next observation) exceeded the episode's token budget."""
    PARSE_ERROR = "parse_error"
    """The reply could not be understood (no answer, garbage tokens, invalid UTF-8, empty)."""
    ROLLOUT_TIMEOUT = "rollout_timeout"
    """The rollout driver ended the episode because it ran past its time limit."""
    INVALID_MOVE = "invalid_move"
    """(envsuite) A game ended because the player made an illegal move (after any allowed retries)."""
    PARTNER_ERROR = "partner_error"
    """(envsuite) A partner or opponent (answerer, fixed opponent) failed or timed out."""
    ENV_ERROR = "env_error"
    """(envsuite) The env itself raised; the driver recorded the failure instead of crashing the batch."""


STOP_METRIC_PREFIX = "stop/"
"""Metric-key prefix of the one-hot stop-reason metric (``stop/<reason>``)."""


def stop_reason_from_metrics(metrics: Metrics) -> str | None:
    """The reason named by a ``stop/<reason>`` metric key, if any (as tinker-cookbook reads it)."""
    return next((k[len(STOP_METRIC_PREFIX) :] for k in metrics if k.startswith(STOP_METRIC_PREFIX)), None)


@dataclass(frozen=True)
class InitialObservationOverflow:
    """Sentinel returned by :meth:`Env.initial_observation` when the prompt exceeds the token budget.

    tinker-cookbook's sentinel, field for field: the rollout driver ends the episode at once with one
    synthetic transition (empty observation and action, ``episode_done``) carrying ``reward``,
    ``metrics`` and ``logs``, and mirrors its ``stop/<reason>`` metric (``max_tokens`` for an
    oversized prompt) onto the trajectory. Returning it instead of raising lets one over-long prompt
    leave the rest of its group intact. Build it with :meth:`prompt_too_long`.
    """

    reward: float
    """Reward of the synthetic final transition."""
    metrics: Metrics = field(default_factory=dict)
    """Should hold one ``stop/<reason>`` key (``stop/max_tokens`` for an oversized prompt)."""
    logs: Logs = field(default_factory=dict)
    prompt_tokens: int | None = None
    """(envsuite) Length of the prompt that did not fit, when known."""
    max_tokens: int | None = None
    """(envsuite) The budget it had to fit in, when known."""

    @classmethod
    def prompt_too_long(
        cls, prompt_tokens: int, max_tokens: int, reward: float = 0.0
    ) -> InitialObservationOverflow:
        """The sentinel for a first prompt of ``prompt_tokens`` tokens over a ``max_tokens`` budget."""
        return cls(
            reward=reward,
            metrics={STOP_METRIC_PREFIX + StopReason.MAX_TOKENS.value: 1.0},
            logs={"initial_observation_overflow": f"prompt of {prompt_tokens} tokens > budget {max_tokens}"},
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
        )


def as_overflow(start: object) -> InitialObservationOverflow | None:
    """The overflow sentinel ``initial_observation`` returned, or None when it returned a prompt.

    tinker-cookbook's own sentinel (another class with the same fields) is read by its fields, so
    code that checks for overflow takes either env's.
    """
    if isinstance(start, InitialObservationOverflow):
        return start
    if isinstance(start, tuple) or not hasattr(start, "reward"):
        return None
    return InitialObservationOverflow(
        reward=float(getattr(start, "reward", 0.0)),
        metrics=dict(getattr(start, "metrics", {}) or {}),
        logs=dict(getattr(start, "logs", {}) or {}),
    )


class ActionExtra(TypedDict, total=False):
    """What the rollout driver passes with an action to :meth:`Env.step` (tinker-cookbook's type).

    Every key is optional; envs ignore what they do not need. Values pickle.
    """

    stop_reason: SampleStop
    """Why sampling stopped: ``"stop"`` (a stop sequence) or ``"length"`` (``max_tokens`` reached)."""


@dataclass
class StepResult:
    """What :meth:`Env.step` returns.

    On the final step ``episode_done`` is True, ``stop_reason`` is set and ``metrics`` holds
    ``stop/<reason>``; ``next_observation`` is then the conversation so far (it is not sampled from).
    """

    reward: float
    """Immediate reward for the action just taken."""
    episode_done: bool
    """True when the episode is over; the env must not be stepped again."""
    next_observation: Observation
    """The prompt for the next turn (or the final context when done)."""
    next_stop_condition: StopCondition
    """Stop condition for the next turn (the same as before for most envs)."""
    metrics: Metrics = field(default_factory=dict)
    """Numbers for aggregation: correctness, format, turn counts, ``stop/<reason>``."""
    logs: Logs = field(default_factory=dict)
    """Text for humans: the parsed reply, the reference answer, the partner's response."""
    stop_reason: StopReason | None = None
    """Set exactly when ``episode_done`` is True."""

    @classmethod
    def final(
        cls,
        reward: float,
        stop_reason: StopReason,
        next_observation: Observation,
        next_stop_condition: StopCondition,
        metrics: Metrics | None = None,
        logs: Logs | None = None,
    ) -> StepResult:
        """Build the last step of an episode, recording ``stop/<reason>`` in the metrics."""
        all_metrics: Metrics = dict(metrics or {})
        all_metrics[STOP_METRIC_PREFIX + stop_reason.value] = 1.0
        return cls(
            reward=reward,
            episode_done=True,
            next_observation=next_observation,
            next_stop_condition=next_stop_condition,
            metrics=all_metrics,
            logs=dict(logs or {}),
            stop_reason=stop_reason,
        )


class InvalidActionError(ValueError):
    """An action that is not a sequence of token ids of the env's vocabulary (raised at API boundaries:
    the gymnasium adapter, the OpenEnv server; :meth:`Env.step` itself ends the episode instead)."""


def tokens_outside_vocabulary(tokens: Sequence[int], vocab_size: int) -> str | None:
    """Why ``tokens`` are not ids of a vocabulary of ``vocab_size`` tokens, or None when they all are.

    The message names the first offending id and its position, so a client sees what it sent wrong.
    """
    for position, token in enumerate(tokens):
        if not 0 <= token < vocab_size:
            return (
                f"token id {token} at position {position} is outside the vocabulary "
                f"(ids 0..{vocab_size - 1}); {len(tokens)} token(s) sent"
            )
    return None


# --------------------------------------------------------------------------------------------------
# Policies
# --------------------------------------------------------------------------------------------------


@dataclass
class TokensWithLogprobs:
    """A sampled reply: its tokens, their logprobs when the sampler reports them, and why it stopped."""

    tokens: list[int]
    maybe_logprobs: list[float] | None = None
    stop_reason: SampleStop = "stop"
    """``"stop"``: the reply ended with a stop sequence; ``"length"``: it hit ``max_tokens``."""
    sequence_id: str | None = None
    """The sampler's id for this sequence (``SampledSequence.sequence_id``), which a datum's provenance
    names (``stable_reinforce``); None when the completer has none."""
    prompt_cache_hit_tokens: int = 0
    """Prompt tokens the sampler served from its prefix cache for this call
    (``SampleResponse.prompt_cache_hit_tokens``)."""

    @property
    def logprobs(self) -> list[float]:
        """The logprobs; raises if the sampler did not report them (RL training needs them)."""
        if self.maybe_logprobs is None:
            raise ValueError("this completion carries no logprobs")
        return self.maybe_logprobs


class TokenCompleter(ABC):
    """A policy over tokens, as RL needs it: the exact sampled tokens and their logprobs.

    (envsuite) A completer whose ``takes_constraints`` is true also accepts ``constraint=`` (an
    :class:`~envsuite.constraints.Constraint`) and samples the reply under it: the rollout driver passes
    an env's :meth:`Env.action_constraint` that way when a run constrains actions.
    """

    takes_constraints: bool = False

    @abstractmethod
    async def __call__(
        self, model_input: Observation, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        """Sample one reply to ``model_input``, stopping at ``stop``.

        Called once per turn by the rollout driver, possibly with many calls in flight at once
        (implementations should not block the event loop). The returned tokens include the stop
        token when sampling stopped cleanly, so the env can tell a clean stop from truncation.
        ``max_tokens`` caps this call's reply (combined with the completer's own limit by taking the
        minimum); None means no per-call cap.
        """


class MessageCompleter(ABC):
    """A policy over chat messages, for partners, judges and evaluation."""

    @abstractmethod
    async def __call__(self, messages: list[Message]) -> Message:
        """Reply to a conversation with one assistant message."""

    def identity(self) -> str:
        """A stable description of this completer (model, settings) for result keys and logs."""
        return type(self).__name__


# --------------------------------------------------------------------------------------------------
# Environments
# --------------------------------------------------------------------------------------------------


class Env(ABC):
    """A token-level RL environment for one episode.

    Lifecycle: construct (usually via an :class:`EnvGroupBuilder`), call :meth:`initial_observation`
    once, then :meth:`step` with each sampled action until ``episode_done``; discard. Implementations
    must be deterministic given their constructor arguments (seed included) and the actions taken.
    """

    @abstractmethod
    async def initial_observation(self) -> tuple[Observation, StopCondition] | InitialObservationOverflow:
        """Return the first prompt and its stop condition.

        Called exactly once, before any :meth:`step`. Return :class:`InitialObservationOverflow` when the
        prompt does not fit the env's token budget instead of raising.
        """

    @abstractmethod
    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        """Apply the policy's sampled tokens and return the reward and the next observation.

        ``extra`` carries what the driver knows about the action (why sampling stopped); envs may
        ignore it. Called after :meth:`initial_observation` and after each non-final step. Any token sequence is a
        legal argument: empty, random ids, ten thousand tokens, ids that decode to invalid UTF-8. Such
        input yields a defined outcome (usually ``StopReason.PARSE_ERROR`` with a penalty), never an
        exception. Ids outside the tokenizer's vocabulary (no sampler produces them) end the episode
        with ``StopReason.PARSE_ERROR``, the env's penalty for an unreadable reply, and the reason in
        ``logs["error"]`` (:func:`tokens_outside_vocabulary`); the observation is not extended with them.
        The final result must be built with :meth:`StepResult.final`.
        """

    def conversation(self) -> list[Message]:
        """The episode so far as chat messages, for display, transcripts and the gym adapter's ``info``.

        Envs that render messages should override this (the catalog's envs all do); the default says
        nothing is known.
        """
        return []

    def action_constraint(self) -> Constraint | None:
        """(envsuite) The shape every valid next action has, when the env can say (a move in the game's
        notation among the legal ones, a tool call in the model family's format): a run that constrains
        actions (``RolloutLimits.constrain_actions``, ``--constrain-actions``) samples the next action
        under it. Called after :meth:`initial_observation` and after each non-final :meth:`step`; None
        (the default) leaves the action free. The reward must not depend on whether it was used."""
        return None

    def reward_probes(self) -> Sequence[RewardProbe]:
        """(envsuite) Replies whose rewards the conformance checker verifies: the reward-hacking suite.

        Called after :meth:`initial_observation`, on an env of the episode the probes are for; the
        checker steps each probe's ``reply`` as the first action of a fresh env built the same way (same
        seed, same problem) and compares the returns with each probe's :class:`ProbeExpectation`. An env
        with a checkable answer returns at least its reference answer (``FULL_MARKS``) and a junk answer
        (``BELOW_REFERENCE``); code envs add their attacks (exits, forged result lines, patched
        harnesses: ``NO_CREDIT``). The default, no probes, means "nothing here to check"; the checker
        then tries its generic probes only.
        """
        return ()


class ProbeExpectation(enum.StrEnum):
    """(envsuite) What a :class:`RewardProbe` must earn for the env's reward to be sound."""

    FULL_MARKS = "full_marks"
    """The reference answer: the episode's return is the env's best (its ``reward_range`` top)."""
    BELOW_REFERENCE = "below_reference"
    """An honest but wrong or junk answer: strictly less than the reference answer's return."""
    NO_CREDIT = "no_credit"
    """An attack on the grader (an exit, a forged result, a patched harness): a return of at most 0."""


@dataclass(frozen=True)
class RewardProbe:
    """(envsuite) One reply of an env's reward-hacking suite (:meth:`Env.reward_probes`)."""

    name: str
    """What the reply tries, e.g. ``reference``, ``junk``, ``sys.exit``; unique within an env's probes."""
    reply: str
    """The assistant message's text, rendered to tokens by the checker's renderer."""
    expect: ProbeExpectation
    then: tuple[str, ...] = ()
    """The replies of the episode's following turns, in order (a multi-turn env's whole reference);
    after them, and by default, each further turn gets the checker's junk continuation."""


@dataclass
class Transition:
    """One turn of a rollout: what the policy saw, what it did, and what came back.

    Mutable, as tinker-cookbook's: rollout hooks may rewrite the final transition's stop metric.
    """

    ob: Observation
    ac: TokensWithLogprobs
    reward: float
    episode_done: bool
    metrics: Metrics = field(default_factory=dict)
    logs: Logs = field(default_factory=dict)
    stop_reason: str | None = None
    """(envsuite) The final transition's stop reason (usually a :class:`StopReason`); None otherwise."""


@dataclass(frozen=True)
class Trajectory:
    """All transitions of one episode, plus the observation after the last one."""

    transitions: list[Transition]
    final_ob: Observation
    stop_reason: str | None = None
    """Why the episode ended, when known: usually a :class:`StopReason` value, mirrored from the final
    transition's ``stop/<reason>`` metric. None when the env reported no reason."""

    @property
    def total_reward(self) -> float:
        """(envsuite) Sum of the per-step rewards (group rewards are added separately)."""
        return sum(t.reward for t in self.transitions)


@dataclass(frozen=True)
class RolloutError:
    """A failure captured during a group's rollouts (pickles, so it crosses process boundaries)."""

    error_type: str
    """The exception class name, e.g. ``'ValueError'``."""
    error_message: str
    """``str(exception)``."""


@dataclass
class TrajectoryGroup:
    """The trajectories of one group, with the group-level rewards computed after all finished."""

    trajectories_G: list[Trajectory]
    final_rewards_G: list[float]
    metrics_G: list[Metrics]
    rollout_errors: list[RolloutError] = field(default_factory=list)
    """Errors captured while the group ran (envsuite keeps the failed member's trajectory, ended with
    ``StopReason.ENV_ERROR``, and records the error here too). Empty: no errors."""

    def get_total_rewards(self) -> list[float]:
        """Per-member return: step rewards plus the group reward."""
        return [
            traj.total_reward + final
            for traj, final in zip(self.trajectories_G, self.final_rewards_G, strict=True)
        ]


class EnvGroupBuilder(ABC):
    """Builds one group of envs that share an episode. A small picklable config object."""

    @abstractmethod
    async def make_envs(self) -> Sequence[Env]:
        """Create the group's envs (fresh each call). All members share the same episode."""

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        """Rewards that need the whole group (pairwise judges, zero-sum games). Default: none.

        Called once every member finished, with the trajectories and envs in member order. Use only
        the fields tinker-cookbook's ``Trajectory`` also has (so the builder runs under its rollouts).
        """
        return [(0.0, {}) for _ in trajectory_group]

    async def cleanup(self) -> None:  # noqa: B027  (optional hook; most groups hold nothing)
        """Release resources held for the group. Idempotent; called once the group is done."""

    def logging_tags(self) -> list[str]:
        """Tags (usually the env id) used to split metrics per env family."""
        return []


class RLDataset(ABC):
    """An indexable sequence of batches of :class:`EnvGroupBuilder`."""

    @abstractmethod
    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        """Return batch ``index`` (``0 <= index < len(self)``). Deterministic for a given index."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of batches."""


class RLDatasetBuilder(ABC):
    """A picklable config object that builds the train dataset and an optional test dataset."""

    @abstractmethod
    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        """Build ``(train, test)``; test may be None."""


# --------------------------------------------------------------------------------------------------
# Catalog construction
# --------------------------------------------------------------------------------------------------

Split: TypeAlias = Literal["train", "test"]


@dataclass(frozen=True)
class EnvContext:
    """What the catalog passes every env besides its own keyword arguments.

    A catalog env's constructor is ``__init__(self, ctx: EnvContext, **env_kwargs)``. Two envs built
    from equal contexts and kwargs must play the same episode.
    """

    seed: int
    """The episode seed; the env derives all its randomness from it (its own RNG, never global)."""
    renderer: Renderer
    """How messages become tokens for the policy's model."""
    split: Split = "train"
    """Which part of the env's problem set to draw from; train and test never overlap."""
    max_context_tokens: int = 4096
    """Token budget for observations; an initial prompt over it yields the overflow sentinel."""
    env_id: str = ""
    """The catalog id the env was made from (for logging tags)."""
