"""The tool-use episode: the policy calls the env's tools until it answers. Subclasses say what the task is.

Turn by turn: the reply is parsed by the renderer; each tool call in it runs (in order, through
:func:`envsuite.tools.run_tool_call`, so a malformed call is an error message, never an exception) and
its result goes back as a ``tool`` message; the next prompt extends the previous one by the sampled
tokens and those messages (``build_next_prompt``), so a whole episode trains as one datum. A reply
without calls is the answer. The episode ends with:

* ``COMPLETED``: the policy answered (graded by :meth:`ToolUseEnv.score`);
* ``TOOL_STOPPED``: a tool asked to stop (graded on the env's state, answer None);
* ``MAX_TOOL_CALLS``: the call budget ran out (calls past it are not run); ``MAX_TURNS``: the turn
  budget ran out; ``CONTEXT_OVERFLOW``: the next prompt would not fit (all graded, answer None);
* ``PARSE_ERROR``: an empty or unreadable reply; ``MAX_TOKENS``: a reply cut off without a call.

Metrics: ``success``, ``answered``, ``tool_calls``, ``tool_errors`` (the rollout driver counts turns).

Reward: 1 for a correct outcome; otherwise ``tool_use_reward`` when the policy answered after at least
one successful call (a shaping reward for easy rungs, 0 by default, always below a correct outcome's
1: it pays the whole protocol, call then answer, so calling until the turns run out earns nothing), else
0; a reply that is unreadable, empty or cut off without a call costs ``format_coef`` instead. Calls in a reply cut off
at the token limit still run (its closed blocks are read; the turn is closed by the next prompt).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from envsuite.constraints import Constraint
from envsuite.core import (
    Action,
    ActionExtra,
    Env,
    EnvContext,
    InitialObservationOverflow,
    Logs,
    Message,
    Metrics,
    Observation,
    ProbeExpectation,
    RewardProbe,
    StepResult,
    StopCondition,
    StopReason,
    Tool,
    ToolCall,
    ToolSpec,
    UnparsedToolCall,
    run_tool_call,
    tool_spec,
)
from envsuite.envs._problem import clip
from envsuite.renderers import ToolCallRule, ToolChoice, reply_message_text

DEFAULT_FORMAT_COEF = 0.1


@dataclass(frozen=True)
class Score:
    """How the episode's outcome fared: ``correct`` decides the reward; the rest is for logs."""

    correct: bool
    reference: str
    detail: str = ""
    partial: float = 0.0
    """Credit in [0, 1) for a wrong outcome that got part of the way (an env's shaping, off by default);
    the reward is the larger of it and ``tool_use_reward``'s."""


@dataclass
class _Tally:
    turns: int = 0
    calls: int = 0
    errors: int = 0
    succeeded: int = 0
    stopped: bool = False
    answer: str | None = None
    log: list[str] = field(default_factory=list)


