"""Any Inspect task as a catalog env: the ``inspect:MODULE/TASK`` (or ``inspect:FILE.py@TASK``) entry.

Episode ``seed`` is the task's sample ``seed % len(samples)``: its input (a system message and prompt
template the task's solver sets, a multiple choice question as Inspect's ``multiple_choice`` poses it,
chat-message inputs turn by turn) rendered with the policy's renderer, then one reply, scored by the
task's own scorer. The first scorer's value is the reward, mapped as Inspect's ``value_to_float`` maps
it (C 1, P 0.5, I 0, numbers as they are). A model-graded scorer names its grader as the env's
``answerer_identity``, which the leaderboard keeps as the row's partner, so rows judged by different
graders never pool.
"""

from __future__ import annotations

import math
import re
from typing import Any

from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser, ModelOutput
from inspect_ai.scorer import Score, Target, value_to_float
from inspect_ai.solver import TaskState

from envsuite.adapters.inspect_tasks._load import (
    SCHEME,
    LoadedTask,
    UnsupportedInspectTask,
    load_task,
    opening,
    task_ref,
)
from envsuite.core import (
    ActionExtra,
    Env,
    EnvContext,
    InitialObservationOverflow,
    Message,
    Observation,
    StepResult,
    StopReason,
    tokens_outside_vocabulary,
)
from envsuite.registration import EnvKind, EnvSpec

_TO_FLOAT = value_to_float()
_ANSWER = re.compile(r"ANSWER\s*:\s*([A-Za-z])")


class InspectTaskEnv(Env):
    """One single-turn episode of an Inspect task's sample (single-use, like every envsuite env)."""

    def __init__(self, ctx: EnvContext, *, task: str) -> None:
        self.ctx = ctx
        self.task: LoadedTask = load_task(task)
        self.sample_index = ctx.seed % len(self.task.samples)
        self.sample = self.task.samples[self.sample_index]
        self.answerer_identity = f"grader:{self.task.grader}" if self.task.grader else ""
        """The grading model, as a partner is named (empty: nothing model-graded)."""
        self.dataset_hash = self.task.dataset_hash
        self._opening = opening(self.task, self.sample)
        self._messages = list(self._opening)
        self._stop = ctx.renderer.get_stop_sequences()

    async def initial_observation(
        self,
    ) -> tuple[Observation, list[int] | list[str]] | InitialObservationOverflow:
        prompt = self._prompt()
        if prompt.length > self.ctx.max_context_tokens:
            return InitialObservationOverflow.prompt_too_long(prompt.length, self.ctx.max_context_tokens)
        return prompt, self._stop

    async def step(self, action: list[int], *, extra: ActionExtra | None = None) -> StepResult:
        outside = tokens_outside_vocabulary(action, self.ctx.renderer.vocab_size)
        if outside is not None:
            return StepResult.final(
                0.0, StopReason.PARSE_ERROR, self._prompt(), self._stop, logs={"error": outside}
            )
        text = str(self.ctx.renderer.parse_response(list(action)).message["content"])
        self._messages.append(Message(role="assistant", content=text))
        score = await self.score(text)
        reward = score_reward(score)
        return StepResult.final(
            reward,
            StopReason.COMPLETED,
            self._prompt(),
            self._stop,
            metrics={"inspect/score": reward},
            logs={"answer": str(score.answer or "")[:200]},
        )

    async def score(self, reply: str) -> Score:
        """The task's first scorer on ``reply`` to this sample (also what ``bench --rescore`` calls)."""
        state = self._state(reply)
        score = await self.task.scorers[0](state, Target(self.sample.target))
        if score is None:
            return Score(value=0.0, explanation="the scorer returned no score")
        return score

    @classmethod
    def dataset_revision_of(cls, kwargs: dict[str, Any]) -> str:
        """What the leaderboard records as the data a run used: the task's samples' content hash."""
        return f"sha256:{load_task(str(kwargs['task'])).dataset_hash}"

    def conversation(self) -> list[Message]:
        return list(self._messages)

    def _prompt(self) -> Observation:
        return self.ctx.renderer.build_generation_prompt(self._opening)

    def _state(self, reply: str) -> TaskState:
        messages: list[Any] = [
            ChatMessageSystem(content=str(m["content"]))
            if m["role"] == "system"
            else ChatMessageAssistant(content=str(m["content"]))
            if m["role"] == "assistant"
            else ChatMessageUser(content=str(m["content"]))
            for m in self._messages
        ]
        state = TaskState(
            model="envsuite/policy",  # type: ignore[arg-type]  # Inspect takes the name as a string too
            sample_id=self.sample.id or self.sample_index,
            epoch=1,
            input=self.sample.input,
            messages=messages,
            target=Target(self.sample.target),
            choices=self.sample.choices,
            output=ModelOutput.from_content("envsuite/policy", reply),
            metadata=dict(self.sample.metadata or {}),
        )
        if self.sample.choices:  # marked as Inspect's multiple_choice solver marks them, for choice()
            picked = _ANSWER.search(reply)
            for index in range(len(self.sample.choices)):
                chosen = picked is not None and ord(picked.group(1).upper()) - ord("A") == index
                state.choices.mark_choice(index, chosen)
        return state


def score_reward(score: Score) -> float:
    """A score's value as a reward, as ``value_to_float`` maps it; a value it cannot read (a grader's
    unparseable verdict, a dict) pays 0 rather than NaN."""
    if isinstance(score.value, dict | list):
        return 0.0
    reward = _TO_FLOAT(score.value)
    return reward if math.isfinite(reward) else 0.0


def inspect_spec(env_id: str) -> EnvSpec:
    """The catalog spec of ``inspect:REF`` (the task's module or file must load)."""
    ref = task_ref(env_id)
    spec = EnvSpec(
        id=f"{SCHEME}:{ref}",
        entry_point=InspectTaskEnv,
        kwargs={"task": ref},
        kind=EnvKind.SINGLE_TURN,
        description=f"the Inspect task {ref!r}, scored by its own scorer",
        reward_range=(0.0, 1.0),
        tags=(SCHEME,),
    )
    try:
        load_task(ref)
    except (ImportError, TypeError, ValueError, AttributeError, UnsupportedInspectTask) as exc:
        hint = (
            " (Inspect Evals' tasks need `pip install inspect_evals`)"
            if ref.startswith("inspect_evals")
            else ""
        )
        return EnvSpec(**{**spec.__dict__, "unavailable": f"Inspect task {ref!r}: {exc}{hint}"})
    return spec
