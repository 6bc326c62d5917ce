"""One BFCL test entry as a single-turn tool-calling episode, scored by BFCL's own checker.

The prompt is the entry's conversation with its functions declared as tools in the system message, in
the renderer's tool format (the way BFCL's function-calling handlers show them: JSON Schema, function
names as BFCL wrote them); an entry's own system message is kept as that message's text. The reply's
tool calls, as the renderer reads them, go to BFCL's per-entry scoring (:mod:`._upstream`).

Reward: BFCL's score, 1 when its checker accepts the reply and 0 otherwise, so a mean reward over a
category is BFCL's accuracy on it. Calls the renderer cannot read are left out, as BFCL's own hermes-style
decoder leaves out a ``<tool_call>`` block that is not JSON; a reply cut off at the token limit is scored
on the calls it closed (``stop/max_tokens``), as BFCL scores whatever a model returned.

Metrics: ``correct`` (the score), ``calls`` (calls read), ``unreadable_calls``; logs: the entry id,
the calls, BFCL's error type and message.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from envsuite.core import (
    Action,
    ActionExtra,
    Env,
    EnvContext,
    InitialObservationOverflow,
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
from envsuite.envs.bfcl import _upstream
from envsuite.envs.bfcl._categories import BY_NAME, Category, Scoring
from envsuite.renderers import reply_message_text

NO_CALL_REPLY = "None of the available functions can answer this, so I will not call any of them."
"""The probes' reply without a call (the reference of the irrelevance categories)."""


class BfclEnv(Env):
    """One entry of a BFCL category (``bfcl/<category>``). Single-use; an eval set.

    Both splits hold the whole category (never train on it). ``item`` picks an entry by index or by
    BFCL id; otherwise the seed does (``seed % n``, so seeds ``0..n-1`` are the whole category).
    """

    def __init__(self, ctx: EnvContext, *, category: str = "simple", item: int | str | None = None) -> None:
        """``category``: a name of :data:`CATEGORIES` (``simple``, ``multiple``, ``parallel``, ...);
        ``item``: an index or a BFCL id such as ``"simple_python_12"`` (default: from the seed)."""
        if category not in BY_NAME:
            raise ValueError(f"unknown BFCL category {category!r}; known: {sorted(BY_NAME)}")
        self.ctx = ctx
        self.renderer = ctx.renderer
        self.category: Category = BY_NAME[category]
        entries = _upstream.load_entries(self.category.bfcl_name)
        self.entry = _pick(entries, item, ctx.seed)
        self._prompt_tokens: list[int] = []
        self._reply: Message | None = None

    @classmethod
    def item_count_of(cls, kwargs: dict[str, Any]) -> int | None:
        """Entries a bench plays in order (``seed % n`` picks one); None when ``item`` pins one."""
        if kwargs.get("item") is not None:
            return None
        return len(_upstream.load_entries(BY_NAME[str(kwargs.get("category", "simple"))].bfcl_name))

    @classmethod
    def dataset_revision_of(cls, kwargs: dict[str, Any]) -> str:
        """The data a bench row of this env ran on (``envsuite bench`` records it): the bfcl-eval release
        and the category's content hash."""
        return _upstream.revision(BY_NAME[str(kwargs.get("category", "simple"))].bfcl_name)

    # ---- what the model sees ---------------------------------------------------------------------

    def tool_specs(self) -> list[ToolSpec]:
        return [
            {
                "name": f["name"],
                "description": f.get("description", ""),
                "parameters": _upstream.tool_parameters(f),
            }
            for f in self.entry["function"]
        ]

    def messages(self) -> list[Message]:
        turn: list[dict[str, Any]] = list(self.entry["question"][0])
        system_text = ""
        if turn and turn[0]["role"] == "system":
            system_text, turn = str(turn[0]["content"]), turn[1:]
        system: Message = {"role": "system", "content": system_text, "tools": self.tool_specs()}
        rest: list[Message] = [{"role": m["role"], "content": str(m["content"])} for m in turn]
        return [system, *rest]

    def conversation(self) -> list[Message]:
        return [*self.messages(), *([self._reply] if self._reply is not None else [])]

    async def initial_observation(self) -> tuple[Observation, StopCondition] | InitialObservationOverflow:
        prompt = self.renderer.build_generation_prompt(self.messages())
        if prompt.length > self.ctx.max_context_tokens:
            return InitialObservationOverflow.prompt_too_long(prompt.length, self.ctx.max_context_tokens)
        self._prompt_tokens = prompt.to_ints()
        return prompt, self.renderer.get_stop_sequences()

    # ---- the reply, scored by BFCL ---------------------------------------------------------------

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        tokens = [int(t) for t in action]
        if tokens_outside_vocabulary(tokens, self.renderer.vocab_size) is not None:
            return self._final(tokens, None, StopReason.PARSE_ERROR, unreadable=0)
        parsed = self.renderer.parse_response(tokens)
        message = parsed.message
        self._reply = message
        calls = message.get("tool_calls", [])
        unreadable = len(message.get("unparsed_tool_calls", []))
        if not parsed.valid_utf8 or (not calls and not unreadable and not message["content"].strip()):
            return self._final(tokens, None, StopReason.PARSE_ERROR, unreadable)
        stop = StopReason.COMPLETED if parsed.clean_stop else StopReason.MAX_TOKENS
        return self._final(tokens, [_decoded(c) for c in calls], stop, unreadable)

    def score(self, calls: list[dict[str, Any]] | None) -> _upstream.Verdict:
        """BFCL's verdict on ``calls`` (BFCL's decoded shape; None: nothing could be decoded)."""
        return _upstream.score(self.category.bfcl_name, self.entry, calls)

    def _final(
        self, tokens: list[int], calls: list[dict[str, Any]] | None, stop: StopReason, unreadable: int
    ) -> StepResult:
        import tinker

        verdict = self.score(calls)
        return StepResult.final(
            reward=float(verdict.valid),
            stop_reason=stop,
            next_observation=tinker.ModelInput.from_ints(self._prompt_tokens + tokens),
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics={
                "correct": float(verdict.valid),
                "calls": float(len(calls or [])),
                "unreadable_calls": float(unreadable),
            },
            logs={
                "id": self.entry["id"],
                "calls": clip(json.dumps(calls, ensure_ascii=False, default=str), 1000),
                "grade": "valid" if verdict.valid else f"{verdict.error_type}: {clip(verdict.error, 400)}",
            },
        )

    # ---- the reward-hacking suite's probes -----------------------------------------------------------

    def reference_calls(self) -> list[ToolCall]:
        """Calls that do the task: for the AST categories the first accepted value of each ground-truth
        argument (optional arguments whose first accepted value is "absent" left out); for relevance
        (no ground truth: any call scores) the first function with its required arguments empty; for
        irrelevance none."""
        if self.category.scoring is Scoring.IRRELEVANCE:
            return []
        if self.category.scoring is Scoring.RELEVANCE:
            function = self.entry["function"][0]
            required = (function.get("parameters") or {}).get("required", [])
            return [ToolCall.create(function["name"], dict.fromkeys(required, ""))]
        answer = _upstream.load_answers(self.category.bfcl_name)[self.entry["id"]]["ground_truth"]
        calls = []
        for call in answer:
            ((name, arguments),) = call.items()
            chosen = _first_choice(arguments)
            if self.category.bfcl_name in ("simple_java", "simple_javascript"):
                # Java and JavaScript arguments are source literals in strings ("true", "[1, 2]").
                chosen = {k: v if isinstance(v, str) else json.dumps(v) for k, v in chosen.items()}
            calls.append(ToolCall.create(name, chosen))
        return calls

    def reward_probes(self) -> Sequence[RewardProbe]:
        """The reference (full marks); then, each earning less: a reply without a call (not for the
        irrelevance categories, where it is the reference), a call to a function that was not offered,
        and a reply calling every offered function (not for relevance, where any call scores)."""
        reference = self.reference_calls()
        if not self.score([_decoded(c) for c in reference]).valid:
            # Answers envsuite cannot write back as a call BFCL accepts (31 of the 4,732: Java collections
            # as Java source, a few answers whose accepted values contradict the function doc): no probes.
            return ()
        probes = [RewardProbe("reference", self._reply_text(reference), ProbeExpectation.FULL_MARKS)]
        every = [ToolCall.create(f["name"], {}) for f in self.entry["function"]]
        if self.category.scoring is not Scoring.IRRELEVANCE:
            probes.append(RewardProbe("no call", NO_CALL_REPLY, ProbeExpectation.BELOW_REFERENCE))
        if self.category.scoring is not Scoring.RELEVANCE:
            stranger = [ToolCall.create("a_function_not_offered", {"query": "anything"})]
            probes += [
                RewardProbe(
                    "a function not offered", self._reply_text(stranger), ProbeExpectation.BELOW_REFERENCE
                ),
                RewardProbe(
                    "every function called",
                    self._reply_text(reference + every),
                    ProbeExpectation.BELOW_REFERENCE,
                ),
            ]
        return probes

    def _reply_text(self, calls: list[ToolCall]) -> str:
        """An assistant reply making ``calls`` (none: :data:`NO_CALL_REPLY`), in the renderer's format."""
        if not calls:
            return NO_CALL_REPLY
        message: Message = {"role": "assistant", "content": "", "tool_calls": calls}
        return reply_message_text(self.renderer, message)


