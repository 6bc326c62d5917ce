"""One BFCL multi-turn entry as a multi-turn tool episode on BFCL's own simulated APIs, scored by BFCL.

The episode follows BFCL's function-calling inference loop (``BaseHandler.inference_multi_turn_FC``): the
entry's user turns come one at a time; within a turn the model calls functions of the involved APIs (a
file system, a trading bot, ...), each call is executed on this episode's instances and its result
shown, until a reply holds no readable call, which ends the turn. A turn that adds held-out functions
(``multi_turn_miss_func``) adds them to the declared tools with BFCL's own user message. More than
BFCL's step limit (20) in one turn forces the episode to quit, and BFCL fails such an entry.

Reward: BFCL's verdict on the whole transcript (:func:`._multi_upstream.score`: its checker re-runs the
calls on fresh instances beside the ground truth and compares states and results after every turn),
1 or 0, so a category's mean reward is BFCL's multi-turn accuracy on it.

Metrics: ``correct``, ``calls``, ``turns`` (user turns reached), ``unreadable_calls``; logs: the entry
id, the last calls, BFCL's error type and message.
"""

from __future__ import annotations

import json
from typing import Any

from envsuite.core import (
    Action,
    ActionExtra,
    Env,
    EnvContext,
    InitialObservationOverflow,
    Logs,
    Message,
    Observation,
    ProbeExpectation,
    RewardProbe,
    StepResult,
    StopCondition,
    StopReason,
    ToolCall,
    ToolSpec,
    tokens_outside_vocabulary,
)
from envsuite.envs._problem import clip
from envsuite.envs.bfcl import _multi_upstream as multi
from envsuite.envs.bfcl import _upstream
from envsuite.envs.bfcl._env import NO_CALL_REPLY, _pick
from envsuite.renderers import reply_message_text
from envsuite.tools import error_message

MULTI_TURN_CATEGORIES = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
"""BFCL v4's multi-turn categories (200 entries each in bfcl-eval 2026.3.23)."""


