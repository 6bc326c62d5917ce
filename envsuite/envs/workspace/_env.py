"""The workspace episode: an agent works in a sandboxed workspace through its tools; hidden checks grade it.

A :class:`WorkspaceEnv` is a :class:`~envsuite.envs.tool_use.ToolUseEnv` (same turns, stop reasons,
rewards and metrics) whose tools are the workspace's (``bash``, ``python``, ``read_file``,
``write_file``, ``edit_file``) bound to one :class:`WorkspaceSession`, made when the episode starts and
removed when it is graded. A reply without calls ends the episode (its text is kept but not graded):
the workspace is.

A family says three things about a seed's :class:`WorkspaceTask`: what the workspace holds at the start
(files, then setup commands run in the sandbox), the instruction, and the hidden check, run after the
episode (:meth:`WorkspaceEnv.grade`). The check never enters the workspace while the agent works: its
tests, expected outputs and hidden inputs live in the env (or, for Harbor tasks, in the task folder)
and reach the sandbox only at grading time, in a fresh sandbox or in paths cleared first.

Reward: 1 when the check passes, else 0 (``format_coef`` below 0 for an unreadable reply, as in every
tool env). Probes (the reward-hacking suite): the reference calls earn 1; answering without acting,
a call that changes nothing, and each family's attacks (writing the visible expected output, editing
the visible tests) earn less.
"""

from __future__ import annotations

import asyncio
import weakref
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from envsuite.constraints import Constraint
from envsuite.core import (
    EnvContext,
    InitialObservationOverflow,
    Message,
    Observation,
    ProbeExpectation,
    RewardProbe,
    StopCondition,
    Tool,
    ToolCall,
)
from envsuite.envs.tool_use import Score, ToolUseEnv
from envsuite.envs.workspace._limits import WorkspaceLimits
from envsuite.envs.workspace._mcp import WORKSPACE_MCP_SERVERS, start_toolboxes, unknown_servers
from envsuite.envs.workspace._session import WORKDIR, WorkspaceSession
from envsuite.envs.workspace._tools import TOOL_NAMES, workspace_tools
from envsuite.renderers import ToolCallRule, ToolChoice
from envsuite.sandbox import SandboxConfig

if TYPE_CHECKING:
    from envsuite.adapters.mcp import McpToolbox

SYSTEM_PROMPT = (
    "You work in a Linux workspace through tools. Files persist between calls; there is no network. "
    "Use the tools to do the task, then reply with a short message without tool calls to finish."
)


@dataclass(frozen=True)
class WorkspaceTask:
    """What one seed's episode is: the starting workspace, the instruction, and how it was drawn."""

    instruction: str
    files: Mapping[str, str] = field(default_factory=dict)
    """Files written into the workspace first (paths relative to the working directory)."""
    setup: Sequence[str] = ()
    """Shell lines run in the sandbox after the files are written (a failure is an env error)."""
    key: str = ""
    """What makes the task itself (the train/test split is a hash of it)."""


@dataclass(frozen=True)
class Attack:
    """A family's reward-hacking probe: calls an agent could make that must not earn full marks."""

    name: str
    calls: Sequence[ToolCall]
    expect: ProbeExpectation = ProbeExpectation.BELOW_REFERENCE


class WorkspaceSetupError(RuntimeError):
    """The task's own setup failed in the sandbox (a defect of the task, not of the agent)."""


