"""Tools through Inspect: its tasks with tools against envsuite models, and envsuite's tool envs as tasks.

Real Inspect runs throughout. The envsuite model is SmolLM2's chat format over a scripted sampling
client (the tiny random model cannot be made to write a tool call; the script writes one and checks
what the provider showed it), or the real tiny model where only the plumbing is tested. Inspect's
offline ``mockllm`` stands in for a tool-calling third-party model.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import pydantic
import pytest
from inspect_ai import Task
from inspect_ai import eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import (
    ChatMessageAssistant,
    ChatMessageTool,
    ChatMessageUser,
    GenerateConfig,
    ModelOutput,
    ModelUsage,
    ResponseSchema,
    get_model,
)
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import ToolFunction
from inspect_ai.tool import tool as inspect_tool
from inspect_ai.util import json_schema

import envsuite
from envsuite import RendererConfig
from envsuite.evals import BenchConfig, envsuite_env, episode_seeds, run_bench
from envsuite.leaderboard import ResultStore
from tests.conftest import TEST_MODEL


@inspect_tool
def add() -> Any:
    async def execute(x: int, y: int) -> str:
        """Add two integers.

        Args:
            x: The first integer.
            y: The second integer.
        """
        return str(x + y)

    return execute


class ScriptedSampler:
    """A sampling client that calls ``add`` once, then answers with the tool's result, and keeps every
    prompt it was given (decoded) so the test can check what the provider showed the model."""

    def __init__(self) -> None:
        self.renderer = RendererConfig(model_name=TEST_MODEL).build()
        self.prompts: list[str] = []

    async def sample(self, prompt: Any, num_samples: int, sampling_params: Any) -> Any:
        text = self.renderer.tokenizer.decode(prompt.to_ints())
        self.prompts.append(text)
        if "<|im_start|>tool\n" in text:
            reply = text.rsplit("<|im_start|>tool\n", 1)[1].split("<|im_end|>")[0]
            body = f"The sum is {reply}."
        else:
            body = '<tool_call>[{"name": "add", "arguments": {"x": 2, "y": 3}}]</tool_call>'
        tokens = [*self.renderer.tokenizer.encode(body, add_special_tokens=False), 2]  # <|im_end|>
        return SimpleNamespace(sequences=[SimpleNamespace(tokens=tokens, logprobs=None)] * num_samples)


def test_an_inspect_task_with_a_custom_tool_runs_against_an_envsuite_model(tmp_path: Path) -> None:
    sampler = ScriptedSampler()
    model = get_model(f"envsuite/{TEST_MODEL}", sampling_client=sampler)
    task = Task(
        dataset=[Sample(input="What is 2 + 3?", target="5")],
        solver=[use_tools(add()), generate()],
        scorer=includes(),
    )
    (log,) = inspect_eval(task, model=model, log_dir=str(tmp_path), display="none")
    assert log.status == "success", log.error
    sample = (log.samples or [])[0]
    # The provider showed the tool in SmolLM2's format, parsed the model's call into Inspect's shape,
    # Inspect ran the custom tool, and the result came back to the model as a tool turn.
    assert '"name": "add"' in sampler.prompts[0] and "<tools>" in sampler.prompts[0]
    (call,) = next(
        m.tool_calls for m in sample.messages if isinstance(m, ChatMessageAssistant) and m.tool_calls
    )
    assert (call.function, call.arguments, call.parse_error) == ("add", {"x": 2, "y": 3}, None)
    results = [m for m in sample.messages if isinstance(m, ChatMessageTool)]
    assert [(m.content, m.function, m.tool_call_id) for m in results] == [("5", "add", call.id)]
    assert "<|im_start|>tool\n5<|im_end|>" in sampler.prompts[1]
    assert sample.output.completion == "The sum is 5." and sample.scores["includes"].value == "C"  # type: ignore[index]


def test_the_provider_shows_tools_to_the_real_model_and_constrains_forced_choices() -> None:
    model = get_model(f"envsuite/{TEST_MODEL}")
    messages = [ChatMessageUser(content="What is 2 + 3?")]
    config = GenerateConfig(max_tokens=200, seed=1)
    output = asyncio.run(model.generate(messages, tools=[add()], config=config))
    assert output.choices[0].message.role == "assistant"
    # A forced call (one function, or "any") is sampled under the tool-call grammar: the random model
    # writes calls of add with integer arguments, in SmolLM2's format (its integers run to 40 digits:
    # hence the budget).
    for choice in (ToolFunction("add"), "any"):
        forced = asyncio.run(model.generate(messages, tools=[add()], tool_choice=choice, config=config))
        calls = forced.choices[0].message.tool_calls or []
        assert forced.choices[0].stop_reason == "tool_calls" and calls
        assert all(c.function == "add" and c.parse_error is None for c in calls)
        assert all(set(c.arguments) == {"x", "y"} for c in calls)
        assert all(isinstance(v, int) for c in calls for v in c.arguments.values())
    # Inspect's structured output: the reply is a JSON document valid against the schema.
    schema = ResponseSchema(name="verdict", json_schema=json_schema(Verdict), strict=True)
    structured = asyncio.run(
        model.generate(messages, config=config.merge(GenerateConfig(response_schema=schema)))
    )
    Verdict.model_validate_json(structured.choices[0].message.text)
    # A sampler that is not local would drop the constraint: refused rather than ignored.
    scripted = get_model(f"envsuite/{TEST_MODEL}", sampling_client=ScriptedSampler())
    with pytest.raises(Exception, match="constrained decoding"):
        asyncio.run(
            scripted.generate(messages, tools=[add()], tool_choice=ToolFunction("add"), config=config)
        )


class Verdict(pydantic.BaseModel):
    answer: Literal["yes", "no"]
    sure: bool


def _mock(outputs: list[ModelOutput]) -> list[ModelOutput]:
    for output in outputs:  # mockllm counts tokens with tiktoken data from the network unless given usage
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return outputs


def test_tool_envs_run_as_inspect_tasks_for_a_tool_calling_model(tmp_path: Path) -> None:
    (seed,) = episode_seeds("tools/calculator", 1, 0)
    env = envsuite.make_env("tools/calculator", seed=seed, split="test")
    outputs = _mock(
        [
            ModelOutput.for_tool_call("mockllm", "calculator", {"expression": env.expression}),  # type: ignore[attr-defined]
            ModelOutput.from_content("mockllm", str(env.value)),  # type: ignore[attr-defined]
        ]
    )
    task = envsuite_env(env_id="tools/calculator", episodes=1, seed=0)
    (log,) = inspect_eval(
        task,
        model="mockllm/model",
        model_args={"custom_outputs": outputs},
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success", log.error
    sample = (log.samples or [])[0]
    score = next(iter((sample.scores or {}).values()))
    assert score.value == {"reward": 1.0, "success": 1.0} and "stop/completed" in (score.explanation or "")
    tool_results = [m for m in sample.messages if isinstance(m, ChatMessageTool)]
    assert [m.text for m in tool_results] == [str(env.value)]  # type: ignore[attr-defined]


def test_bench_runs_tool_envs_alike_in_both_runners(tmp_path: Path) -> None:
    ids = ("tools/calculator", "tools/search", "tools/kv_store")
    stored = {}
    for runner in ("inspect", "direct"):
        config = BenchConfig(
            env_ids=ids,
            model=TEST_MODEL,
            runner=runner,
            episodes=2,
            max_tokens=16,
            display="none",
            log_root=str(tmp_path / runner / "logs"),
            db=str(tmp_path / runner / "board.sqlite"),
        )
        report = run_bench(config)
        assert report.completed and report.episodes_added == 6
        with ResultStore(config.db) as store:
            episodes = store.episodes()
            assert all("stop/env_error" not in e.episode.metrics for e in episodes)
            stored[runner] = sorted(
                (e.key.env_id, e.episode.seed, e.episode.reward, str(e.episode.metrics)) for e in episodes
            )
    assert stored["inspect"] == stored["direct"]