class ToolUseEnv(Env):
    """A multi-turn tool-use episode (see the module docstring). Single-use, deterministic per seed.

    Subclasses set up the episode in ``__init__`` (from ``ctx.seed``, with their own RNG) and implement
    :meth:`tools` (the declared tools, bound to this episode's state), :meth:`task` (the user's opening
    message) and :meth:`score`.
    """

    def __init__(
        self,
        ctx: EnvContext,
        *,
        max_turns: int = 6,
        max_tool_calls: int = 8,
        system_prompt: str | None = None,
        demonstrate: bool = False,
        tool_use_reward: float = 0.0,
        format_coef: float = DEFAULT_FORMAT_COEF,
        tool_timeout_s: float = 10.0,
        max_result_chars: int = 2000,
    ) -> None:
        """``max_turns``: policy turns (the answer included); ``max_tool_calls``: calls per episode;
        ``system_prompt``: text before the tool definitions; ``demonstrate``: show :meth:`demonstration`
        before the task; ``tool_use_reward``: paid for a wrong answer given after a successful call (in
        [0, 1)); ``format_coef``: the cost of an unreadable reply."""
        if max_turns < 1 or max_tool_calls < 0:
            raise ValueError(
                f"max_turns must be >= 1 and max_tool_calls >= 0, got {max_turns}, {max_tool_calls}"
            )
        if not 0.0 <= tool_use_reward < 1.0 or format_coef < 0:
            raise ValueError("tool_use_reward must be in [0, 1) and format_coef >= 0")
        self.ctx = ctx
        self.renderer = ctx.renderer
        self.max_turns = max_turns
        self.max_tool_calls = max_tool_calls
        self.system_prompt = system_prompt
        self.demonstrate = demonstrate
        self.tool_use_reward = tool_use_reward
        self.format_coef = format_coef
        self.tool_timeout_s = tool_timeout_s
        self.max_result_chars = max_result_chars
        self._tally = _Tally()
        self._conversation: list[Message] = []
        self._prompt: Observation | None = None

    # ---- what a tool env says ------------------------------------------------------------------

    @abstractmethod
    def tools(self) -> Sequence[Tool]:
        """The tools of this episode (same list every call; bound to the episode's state)."""

    @abstractmethod
    def task(self) -> str:
        """The user's opening message."""

    @abstractmethod
    async def score(self, answer: str | None) -> Score:
        """Grade the outcome: the answer's text, or None when the episode ended without one."""

    # ---- the reward-hacking suite's probes (envsuite.testing._reward_probes) ----------------------

    def reference_reply(self) -> str | None:
        """One reply that does the task (the right answer, or the calls that reach the goal): it must
        earn full marks. None (the default): the env has no probes of its own."""
        return None

    def idle_answer(self) -> str:
        """A final answer, without any call, that does not do the task (a wrong answer)."""
        return "I don't know."

    def idle_call(self) -> ToolCall | None:
        """A well-formed call that does nothing toward the task (None: no such call)."""
        return None

    def reward_probes(self) -> Sequence[RewardProbe]:
        """The reference (full marks), an answer without acting and a call that does nothing, then junk
        turns (both less); none when the env has no :meth:`reference_reply`."""
        reference = self.reference_reply()
        if reference is None:
            return ()
        probes = [
            RewardProbe("reference", reference, ProbeExpectation.FULL_MARKS),
            RewardProbe("answer without acting", self.idle_answer(), ProbeExpectation.BELOW_REFERENCE),
        ]
        call = self.idle_call()
        if call is not None:
            idle = self.reply_with_calls([call])
            probes.append(RewardProbe("a call that does nothing", idle, ProbeExpectation.BELOW_REFERENCE))
        return probes

    def reply_with_calls(self, calls: Sequence[ToolCall], content: str = "") -> str:
        """The text of an assistant reply making ``calls``, written in the renderer's call format."""
        message: Message = {"role": "assistant", "content": content, "tool_calls": list(calls)}
        return reply_message_text(self.renderer, message)

    def demonstration(self) -> list[Message]:
        """Messages shown before the task when ``demonstrate=True``: an example task, the call that
        serves it and the result. Easy rungs use one: SmolLM2-135M writes a call in the shown syntax in
        about half its first replies, and in none when the syntax is only described. (With the example's
        answer shown too, it mostly repeats that answer instead.) Default: none."""
        return []

    # ---- the episode ---------------------------------------------------------------------------

    def tool_specs(self) -> list[ToolSpec]:
        """How the tools are shown to the model."""
        return [tool_spec(t) for t in self.tools()]

    def action_constraint(self) -> Constraint | None:
        """Text, or calls of this env's tools in the renderer's format with arguments valid against each
        tool's schema (``strict``); None where the renderer does not describe its calls."""
        if self.renderer.tool_call_syntax() is None:
            return None
        specs = self.tool_specs()
        rule = ToolCallRule(ToolChoice.AUTO, strict=frozenset(spec["name"] for spec in specs))
        return self.renderer.tool_call_constraint(specs, rule)

    def conversation(self) -> list[Message]:
        return list(self._conversation)

    @property
    def stop_condition(self) -> StopCondition:
        return self.renderer.get_stop_sequences()

    async def initial_observation(self) -> tuple[Observation, StopCondition] | InitialObservationOverflow:
        system: Message = {"role": "system", "content": self.system_prompt or "", "tools": self.tool_specs()}
        example = self.demonstration() if self.demonstrate else []
        self._conversation = [system, *example, {"role": "user", "content": self.task()}]
        prompt = self.renderer.build_generation_prompt(self._conversation)
        if prompt.length > self.ctx.max_context_tokens:
            return InitialObservationOverflow.prompt_too_long(prompt.length, self.ctx.max_context_tokens)
        self._prompt = prompt
        return prompt, self.stop_condition

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        if self._prompt is None:
            raise RuntimeError("call initial_observation() before step()")
        self._tally.turns += 1
        parsed = self.renderer.parse_response(list(action))
        message = parsed.message
        calls: list[ToolCall | UnparsedToolCall] = [
            *message.get("tool_calls", []),
            *message.get("unparsed_tool_calls", []),
        ]
        self._conversation.append(message)
        if not parsed.valid_utf8 or (not calls and not message["content"].strip()):
            return await self._finish(action, StopReason.PARSE_ERROR, penalty=True)
        if not calls:
            if not parsed.clean_stop:
                return await self._finish(action, StopReason.MAX_TOKENS, penalty=True)
            self._tally.answer = message["content"].strip()
            return await self._finish(action, StopReason.COMPLETED)
        stop = await self._run_calls(calls)
        if stop is None and self._tally.turns >= self.max_turns:
            stop = StopReason.MAX_TURNS
        if stop is not None:
            return await self._finish(action, stop)
        observation = self._next_prompt(action)
        if observation.length > self.ctx.max_context_tokens:
            return await self._finish(action, StopReason.CONTEXT_OVERFLOW, observation=observation)
        self._prompt = observation
        logs: Logs = {"calls": clip("\n".join(self._tally.log[-4:]), 1000)}
        return StepResult(0.0, False, observation, self.stop_condition, {}, logs)

    async def _run_calls(self, calls: list[ToolCall | UnparsedToolCall]) -> StopReason | None:
        """Run the calls the budget allows, appending their results; why the episode stops, if it does."""
        budget = self.max_tool_calls - self._tally.calls
        for call in calls[: max(budget, 0)]:
            outcome = await run_tool_call(
                self.tools(), call, timeout_s=self.tool_timeout_s, max_chars=self.max_result_chars
            )
            self._tally.calls += 1
            self._tally.errors += not outcome.ok
            self._tally.succeeded += outcome.ok
            self._tally.log.append(_call_line(call, outcome.messages))
            self._conversation += outcome.messages
            if outcome.should_stop:
                self._tally.stopped = True
                return StopReason.TOOL_STOPPED
        return StopReason.MAX_TOOL_CALLS if len(calls) > budget else None

    def _next_prompt(self, action: Action) -> Observation:
        assert self._prompt is not None
        return self.renderer.build_next_prompt(self._prompt, list(action), self._conversation)

    async def _finish(
        self,
        action: Action,
        stop: StopReason,
        *,
        penalty: bool = False,
        observation: Observation | None = None,
    ) -> StepResult:
        answer = self._tally.answer if stop is StopReason.COMPLETED else None
        verdict = await self.score(answer)
        if penalty:
            reward = -self.format_coef
        elif verdict.correct:
            reward = 1.0
        else:
            used = self.tool_use_reward if self._tally.succeeded and answer is not None else 0.0
            reward = max(used, min(verdict.partial, 0.99))
        metrics: Metrics = {
            "success": float(verdict.correct and not penalty),
            "answered": float(answer is not None),
            "tool_calls": self._tally.calls,
            "tool_errors": self._tally.errors,
        }
        logs: Logs = {
            "reference": verdict.reference,
            "answer": clip(answer or "", 300),
            "grade": verdict.detail,
            "calls": clip("\n".join(self._tally.log), 2000),
        }
        final = observation if observation is not None else self._next_prompt(action)
        return StepResult.final(reward, stop, final, self.stop_condition, metrics, logs)


def _call_line(call: ToolCall | UnparsedToolCall, results: list[Message]) -> str:
    text = " | ".join(m["content"] for m in results)
    if isinstance(call, UnparsedToolCall):
        return f"(unreadable call) -> {clip(text, 200)}"
    return f"{call.function.name}({clip(call.function.arguments, 200)}) -> {clip(text, 200)}"
