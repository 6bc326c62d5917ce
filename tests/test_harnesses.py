"""Real agent harnesses drive envsuite episodes: the OpenAI Agents SDK's ``Runner`` plays a workspace task
against SmolLM2-135M on ``envsuite serve`` (127.0.0.1); its tool calls run in the episode's sandboxed
workspace, its model calls are captured into one episode, the task's hidden checks grade the workspace,
and the scored episode assembles into trainable datums, token for token as sampled."""

from __future__ import annotations

from pathlib import Path

import pytest

from envsuite.adapters.harnesses import ServedModelRef, run_agents_sdk_episode, run_mini_swe_agent_episode
from envsuite.capture import CaptureStore, captured_groups
from envsuite.serve import ServeConfig
from tests.support.sandbox import needs_sandbox
from tests.test_serve import running

pytestmark = needs_sandbox
KEY = "tml-harness-test"
MODEL = "smollm2-135m-instruct"
"""A real small model: tiny-random's calls never close their string arguments within a budget."""


async def test_the_agents_sdk_plays_a_workspace_task_captured_and_trainable(tmp_path: Path) -> None:
    pytest.importorskip("agents")
    state = tmp_path / "state"
    with running(ServeConfig(state_dir=state), api_key=KEY) as url:
        served = ServedModelRef(url, MODEL, api_key=KEY, capture_set="harness")
        episode = await run_agents_sdk_episode(
            "workspace/shell_easy",
            served,
            seed=3,
            max_turns=2,
            first_turn_calls=True,
            max_tokens=96,
            temperature=0.0,
        )
    # The forced first turn called a workspace tool, which ran in the sandbox; SmolLM2-135M then answered
    # in prose without doing the task, so the hidden check fails it (no answer.txt: reward 0).
    assert episode.tool_calls and episode.tool_calls[0].split("(")[0] in {
        "bash",
        "python",
        "read_file",
        "write_file",
        "edit_file",
    }
    assert (episode.reward, episode.correct) == (0.0, False)
    stored = CaptureStore(state / "captures" / "harness").episodes()
    assert [e.episode_id for e in stored] == [episode.episode_id]
    (captured,) = stored
    assert len(captured.calls) >= 2, "the call that made the tool call, and the one after its result"
    assert captured.score is not None and captured.score.rewards == [0.0]
    # Trainable: one scored trajectory group whose actions are the tokens the server sampled (a group of
    # one with reward 0 has no advantage, so it adds no datum by itself; test_serve_capture trains some).
    groups = captured_groups(stored)
    assert groups.n_unscored == 0 and len(groups.groups_P) == 1
    (trajectory,) = groups.groups_P[0].trajectories_G
    sampled = [choice.tokens for call in captured.calls for choice in call.choices]
    assert [t.ac.tokens for t in trajectory.transitions] == sampled


async def test_mini_swe_agent_runs_its_commands_in_the_workspace(tmp_path: Path) -> None:
    pytest.importorskip("minisweagent")
    state = tmp_path / "state"
    with running(ServeConfig(state_dir=state), api_key=KEY) as url:
        served = ServedModelRef(url, MODEL, api_key=KEY, capture_set="mini")
        episode = await run_mini_swe_agent_episode(
            "workspace/shell_easy", served, seed=3, step_limit=2, max_tokens=96, temperature=0.0
        )
    # Each of its two steps was a bash call, run in the sandbox; it never did the task (reward 0).
    assert len(episode.tool_calls) == 2 and all(c.startswith("bash(") for c in episode.tool_calls)
    assert (episode.reward, episode.correct) == (0.0, False)
    (captured,) = CaptureStore(state / "captures" / "mini").episodes()
    assert captured.episode_id == episode.episode_id and len(captured.calls) == 2
    assert captured.score is not None and captured.score.rewards == [0.0]
