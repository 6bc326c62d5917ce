"""tinker-cookbook 0.5.8's tool library, unchanged, on envsuite's renderers (tests only).

``multiply`` is a cookbook ``@tool`` function; :func:`multiply_group` builds cookbook
``AgentToolMessageEnv`` s (through its own ``build_agent_tool_env``) whose renderer is envsuite's, with
the tool definitions put in the conversation the cookbook way
(``renderer.create_conversation_prefix_with_tools``). The factory has the signature
:func:`envsuite.adapters.cookbook.register_cookbook_env` asks for.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from tinker_cookbook.rl.types import Env, EnvGroupBuilder
from tinker_cookbook.tool_use import ToolResult, build_agent_tool_env, simple_tool_result, tool

from envsuite.core import EnvContext

COOKBOOK_TOOL_ID = "cookbook/multiply_tool-v0"


@tool
async def multiply(
    a: Annotated[int, "The first factor"], b: Annotated[int, "The second factor"]
) -> ToolResult:
    """Multiply two integers exactly."""
    return simple_tool_result(str(a * b))


def task(a: int, b: int) -> str:
    return f"What is {a} * {b}? Use the multiply tool, then reply with the number only."


@dataclass(frozen=True)
class MultiplyGroupBuilder(EnvGroupBuilder):
    """``group_size`` cookbook agent envs on one problem; reward 1 when the answer holds the product."""

    renderer: Any
    a: int
    b: int
    group_size: int

    async def make_envs(self) -> Sequence[Env]:
        async def reward_fn(history: list[Any]) -> tuple[float, dict[str, float]]:
            last = str(history[-1].get("content", "")) if history[-1].get("role") == "assistant" else ""
            correct = str(self.a * self.b) in last
            return float(correct), {"correct": float(correct)}

        specs = [multiply.to_spec()]
        prefix = self.renderer.create_conversation_prefix_with_tools(specs)
        messages = [*prefix, {"role": "user", "content": task(self.a, self.b)}]
        return [
            build_agent_tool_env(self.renderer, [multiply], messages, reward_fn, max_turns=3)
            for _ in range(self.group_size)
        ]

    def logging_tags(self) -> list[str]:
        return ["cookbook_multiply_tool"]


def multiply_group(ctx: EnvContext, group_size: int) -> EnvGroupBuilder:
    """The factory: the problem drawn from the seed, envsuite's renderer as the cookbook env's renderer."""
    rng = random.Random(ctx.seed)
    return MultiplyGroupBuilder(ctx.renderer, rng.randint(100, 999), rng.randint(100, 999), group_size)
