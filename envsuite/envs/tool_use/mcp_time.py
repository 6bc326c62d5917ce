"""``tools/mcp_time``: convert a wall-clock time between time zones with the tools of a real MCP server.

The tools are ``mcp-server-time``'s (``get_current_time``, ``convert_time``), listed by the server
itself and run in envsuite's sandbox (:mod:`envsuite.adapters.mcp`): one server per process, started
on first use and shared by every episode (it keeps no state between calls), stopped at exit. Each seed
draws a source zone, a target zone and a time of day; zones include half- and quarter-hour offsets
(Kathmandu +5:45, St. John's -3:30) and daylight saving, so the answer is not a guess. The answer is the
last ``HH:MM`` in the reply, checked against :mod:`zoneinfo` for today's date in the source zone (the
date the server converts on, so a daylight-saving change between draw and answer cannot split them).
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Sequence
from datetime import datetime
from zoneinfo import ZoneInfo

from envsuite.adapters.mcp import McpServer, shared_toolbox
from envsuite.core import (
    EnvContext,
    InitialObservationOverflow,
    Message,
    Observation,
    StopCondition,
    Tool,
    ToolCall,
)
from envsuite.envs._problem import draw_for_split
from envsuite.envs.tool_use._env import DEFAULT_FORMAT_COEF, Score, ToolUseEnv

TIME_SERVER = McpServer.python_module("mcp_server_time", "--local-timezone", "UTC")
"""mcp-server-time in the sandbox; its local zone fixed so no answer depends on the host's."""
ZONES = (
    "Asia/Tokyo",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Asia/Shanghai",
    "Asia/Dubai",
    "Australia/Adelaide",
    "Australia/Sydney",
    "Pacific/Auckland",
    "Europe/London",
    "Europe/Berlin",
    "Europe/Moscow",
    "Africa/Nairobi",
    "America/New_York",
    "America/Chicago",
    "America/Los_Angeles",
    "America/St_Johns",
    "America/Sao_Paulo",
    "UTC",
)
EASY_ZONES = ("Asia/Tokyo", "Europe/London", "America/New_York", "UTC")
TASK = (
    "It is {time} in {source} today. What time is it in {target} at that moment? "
    "Use the tools, then reply with the time only, as HH:MM (24-hour)."
)
_CLOCK = re.compile(r"\b([01]?\d|2[0-3]):([0-5]\d)\b")


def convert(time: str, source: str, target: str) -> str:
    """``time`` (``HH:MM``) today in ``source``, as ``HH:MM`` in ``target`` (the server's rule)."""
    hour, minute = (int(x) for x in time.split(":"))
    today = datetime.now(ZoneInfo(source)).date()
    moment = datetime(today.year, today.month, today.day, hour, minute, tzinfo=ZoneInfo(source))
    return moment.astimezone(ZoneInfo(target)).strftime("%H:%M")


def read_clock(answer: str) -> str | None:
    """The last ``H:MM``/``HH:MM`` in ``answer``, as ``HH:MM``."""
    found = _CLOCK.findall(answer)
    return f"{int(found[-1][0]):02d}:{found[-1][1]}" if found else None


class McpTimeEnv(ToolUseEnv):
    """Convert one drawn time between two zones with mcp-server-time's tools (see the module docstring)."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        zones: Sequence[str] = ZONES,
        task: str = TASK,
        server: McpServer = TIME_SERVER,
        max_turns: int = 4,
        max_tool_calls: int = 4,
        system_prompt: str | None = None,
        demonstrate: bool = False,
        tool_use_reward: float = 0.0,
        format_coef: float = DEFAULT_FORMAT_COEF,
    ) -> None:
        """``zones``: IANA names to draw from (two or more); ``task``: a template of ``{time}``,
        ``{source}`` and ``{target}``; ``server``: the MCP server whose tools are listed."""
        super().__init__(
            ctx,
            max_turns=max_turns,
            max_tool_calls=max_tool_calls,
            system_prompt=system_prompt,
            demonstrate=demonstrate,
            tool_use_reward=tool_use_reward,
            format_coef=format_coef,
            tool_timeout_s=server.call_timeout_s,
        )
        if len(set(zones)) < 2:
            raise ValueError("zones needs at least two distinct time zones")
        for zone in zones:
            ZoneInfo(zone)  # an unknown name fails here, not in an episode
        rng = random.Random(ctx.seed)
        names = sorted(set(zones))

        def draw() -> tuple[str, str, str]:
            source, target = rng.sample(names, 2)
            return f"{rng.randrange(24):02d}:{rng.choice(range(0, 60, 5)):02d}", source, target

        self.time, self.source, self.target = draw_for_split(draw, lambda q: " ".join(q), ctx.split)
        self.server = server
        self._template = task
        self._task = task.format(time=self.time, source=self.source, target=self.target)

    def tools(self) -> Sequence[Tool]:
        return shared_toolbox(self.server).start()

    async def initial_observation(self) -> tuple[Observation, StopCondition] | InitialObservationOverflow:
        # The first episode of a process starts the server (~0.7 s): in a thread, not on the env's loop.
        await asyncio.to_thread(shared_toolbox(self.server).start)
        return await super().initial_observation()

    def task(self) -> str:
        return self._task

    def demonstration(self) -> list[Message]:
        arguments = {"source_timezone": "Europe/Paris", "time": "12:00", "target_timezone": "Asia/Singapore"}
        call = ToolCall.create("convert_time", arguments, "call_example")
        result = f'{{"target": {{"timezone": "Asia/Singapore", "time": "{convert("12:00", "Europe/Paris", "Asia/Singapore")}"}}}}'
        return [
            {
                "role": "user",
                "content": self._template.format(
                    time="12:00", source="Europe/Paris", target="Asia/Singapore"
                ),
            },
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": result, "tool_call_id": "call_example", "name": "convert_time"},
        ]

    def reference_reply(self) -> str:
        return convert(self.time, self.source, self.target)

    def idle_answer(self) -> str:
        hour, minute = self.reference_reply().split(":")
        return f"{(int(hour) + 1) % 24:02d}:{minute}"  # an hour off: a wrong answer, never the right one

    def idle_call(self) -> ToolCall:
        return ToolCall.create("get_current_time", {"timezone": "UTC"}, "probe_idle")

    async def score(self, answer: str | None) -> Score:
        reference = convert(self.time, self.source, self.target)
        if answer is None:
            return Score(False, reference, "no answer")
        clock = read_clock(answer)
        if clock is None:
            return Score(False, reference, "no HH:MM in the answer")
        return Score(clock == reference, reference, f"read {clock}")
