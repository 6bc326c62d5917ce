"""tinker-cookbook's tool library on envsuite, and envsuite's tools in it (the real package, 0.5.8).

Its ``@tool`` functions are envsuite tools unchanged; its ``AgentToolMessageEnv`` (built by its own
``build_agent_tool_env`` with envsuite's renderer) runs in envsuite's rollouts, checker and trainer.
tinker-cookbook 0.6.1's ``tool_use`` package is file for file the same as 0.5.8's (docs/tools.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

import envsuite
from envsuite import RendererConfig
from envsuite.adapters.cookbook import register_cookbook_env
from envsuite.core import (
    EnvContext,
    Observation,
    StopCondition,
    TokenCompleter,
    TokensWithLogprobs,
    Tool,
    ToolCall,
    run_tool_call,
    tool,
    tool_spec,
)
from envsuite.envs.tool_use import Score, ToolUseEnv
from envsuite.renderers import reply_message_tokens, reply_to_tokens
from envsuite.rollouts import do_group_rollout
from envsuite.testing import CheckOutcome, check_env
from envsuite.trainers import StopCause, TrainConfig, merge_turns, run_training
from tests.conftest import TEST_MODEL
from tests.support.cookbook_tools import COOKBOOK_TOOL_ID, multiply, multiply_group

RENDERER = RendererConfig(model_name=TEST_MODEL)


def test_a_cookbook_tool_is_an_envsuite_tool() -> None:
    assert isinstance(multiply, Tool)
    spec = tool_spec(multiply)
    assert spec["name"] == "multiply" and spec["parameters"]["required"] == ["a", "b"]
    done = asyncio.run(run_tool_call([multiply], ToolCall.create("multiply", {"a": 12, "b": 34}, "c1")))
    assert done.ok and done.messages == [
        {"role": "tool", "content": "408", "tool_call_id": "c1", "name": "multiply"}
    ]
    bad = asyncio.run(run_tool_call([multiply], ToolCall.create("multiply", {"a": "x", "b": 1}, "c2")))
    assert not bad.ok and bad.messages[0]["content"].startswith("Error: ")


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_an_envsuite_tool_runs_in_cookbooks_handle_tool_call() -> None:
    from tinker_cookbook.renderers.base import ToolCall as CookbookCall
    from tinker_cookbook.tool_use import handle_tool_call

    call = CookbookCall(function=CookbookCall.FunctionBody(name="add", arguments='{"a": 2, "b": 3}'), id="x")
    result = asyncio.run(handle_tool_call({"add": add}, call))
    assert result.messages[0]["content"] == "5" and result.messages[0]["tool_call_id"] == "x"


class MultiplyEnv(ToolUseEnv):
    """An envsuite tool env whose tool is tinker-cookbook's ``@tool`` function, unchanged."""

    def __init__(self, ctx: EnvContext) -> None:
        super().__init__(ctx)

    def tools(self) -> Sequence[Tool]:
        return [multiply]

    def task(self) -> str:
        return "What is 12 * 34?"

    async def score(self, answer: str | None) -> Score:
        return Score(answer == "408", "408")


class ScriptedTools(TokenCompleter):
    """Calls ``multiply`` on the task's numbers, then answers with the tool's result (SmolLM2's format)."""

    def __init__(self) -> None:
        self.renderer = RENDERER.build()

    async def __call__(
        self, model_input: Observation, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        since_user = self.renderer.tokenizer.decode(model_input.to_ints()).rsplit("<|im_start|>user\n", 1)[-1]
        if "<|im_start|>tool\n" in since_user:
            result = since_user.rsplit("<|im_start|>tool\n", 1)[-1].split("<|im_end|>")[0]
            tokens = reply_to_tokens(self.renderer, result)
        else:
            a, b = (int(x) for x in since_user.removeprefix("What is ").split("?")[0].split(" * "))
            call = ToolCall.create("multiply", {"a": a, "b": b})
            tokens = reply_message_tokens(
                self.renderer, {"role": "assistant", "content": "", "tool_calls": [call]}
            )
        return TokensWithLogprobs(tokens, [0.0] * len(tokens))


def test_an_envsuite_tool_env_runs_cookbook_tools() -> None:
    env = MultiplyEnv(envsuite.env_context("x", 0, "train", RENDERER, 4096))
    trajectory = asyncio.run(envsuite.rollouts.do_single_rollout(ScriptedTools(), env))
    assert trajectory.stop_reason == "completed" and trajectory.total_reward == 1.0


@pytest.fixture(scope="module")
def cookbook_tool_env() -> Iterator[str]:
    register_cookbook_env(
        COOKBOOK_TOOL_ID, "tests.support.cookbook_tools:multiply_group", reward_range=(-0.1, 1.0), max_turns=3
    )
    yield COOKBOOK_TOOL_ID
    envsuite.registry.unregister(COOKBOOK_TOOL_ID)


def test_agent_tool_message_env_runs_in_envsuite_rollouts_as_one_datum() -> None:
    from tinker_cookbook.tool_use import AgentToolMessageEnv

    builder = multiply_group(envsuite.env_context("x", 5, "train", RENDERER, 4096), 2)
    result = asyncio.run(do_group_rollout(builder, ScriptedTools()))
    assert result.group is not None, result.error
    for trajectory in result.group.trajectories_G:
        assert [t.reward for t in trajectory.transitions] == [0.0, 1.0]
        assert trajectory.stop_reason == "completed"
        # Their env re-renders the whole history each turn with envsuite's renderer; the call turn and
        # its result still extend the first prompt token for token, so the episode is one datum.
        assert len(merge_turns(trajectory)) == 1
    envs = asyncio.run(builder.make_envs())
    assert isinstance(envs[0].message_env, AgentToolMessageEnv)


def test_agent_tool_message_env_passes_envsuite_check(cookbook_tool_env: str) -> None:
    report = check_env(cookbook_tool_env, model=TEST_MODEL)
    assert report.passed, report.render()
    outcomes = {r.name: r.outcome for r in report.results}
    assert outcomes["tool calls are answered"] is CheckOutcome.PASSED, report.render()


def test_agent_tool_message_env_trains_with_envsuite_trainer(cookbook_tool_env: str, tmp_path: Path) -> None:
    config = TrainConfig(
        env_id=cookbook_tool_env,
        log_dir=str(tmp_path / "run"),
        model=TEST_MODEL,
        n_steps=2,
        batch_size=2,
        group_size=2,
        max_tokens=8,
        eval_every=0,
        n_transcripts=0,
    )
    result = run_training(config, show_progress=False)
    assert result.cause is StopCause.COMPLETED and result.steps_completed == 2