class BfclMultiTurnEnv(Env):
    """One entry of a BFCL multi-turn category (``bfcl/<category>``). Single-use; an eval set (both
    splits hold the whole category). ``item`` picks an entry by index or BFCL id, else ``seed % n``."""

    def __init__(
        self, ctx: EnvContext, *, category: str = "multi_turn_base", item: int | str | None = None
    ) -> None:
        if category not in MULTI_TURN_CATEGORIES:
            raise ValueError(
                f"unknown BFCL multi-turn category {category!r}; known: {list(MULTI_TURN_CATEGORIES)}"
            )
        self.ctx = ctx
        self.renderer = ctx.renderer
        self.category = category
        self.entry: dict[str, Any] = _pick(_upstream.load_entries(category), item, ctx.seed)
        self.functions: list[dict[str, Any]] = list(self.entry["function"])
        self.session: multi.ApiSession | None = None
        self._conversation: list[Message] = []
        self._prompt: Observation | None = None
        self._turn = 0
        self._steps = 0
        self._transcript: list[list[list[str] | None]] = [[]]
        self._calls = 0
        self._unreadable = 0
        self._log: list[str] = []

    @classmethod
    def item_count_of(cls, kwargs: dict[str, Any]) -> int | None:
        """Entries a bench plays in order (``seed % n`` picks one); None when ``item`` pins one."""
        if kwargs.get("item") is not None:
            return None
        return len(_upstream.load_entries(str(kwargs.get("category", "multi_turn_base"))))

    @classmethod
    def dataset_revision_of(cls, kwargs: dict[str, Any]) -> str:
        """The data a bench row of this env ran on: the bfcl-eval release and the category's content hash."""
        return _upstream.revision(str(kwargs.get("category", "multi_turn_base")))

    # ---- what the model sees ---------------------------------------------------------------------

    def tool_specs(self) -> list[ToolSpec]:
        return [
            {
                "name": f["name"],
                "description": f.get("description", ""),
                "parameters": _upstream.tool_parameters(f),
            }
            for f in self.functions
        ]

    def conversation(self) -> list[Message]:
        return list(self._conversation)

    def _turn_messages(self, turn: int) -> list[Message]:
        """The user messages opening ``turn``; a turn that adds held-out functions adds them here."""
        added = self.entry.get("missed_function", {}).get(str(turn))
        if added:
            self.functions += added
            self._conversation[0] = {**self._conversation[0], "tools": self.tool_specs()}
            return [{"role": "user", "content": multi.added_functions_prompt()}]
        return [{"role": str(m["role"]), "content": str(m["content"])} for m in self.entry["question"][turn]]

    async def initial_observation(self) -> tuple[Observation, StopCondition] | InitialObservationOverflow:
        self.session = multi.ApiSession(self.entry, self.category)
        self._conversation = [{"role": "system", "content": "", "tools": self.tool_specs()}]
        self._conversation += self._turn_messages(0)
        prompt = self.renderer.build_generation_prompt(self._conversation)
        if prompt.length > self.ctx.max_context_tokens:
            return InitialObservationOverflow.prompt_too_long(prompt.length, self.ctx.max_context_tokens)
        self._prompt = prompt
        return prompt, self.renderer.get_stop_sequences()

    # ---- a reply: calls run on the APIs, or the turn ends --------------------------------------------

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        if self._prompt is None or self.session is None:
            raise RuntimeError("call initial_observation() before step()")
        tokens = [int(t) for t in action]
        readable = tokens_outside_vocabulary(tokens, self.renderer.vocab_size) is None
        parsed = self.renderer.parse_response(tokens) if readable else None
        message: Message = parsed.message if parsed is not None else {"role": "assistant", "content": ""}
        self._conversation.append(message)
        calls = message.get("tool_calls", []) if parsed is not None and parsed.valid_utf8 else []
        unreadable = message.get("unparsed_tool_calls", [])
        self._unreadable += len(unreadable)
        if not calls:
            # BFCL: an empty or undecodable step ends the turn. Each unreadable call still gets its
            # error message first (every call is answered; BFCL's history shows no result for it).
            self._conversation += [
                error_message(f"the call could not be read: {u.error}") for u in unreadable
            ]
            self._transcript[-1].append(None)
            return self._next_turn(tokens)
        self._run(calls)
        self._steps += 1
        if self._steps > multi.step_limit():
            return self._final(tokens, StopReason.MAX_TURNS)  # BFCL's forced quit: the entry fails
        return self._continue(
            tokens, self.renderer.build_next_prompt(self._prompt, tokens, self._conversation)
        )

    def _run(self, calls: list[ToolCall]) -> None:
        assert self.session is not None
        known = list(self.session.methods)
        strings = []
        for call in calls:
            name, arguments = call.function.name, _arguments(call)
            strings.append(multi.call_string(name, arguments, known))
            result = self.session.run(name, arguments)
            self._calls += 1
            self._log.append(f"{name}({clip(call.function.arguments, 120)}) -> {clip(result, 120)}")
            tool: Message = {"role": "tool", "content": result, "name": name}
            if call.id:
                tool["tool_call_id"] = call.id
            self._conversation.append(tool)
        self._transcript[-1].append(strings)

    def _next_turn(self, tokens: list[int]) -> StepResult:
        assert self._prompt is not None
        self._turn += 1
        if self._turn >= len(self.entry["question"]):
            return self._final(tokens, StopReason.COMPLETED)
        self._steps = 0
        self._transcript.append([])
        tools_before = len(self.functions)
        self._conversation += self._turn_messages(self._turn)
        if len(self.functions) != tools_before:  # the declared tools changed: the prompt is rebuilt
            return self._continue(tokens, self.renderer.build_generation_prompt(self._conversation))
        return self._continue(
            tokens, self.renderer.build_next_prompt(self._prompt, tokens, self._conversation)
        )

    def _continue(self, tokens: list[int], observation: Observation) -> StepResult:
        if observation.length > self.ctx.max_context_tokens:
            return self._final(tokens, StopReason.CONTEXT_OVERFLOW)
        self._prompt = observation
        logs: Logs = {"calls": clip("\n".join(self._log[-4:]), 1000)}
        return StepResult(0.0, False, observation, self.renderer.get_stop_sequences(), {}, logs)

    def _final(self, tokens: list[int], stop: StopReason) -> StepResult:
        import tinker

        verdict = multi.score(self.category, self.entry, multi.Transcript(self._transcript))
        prompt = self._prompt.to_ints() if self._prompt is not None else []
        return StepResult.final(
            reward=float(verdict.valid),
            stop_reason=stop,
            next_observation=tinker.ModelInput.from_ints(prompt + tokens),
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics={
                "correct": float(verdict.valid),
                "calls": float(self._calls),
                "turns": float(min(self._turn + 1, len(self.entry["question"]))),
                "unreadable_calls": float(self._unreadable),
            },
            logs={
                "id": self.entry["id"],
                "calls": clip("\n".join(self._log[-6:]), 1000),
                "grade": "valid" if verdict.valid else f"{verdict.error_type}: {clip(verdict.error, 400)}",
            },
        )

    # ---- the reward-hacking suite's probes -----------------------------------------------------------

    def reference_replies(self) -> list[str]:
        """The ground truth as replies: per turn, one reply making its calls (if any), then a reply
        without a call that ends the turn."""
        session = multi.ApiSession(self.entry, self.category)
        replies = []
        for turn in multi.load_answers(self.category)[self.entry["id"]]:
            if turn:
                parsed = [multi.ground_truth_calls(c, session) for c in turn]
                calls = [ToolCall.create(n, a, f"gt_{i}") for i, (n, a) in enumerate(parsed)]
                replies.append(self._reply_text(calls))
            replies.append(NO_CALL_REPLY)
        return replies

    def reward_probes(self) -> list[RewardProbe]:
        """The ground truth (full marks); each earning less: no call in any turn, the first turn done
        and nothing after, and a call to a function the APIs lack in every turn."""
        reference = self.reference_replies()
        stranger = self._reply_text([ToolCall.create("a_function_not_offered", {"query": "anything"})])
        first_turn = reference[: reference.index(NO_CALL_REPLY) + 1]
        turns = len(self.entry["question"])
        return [
            RewardProbe("reference", reference[0], ProbeExpectation.FULL_MARKS, tuple(reference[1:])),
            RewardProbe("no call", NO_CALL_REPLY, ProbeExpectation.BELOW_REFERENCE, (NO_CALL_REPLY,) * turns),
            RewardProbe(
                "first turn only", first_turn[0], ProbeExpectation.BELOW_REFERENCE, tuple(first_turn[1:])
            ),
            RewardProbe(
                "a function not offered",
                stranger,
                ProbeExpectation.BELOW_REFERENCE,
                (NO_CALL_REPLY, *(x for _ in range(turns - 1) for x in (stranger, NO_CALL_REPLY))),
            ),
        ]

    def _reply_text(self, calls: list[ToolCall]) -> str:
        message: Message = {"role": "assistant", "content": "", "tool_calls": calls}
        return reply_message_text(self.renderer, message)


def _arguments(call: ToolCall) -> object:
    try:
        return json.loads(call.function.arguments)
    except (TypeError, ValueError):
        return call.function.arguments
