"""The OpenAI Agents SDK as a harness: its ``Runner`` plays one episode of a tool-use env (a workspace task,
a tool env) against a checkpoint on ``envsuite serve``.

The env's tools become the SDK's ``FunctionTool`` s (their JSON schemas as the env declares them; the SDK
marks a tool ``strict`` only where the schema meets OpenAI's strict rules, and the server then holds the
call's arguments to it). The agent's model is the SDK's Chat Completions model over the server's OpenAI
routes, every call carrying the episode's capture headers, so the whole conversation lands in one
captured episode. When the run ends (a final answer, or ``max_turns``), the env's hidden checks grade the
workspace and the reward is posted to the captured episode.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from envsuite.adapters.harnesses._episode import (
    HarnessEpisode,
    ServedModelRef,
    finish,
    new_episode_id,
    post_reward,
    run_tool,
)
from envsuite.errors import UsageError

if TYPE_CHECKING:
    from envsuite.tools import Tool

_INSTALL_HINT = "the Agents SDK harness needs openai-agents: pip install 'envsuite[agents]'"


async def run_agents_sdk_episode(
    env_id: str,
    served: ServedModelRef,
    *,
    seed: int = 0,
    split: str = "test",
    max_turns: int = 6,
    first_turn_calls: bool = False,
    max_tokens: int = 256,
    temperature: float = 1.0,
) -> HarnessEpisode:
    """Play episode ``seed`` of ``env_id`` with the Agents SDK's ``Runner`` against ``served``.

    ``first_turn_calls``: the first reply must call a tool (``tool_choice: "required"``; the SDK resets it
    to ``auto`` once a tool ran), for a model that would otherwise never reach the workspace.
    """
    try:
        import agents
        from openai import AsyncOpenAI
    except ImportError:
        raise UsageError(_INSTALL_HINT) from None
    from envsuite import make_env

    env = make_env(env_id, seed=seed, split=split)  # type: ignore[arg-type]
    await env.initial_observation()  # lays out the workspace
    episode_id = new_episode_id()
    calls: list[str] = []
    timeout_s = getattr(env, "tool_timeout_s", 30.0)
    tools = [_function_tool(agents, tool, calls, timeout_s) for tool in getattr(env, "tools", lambda: [])()]
    client = AsyncOpenAI(
        base_url=served.openai_base_url,
        api_key=served.api_key,
        default_headers=served.headers(episode_id),
        max_retries=0,
    )
    settings = agents.ModelSettings(
        tool_choice="required" if first_turn_calls else None, max_tokens=max_tokens, temperature=temperature
    )
    agent = agents.Agent(
        name="envsuite-agent",
        instructions=getattr(env, "system_prompt", None) or "Use the tools to do the task, then answer.",
        tools=tools,
        model=agents.OpenAIChatCompletionsModel(model=served.model, openai_client=client),
        model_settings=settings,
    )
    agents.set_tracing_disabled(True)
    task = getattr(env, "task", lambda: "")()
    try:
        result = await agents.Runner.run(agent, task, max_turns=max_turns)
        answer = str(result.final_output or "")
    except agents.MaxTurnsExceeded:
        answer = ""  # graded as the workspace stands, with no answer
    score = await finish(env, answer)
    reward = 1.0 if score.correct else 0.0
    await post_reward(served, episode_id, reward)
    return HarnessEpisode(env_id, seed, episode_id, reward, score.correct, answer, calls, score.detail)


def _function_tool(agents: Any, tool: Tool, calls: list[str], timeout_s: float | None) -> Any:
    async def invoke(_context: Any, arguments_json: str) -> str:
        calls.append(f"{tool.name}({arguments_json[:200]})")
        return await run_tool(tool, arguments_json, timeout_s=timeout_s)

    schema = json.loads(json.dumps(tool.parameters_schema))
    return agents.FunctionTool(
        name=tool.name,
        description=tool.description,
        params_json_schema=schema,
        on_invoke_tool=invoke,
        strict_json_schema=_is_strict(schema),
    )


def _is_strict(schema: dict[str, Any]) -> bool:
    """Whether a schema meets OpenAI's strict rules at its top level (every property required, no others)."""
    properties = schema.get("properties") or {}
    return (
        schema.get("type") == "object"
        and schema.get("additionalProperties") is False
        and set(schema.get("required") or []) == set(properties)
    )