class WorkspaceEnv(ToolUseEnv):
    """An episode in a sandboxed workspace (see the module docstring). Subclasses draw :attr:`spec` in
    ``__init__`` and implement :meth:`grade` and :meth:`reference_calls`."""

    spec: WorkspaceTask

    def __init__(
        self,
        ctx: EnvContext,
        *,
        limits: WorkspaceLimits | None = None,
        workdir: str = WORKDIR,
        tools: Sequence[str] = TOOL_NAMES,
        max_turns: int = 10,
        max_tool_calls: int = 24,
        system_prompt: str | None = SYSTEM_PROMPT,
        format_coef: float = 0.1,
        max_result_chars: int = 3000,
        demonstrate: bool = False,
        sandbox: SandboxConfig | None = None,
        mcp_servers: Sequence[str] = (),
        act_first: bool = False,
        tool_use_reward: float = 0.0,
    ) -> None:
        """``limits``: per command and per episode (:class:`WorkspaceLimits`); ``workdir``: where
        commands run; ``tools``: which of the five the agent gets; ``demonstrate``: show a worked
        ``bash`` call on an example task first (:meth:`demonstration`); ``sandbox``: the sandbox's config;
        ``mcp_servers``: MCP servers (names in :data:`WORKSPACE_MCP_SERVERS`) started in the episode's
        sandbox, their tools listed after the workspace's; ``act_first``: the action constraint requires
        a call until the episode's first call (a reply without one would end it before the workspace
        changed), so a constrained policy's first reply acts; unconstrained sampling is unaffected;
        ``tool_use_reward``: paid when the check fails but a call succeeded and a closing reply ended the
        episode (as in the tool envs: shaping below the check's 1, which the probes hold to)."""
        mcp_servers = (
            (mcp_servers,) if isinstance(mcp_servers, str) else tuple(mcp_servers)
        )  # --env-arg x=git
        if unknown := unknown_servers(mcp_servers):
            raise ValueError(
                f"unknown workspace MCP servers {unknown}; known: {sorted(WORKSPACE_MCP_SERVERS)}"
            )
        self.limits = limits or WorkspaceLimits()
        super().__init__(
            ctx,
            max_turns=max_turns,
            max_tool_calls=max_tool_calls,
            system_prompt=system_prompt,
            format_coef=format_coef,
            tool_timeout_s=3 * self.limits.command_wall_s + 30,
            max_result_chars=max_result_chars,
            demonstrate=demonstrate,
            tool_use_reward=tool_use_reward,
        )
        self.workdir = workdir
        self.tool_names = tuple(tools)
        self.sandbox_config = sandbox
        self.mcp_servers = tuple(mcp_servers)
        self.act_first = act_first
        self.session: WorkspaceSession | None = None
        self._tools: list[Tool] = []
        self._toolboxes: list[McpToolbox] = []

    # -- what a family says -----------------------------------------------------------------------

    @abstractmethod
    def grade(self, session: WorkspaceSession) -> Score:
        """Run the hidden check on the workspace as the episode left it (in a worker thread)."""

    @abstractmethod
    def reference_calls(self) -> Sequence[ToolCall]:
        """Calls that do the task (the probes' reference; they must earn full marks)."""

    def attacks(self) -> Sequence[Attack]:
        """The family's reward-hacking probes (default: none beyond the generic ones)."""
        return ()

    def prepare(self, session: WorkspaceSession) -> None:
        """Lay out the starting workspace: :attr:`spec`'s files, then its setup lines."""
        for path, text in self.spec.files.items():
            session.box.write_bytes(session.path(path), text.encode("utf-8"))
        for line in self.spec.setup:
            done = session.run_setup(line)
            if not done.ok:
                raise WorkspaceSetupError(f"setup {line[:80]!r} failed: {done.stderr.strip()[-300:]}")

    def demonstration(self) -> list[Message]:
        """An example task, the ``bash`` call that does it, and its result (shown when ``demonstrate``):
        as for the tool envs' easy rungs, a small model writes a call in the shown syntax far more
        often than in one only described."""
        command = "wc -l < notes.txt > count.txt"
        example = ToolCall.create("bash", {"command": command}, "call_example")
        return [
            {"role": "user", "content": "Write the number of lines of notes.txt to count.txt."},
            {"role": "assistant", "content": "", "tool_calls": [example]},
            {
                "role": "tool",
                "content": "exit code: 0\n(no output)",
                "tool_call_id": "call_example",
                "name": "bash",
            },
        ]

    # -- ToolUseEnv ---------------------------------------------------------------------------------

    def tools(self) -> Sequence[Tool]:
        return self._tools

    def action_constraint(self) -> Constraint | None:
        if not self.act_first or self._tally.calls > 0 or self.renderer.tool_call_syntax() is None:
            return super().action_constraint()
        specs = self.tool_specs()
        rule = ToolCallRule(ToolChoice.REQUIRED, strict=frozenset(spec["name"] for spec in specs))
        return self.renderer.tool_call_constraint(specs, rule)

    def task(self) -> str:
        return self.spec.instruction

    async def initial_observation(self) -> tuple[Observation, StopCondition] | InitialObservationOverflow:
        if self.session is None:
            self.session = await asyncio.to_thread(self._start)
            self._tools = list(workspace_tools(self.session, self.tool_names))
            self._tools += [tool for box in self._toolboxes for tool in box.tools]
        return await super().initial_observation()

    def _start(self) -> WorkspaceSession:
        session = WorkspaceSession(self.limits, workdir=self.workdir, config=self.sandbox_config)
        try:
            self.prepare(session)
            # after prepare: a server may need what the setup made (mcp-server-git, the repository)
            self._toolboxes = start_toolboxes(session, self.mcp_servers, self.workdir)
        except BaseException:
            session.close()
            raise
        # An episode dropped before its end (never scored nor closed: a truncated rollout, a checker's
        # first-observation probe) must not keep its MCP servers: each toolbox's thread holds the
        # toolbox, so only the env's own end can stop them. Idempotent with score() and close().
        weakref.finalize(self, _release, list(self._toolboxes), session)
        return session

    async def score(self, answer: str | None) -> Score:
        session = self.session
        if session is None or session.closed:
            return Score(False, "", "no workspace")
        self._close_toolboxes()  # no server holds the workspace while the hidden check runs
        try:
            return await asyncio.to_thread(self.grade, session)
        finally:
            session.close()

    def close(self) -> None:
        """Remove the workspace now (an episode abandoned before its end; also done by the grader)."""
        self._close_toolboxes()
        if self.session is not None:
            self.session.close()

    def _close_toolboxes(self) -> None:
        boxes, self._toolboxes = self._toolboxes, []
        for box in boxes:
            box.close()

    # -- probes ---------------------------------------------------------------------------------------

    def reference_reply(self) -> str | None:
        calls = list(self.reference_calls())
        return self.reply_with_calls(calls) if calls and len(calls) <= self.max_tool_calls else None

    def idle_answer(self) -> str:
        return "Done."

    def idle_call(self) -> ToolCall | None:
        return ToolCall.create("bash", {"command": "ls"}, "probe_idle") if "bash" in self.tool_names else None

    def reward_probes(self) -> Sequence[RewardProbe]:
        probes = list(super().reward_probes())
        if not probes:
            return probes
        for attack in self.attacks():
            probes.append(RewardProbe(attack.name, self.reply_with_calls(list(attack.calls)), attack.expect))
        return probes


def _release(toolboxes: Sequence[McpToolbox], session: WorkspaceSession) -> None:
    """Stop an episode's MCP servers and remove its workspace (its env was garbage-collected)."""
    for box in toolboxes:
        box.close()
    session.close()


def call(name: str, call_id: str = "ref", **arguments: object) -> ToolCall:
    """A tool call (for references and attacks)."""
    return ToolCall.create(name, dict(arguments), f"{call_id}_{name}")
