"""Inspect tasks as catalog envs (``inspect:MODULE/TASK``): samples as episodes, the scorer as reward."""

from __future__ import annotations

import asyncio

import pytest

from envsuite.catalog._make import RendererConfig, available_spec, make_env
from envsuite.errors import UsageError
from envsuite.renderers import reply_to_tokens
from tests.conftest import TEST_MODEL

TASKS = "inspect:tests.fixtures.inspect_tasks"


async def _reply(env_id: str, seed: int, reply: str) -> tuple[float, str]:
    env = make_env(env_id, seed=seed, model=TEST_MODEL)
    first = await env.initial_observation()
    assert isinstance(first, tuple)
    result = await env.step(reply_to_tokens(RendererConfig(TEST_MODEL).build(), reply, first[1]))
    assert result.episode_done
    return result.reward, str(getattr(env, "answerer_identity", ""))


def test_samples_are_episodes_scored_by_match() -> None:
    env = make_env(f"{TASKS}/arith", seed=1, model=TEST_MODEL)
    conversation = env.conversation()
    assert conversation[0] == {"role": "system", "content": "You are a calculator."}
    assert "What is 10 + 25?" in str(conversation[-1]["content"])
    assert asyncio.run(_reply(f"{TASKS}/arith", 1, "35")) == (1.0, "")
    assert asyncio.run(_reply(f"{TASKS}/arith", 1, "36"))[0] == 0.0
    assert asyncio.run(_reply(f"{TASKS}/arith", 5, "35"))[0] == 1.0  # seed 5 is sample 5 % 4 == 1


def test_chat_message_inputs_and_includes() -> None:
    env = make_env(f"{TASKS}/capitals", seed=2, model=TEST_MODEL)
    assert [m["role"] for m in env.conversation()] == ["system", "user"]
    assert asyncio.run(_reply(f"{TASKS}/capitals", 2, "It is Tokyo."))[0] == 1.0
    assert asyncio.run(_reply(f"{TASKS}/capitals", 2, "Kyoto"))[0] == 0.0


def test_multiple_choice_is_posed_and_scored_by_choice() -> None:
    env = make_env(f"{TASKS}/colours", seed=0, model=TEST_MODEL)
    assert "B) green" in str(env.conversation()[-1]["content"])
    assert asyncio.run(_reply(f"{TASKS}/colours", 0, "ANSWER: B"))[0] == 1.0
    assert asyncio.run(_reply(f"{TASKS}/colours", 0, "ANSWER: A"))[0] == 0.0


def test_a_model_graded_scorer_names_its_grader_in_the_envs_identity() -> None:
    reward, identity = asyncio.run(_reply(f"{TASKS}/graded", 0, "5"))
    assert identity == f"grader:envsuite/{TEST_MODEL}"
    assert reward in (0.0, 0.5, 1.0)  # the tiny grader's verdict, read as value_to_float reads it


def test_a_tool_using_solver_is_refused_saying_why() -> None:
    with pytest.raises(UsageError, match=r"use_tools.*one reply"):
        available_spec(f"{TASKS}/thinker")
    with pytest.raises(UsageError, match="inspect_evals"):
        available_spec("inspect:inspect_evals/gsm8k")


def test_an_inspect_task_passes_the_conformance_checker() -> None:
    from envsuite.testing import check_env

    report = check_env(f"{TASKS}/arith", model=TEST_MODEL)
    assert report.passed, report.render()
