"""``tools/mcp_time``: a catalog env whose tools are a real MCP server's (mcp-server-time, in the
sandbox). A scripted episode calls ``convert_time`` through the server and answers with what it said;
the grade agrees with zoneinfo; the family passes the conformance checker and its reward-hacking probes."""

from __future__ import annotations

import asyncio
import gc
import json
import os

import pytest

import envsuite
from envsuite.core import Message, StepResult, ToolCall
from envsuite.envs.tool_use.mcp_time import convert, read_clock
from envsuite.renderers import reply_message_tokens, reply_to_tokens
from envsuite.testing import check_env
from tests.conftest import TEST_MODEL
from tests.support.sandbox import needs_sandbox

pytestmark = needs_sandbox


def _episode(env_id: str, seed: int) -> tuple[envsuite.Env, list[StepResult]]:
    env = envsuite.make_env(env_id, seed=seed, model=TEST_MODEL)
    renderer = env.ctx.renderer  # type: ignore[attr-defined]
    arguments = {"source_timezone": env.source, "time": env.time, "target_timezone": env.target}  # type: ignore[attr-defined]
    call: Message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [ToolCall.create("convert_time", arguments, "call_1")],
    }

    async def go() -> list[StepResult]:
        await env.initial_observation()
        first = await env.step(reply_message_tokens(renderer, call))
        said = json.loads(env.conversation()[-1]["content"])  # type: ignore[attr-defined]
        answer = said["target"]["datetime"][11:16]  # what the server answered, as the policy would read it
        return [first, await env.step(reply_to_tokens(renderer, f"It is {answer} there."))]

    return env, asyncio.run(go())


def test_an_episode_calls_the_mcp_server_and_its_answer_is_graded_by_zoneinfo() -> None:
    env, (first, final) = _episode("tools/mcp_time", seed=3)
    assert not first.episode_done
    system = env.conversation()[0]  # type: ignore[attr-defined]
    assert {t["name"] for t in system["tools"]} == {"get_current_time", "convert_time"}
    assert final.episode_done and final.reward == 1.0
    assert final.metrics["tool_calls"] == 1 and final.metrics["tool_errors"] == 0
    assert final.logs["reference"] == convert(env.time, env.source, env.target)  # type: ignore[attr-defined]


def test_a_wrong_time_and_a_bad_call_earn_nothing() -> None:
    env = envsuite.make_env("tools/mcp_time", seed=4, model=TEST_MODEL)
    renderer = env.ctx.renderer  # type: ignore[attr-defined]
    bad: Message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [ToolCall.create("get_current_time", {"timezone": "Nowhere/Land"}, "c")],
    }

    async def go() -> list[StepResult]:
        await env.initial_observation()
        first = await env.step(reply_message_tokens(renderer, bad))
        return [first, await env.step(reply_to_tokens(renderer, env.idle_answer()))]  # type: ignore[attr-defined]

    first, final = asyncio.run(go())
    assert not first.episode_done
    tool = next(m for m in env.conversation() if m["role"] == "tool")  # type: ignore[attr-defined]
    assert tool["content"].startswith("Error:") and "Nowhere/Land" in tool["content"]
    assert final.metrics["tool_errors"] == 1 and final.reward == 0.0


@pytest.mark.parametrize(
    ("text", "clock"), [("It is 7:05.", "07:05"), ("09:00 or 23:59", "23:59"), ("noon", None)]
)
def test_the_answer_is_the_last_clock_time_in_the_reply(text: str, clock: str | None) -> None:
    assert read_clock(text) == clock


@pytest.mark.parametrize("env_id", ["tools/mcp_time-v0", "tools/mcp_time_easy-v0"])
def test_the_family_passes_the_conformance_checker_and_its_probes(env_id: str) -> None:
    report = check_env(env_id, model=TEST_MODEL)
    assert report.passed, report.render()
    assert report.probe_tally is not None


def test_a_workspace_episode_does_its_git_task_through_mcp_server_gits_tools() -> None:
    """``workspace/git_mcp``: mcp-server-git runs in the episode's own sandbox, on the repository the
    setup made; a branch and a commit made only through its tools (and write_file) earn full marks, and
    the server is stopped before the hidden check reads the repository."""
    missing = envsuite.registry.spec("workspace/git_mcp-v0").unavailable
    if missing:
        pytest.skip(missing)
    env = envsuite.make_env("workspace/git_mcp", seed=5, model=TEST_MODEL)
    p, repo = env.problem, "/work/repo"  # type: ignore[attr-defined]
    steps = [
        ToolCall.create(
            "git_create_branch", {"repo_path": repo, "branch_name": p.branch, "base_branch": "main"}, "1"
        ),
        ToolCall.create("git_checkout", {"repo_path": repo, "branch_name": p.branch}, "2"),
        ToolCall.create("write_file", {"path": f"repo/{p.path}", "content": p.content}, "3"),
        ToolCall.create("git_add", {"repo_path": repo, "files": [p.path]}, "4"),
        ToolCall.create("git_commit", {"repo_path": repo, "message": "Add notes"}, "5"),
    ]
    renderer = env.ctx.renderer  # type: ignore[attr-defined]

    pids: list[int] = []

    async def go() -> list[StepResult]:
        await env.initial_observation()
        names = {spec["name"] for spec in env.tool_specs()}  # type: ignore[attr-defined]
        assert {"bash", "write_file", "git_create_branch", "git_commit"} <= names
        pids.extend(box.process.pid for box in env._toolboxes)  # type: ignore[attr-defined]
        made = await env.step(reply_to_tokens(renderer, env.reply_with_calls(steps)))  # type: ignore[attr-defined]
        return [made, await env.step(reply_to_tokens(renderer, "Done."))]

    made, final = asyncio.run(go())
    assert not made.episode_done and "Error" not in str(made.logs["calls"]), made.logs
    assert final.reward == 1.0, final.logs
    assert len(pids) == 1 and not os.path.exists(f"/proc/{pids[0]}")  # the server is gone


def test_an_episode_dropped_before_its_end_stops_its_mcp_server() -> None:
    """A rollout cut short (never scored, never closed) once left its mcp-server-git running for the
    rest of the process: the toolbox's thread keeps it alive. Dropping the env stops it."""
    missing = envsuite.registry.spec("workspace/git_mcp-v0").unavailable
    if missing:
        pytest.skip(missing)
    env = envsuite.make_env("workspace/git_mcp", seed=5, model=TEST_MODEL)
    asyncio.run(env.initial_observation())
    (pid,) = (box.process.pid for box in env._toolboxes)  # type: ignore[attr-defined]
    assert os.path.exists(f"/proc/{pid}")
    del env
    gc.collect()
    assert not os.path.exists(f"/proc/{pid}")
