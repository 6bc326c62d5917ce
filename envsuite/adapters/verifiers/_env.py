"""Installed verifiers (0.4) environments as catalog envs: the ``verifiers:<taskset id>`` entry.

``envsuite.make_env("verifiers:my_env", seed=3)`` (and ``envsuite check``, ``train``, ``bench``) gives a
:class:`VerifiersEnv`: the taskset's task number ``seed`` (modulo the taskset's size), its prompt rendered
with the policy's renderer, one reply, graded by the task's own ``@reward`` functions (and plugged
judges) through ``Task.score`` with no runtime, so only grading that runs offline counts: signals that
need the task's sandbox are skipped by verifiers itself, and an env whose every reward needs one says
so (``env_error``) instead of paying 0. The reward is the trace's weighted total (``Trace.reward``).

Single-turn only: a verifiers harness (the agent program with its tools) is what makes a verifiers
episode multi-turn, and a catalog env's policy is the model itself, so tool servers are not wired in.
"""

from __future__ import annotations

import functools
from typing import Any

import verifiers.v1 as vf
from verifiers.v1.graph import MessageNode
from verifiers.v1.trace import AgentInfo, TraceTask
from verifiers.v1.utils.loaders import load_taskset, taskset_config_type

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

SCHEME = "verifiers"


@functools.cache
def _tasks(taskset_id: str) -> tuple[vf.Task, ...]:
    """The taskset's tasks, loaded once per process (a bounded taskset; an infinite one is refused)."""
    config = taskset_config_type(taskset_id).model_validate({"id": taskset_id})
    taskset = load_taskset(config)
    if not taskset.bounded:
        raise ValueError(f"verifiers taskset {taskset_id!r} is infinite; a catalog env needs a bounded one")
    tasks = tuple(taskset)
    if not tasks:
        raise ValueError(f"verifiers taskset {taskset_id!r} has no tasks")
    return tasks


def _opening(data: vf.TaskData) -> list[Message]:
    messages: list[Message] = []
    if data.system_prompt:
        messages.append(Message(role="system", content=data.system_prompt))
    if isinstance(data.prompt, str):
        messages.append(Message(role="user", content=data.prompt))
    elif data.prompt is not None:
        messages.extend(Message(role=str(m.role), content=_text(m.content)) for m in data.prompt)
    return messages


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: the text ones, joined
        return "".join(str(getattr(part, "text", "") or "") for part in content)
    return ""


class VerifiersEnv(Env):
    """One single-turn episode of a verifiers taskset's task (single-use, like every envsuite env)."""

    def __init__(self, ctx: EnvContext, *, taskset: str) -> None:
        self.ctx = ctx
        self.taskset_id = taskset
        tasks = _tasks(taskset)
        self.task = tasks[ctx.seed % len(tasks)]
        self._messages = _opening(self.task.data)
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
        trace = self._trace(text)
        await self.task.score(trace)  # no runtime: verifiers skips the signals that need one
        if not trace.rewards and not trace.errors:
            error = (
                f"verifiers taskset {self.taskset_id!r}: every reward of its task needs a runtime (sandbox)"
            )
            return StepResult.final(
                0.0, StopReason.ENV_ERROR, self._prompt(), self._stop, logs={"error": error}
            )
        metrics = {f"verifiers/{k}": float(v) for k, v in trace.metrics.items() if v is not None}
        return StepResult.final(
            trace.reward, StopReason.COMPLETED, self._prompt(), self._stop, metrics=metrics
        )

    def conversation(self) -> list[Message]:
        return list(self._messages)

    def _prompt(self) -> Observation:
        return self.ctx.renderer.build_generation_prompt(self._messages[: len(_opening(self.task.data))])

    def _trace(self, reply: str) -> vf.Trace:
        """A verifiers trace of this episode: the opening, then the reply (what its rewards read)."""
        data = self.task.data
        nodes: list[MessageNode] = []
        for message in _opening(data):
            nodes.append(MessageNode(parent=len(nodes) - 1 if nodes else None, message=_wire(message)))
        nodes.append(
            MessageNode(
                parent=len(nodes) - 1 if nodes else None,
                message=vf.AssistantMessage(content=reply),
                sampled=True,
            )
        )
        task = TraceTask(type=type(self.task).__name__, data=data, key=self.task.key, hash=self.task.hash)
        return vf.Trace(task=task, agent=AgentInfo(config=vf.AgentConfig()), nodes=nodes)


def _wire(message: Message) -> Any:
    content = str(message["content"])
    if message["role"] == "system":
        return vf.SystemMessage(content=content)
    if message["role"] == "assistant":
        return vf.AssistantMessage(content=content)
    return vf.UserMessage(content=content)


def verifiers_spec(env_id: str) -> EnvSpec:
    """The catalog spec of ``verifiers:<taskset id>`` (the taskset's module must be importable)."""
    taskset = env_id.split(":", 1)[1].removesuffix("-v0")  # results store a scheme id as version 0
    spec = EnvSpec(
        id=f"{SCHEME}:{taskset}",
        entry_point=VerifiersEnv,
        kwargs={"taskset": taskset},
        kind=EnvKind.SINGLE_TURN,
        description=f"the verifiers taskset {taskset!r}, graded by its own offline rewards",
        reward_range=(0.0, 1.0),
        tags=(SCHEME,),
    )
    try:
        _tasks(taskset)
    except (ImportError, TypeError, ValueError, AttributeError) as exc:
        return EnvSpec(**{**spec.__dict__, "unavailable": f"verifiers taskset {taskset!r}: {exc}"})
    return spec