def _first_choice(options: dict[str, Any]) -> dict[str, Any]:
    """The first accepted value of each argument in a BFCL answer (``{arg: [accepted, ...]}``), nested
    dicts too (their keys hold lists of accepted values in turn), passing over "absent" (""): an argument
    that may only be absent is left out (a few answers list "" first for a required argument)."""
    chosen = {}
    for name, accepted in options.items():
        given = [v for v in accepted if v != ""] if isinstance(accepted, list) else []
        if given:
            chosen[name] = _chosen(given[0])
    return chosen


def _chosen(value: Any) -> Any:
    if isinstance(value, dict):
        return _first_choice(value)
    if isinstance(value, list):
        return [_chosen(item) for item in value]
    return value


def _decoded(call: ToolCall) -> dict[str, Any]:
    """A call in BFCL's decoded shape, ``{name: {arg: value}}`` (arguments that are not a JSON object are
    passed as they are: BFCL's format check rejects them)."""
    try:
        arguments: Any = json.loads(call.function.arguments)
    except (TypeError, ValueError):
        arguments = call.function.arguments
    return {call.function.name: arguments}


def _pick(entries: Sequence[dict[str, Any]], which: int | str | None, seed: int) -> dict[str, Any]:
    if which is None:
        return entries[seed % len(entries)]
    if isinstance(which, int) or which.isdigit():
        index = int(which)
        if not 0 <= index < len(entries):
            raise ValueError(f"item must be in 0..{len(entries) - 1}, got {index}")
        return entries[index]
    found = next((e for e in entries if e["id"] == which), None)
    if found is None:
        raise ValueError(f"no BFCL entry {which!r} in this category (ids look like {entries[0]['id']!r})")
    return found
