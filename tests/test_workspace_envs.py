"""The workspace families and Harbor-format tasks as catalog envs: episodes played through real tool
calls in a real sandbox, hidden checks, train/test splits, the shipped tasks' oracle and do-nothing
agents, and Harbor tasks the sandbox cannot run refused with the reason."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

import envsuite
from envsuite.core import Env, StepResult, StopReason, ToolCall
from envsuite.envs.workspace import HarborEnv, HarborTaskError, load_harbor_task, shipped_tasks
from envsuite.registration import UnavailableEnvError
from envsuite.renderers import reply_to_tokens
from envsuite.testing import check_env
from tests.conftest import TEST_MODEL
from tests.support.sandbox import needs_sandbox

pytestmark = needs_sandbox

FAMILY_IDS = [f"workspace/{f}{r}" for f in ("shell", "repo", "git") for r in ("_easy", "", "_hard")]
TASKS = Path(envsuite.__file__).parent / "envs" / "workspace" / "tasks"


def make(env_id: str, seed: int = 0, **kwargs: Any) -> Env:
    """The env; the test skips, with the catalog's reason, where this machine lacks a program it runs."""
    if not env_id.startswith("harbor:"):
        missing = envsuite.registry.spec(env_id).unavailable
        if missing:
            pytest.skip(f"{env_id}: {missing}")
    return envsuite.make_env(env_id, seed=seed, model=TEST_MODEL, **kwargs)


def play(env: Env, replies: list[str]) -> list[StepResult]:
    """Play ``replies`` (assistant texts; calls in the renderer's syntax) until the episode ends."""

    async def run() -> list[StepResult]:
        await env.initial_observation()
        results = []
        for reply in replies:
            result = await env.step(reply_to_tokens(env.renderer, reply))  # type: ignore[attr-defined]
            results.append(result)
            if result.episode_done:
                break
        return results

    return asyncio.run(run())


def calls(env: Env, *tool_calls: ToolCall) -> str:
    return env.reply_with_calls(list(tool_calls))  # type: ignore[attr-defined,no-any-return]


def test_the_catalog_has_the_families_and_the_shipped_tasks() -> None:
    ids = sorted(s.id for s in envsuite.registry.all_specs() if "workspace" in s.tags)
    with_mcp = ["workspace/git_mcp"]  # the git family's first task with mcp-server-git's tools (test_mcp_env)
    intro = ["workspace/shell_intro"]  # below rung 0, the learning preset's env
    expected = sorted(f"{i}-v0" for i in FAMILY_IDS + with_mcp + intro)
    assert [i for i in ids if i.startswith("workspace/")] == expected
    assert [i for i in ids if i.startswith("harbor/")] == [f"harbor/{n}-v0" for n in shipped_tasks()]
    assert len(shipped_tasks()) >= 6


def test_an_episode_runs_commands_and_is_graded_on_the_workspace() -> None:
    env = make("workspace/shell_easy", seed=3)
    problem = env.problem  # type: ignore[attr-defined]
    first = calls(env, ToolCall.create("bash", {"command": "ls -R | head -20"}, "c1"))
    results = play(env, [first, "I will answer now."])
    assert results[0].episode_done is False and "access.log" in results[0].logs["calls"]
    assert results[-1].stop_reason is StopReason.COMPLETED and results[-1].reward == 0.0
    right = make("workspace/shell_easy", seed=3)
    write = ToolCall.create("write_file", {"path": problem.output, "content": problem.expected + "\n"}, "c1")
    done = play(right, [calls(right, write), "Done."])[-1]
    assert done.reward == 1.0 and done.metrics["success"] == 1.0
    assert right.session is not None and right.session.closed  # type: ignore[attr-defined]


def test_the_intro_rung_draws_one_command_tasks_its_shown_command_kinds_solve() -> None:
    """Every intro kind turns up; the shell line a user would write for it (the kinds the worked examples
    show, and the three they do not) passes the hidden check; the examples' files are in no workspace."""
    seen: dict[str, str] = {}
    for seed in range(40):
        env = make("workspace/shell_intro", seed=seed)
        seen.setdefault(env.problem.kind, env.problem.task.instruction)  # type: ignore[attr-defined]
    assert sorted(seen) == sorted(
        ("line_count", "word_count", "first_line", "last_line", "grep_count", "write_text")
    )
    commands = {
        "line_count": "wc -l < {path} > {out}",
        "word_count": "wc -w < {path} > {out}",
        "first_line": "head -n 1 {path} > {out}",
        "last_line": "tail -n 1 {path} > {out}",
    }
    for seed in range(12):
        env = make("workspace/shell_intro", seed=seed)
        problem = env.problem  # type: ignore[attr-defined]
        words = problem.task.instruction.rstrip(".").split()
        if problem.kind in commands:
            line = commands[problem.kind].format(path=words[-3], out=problem.output)
        elif problem.kind == "grep_count":
            line = f"grep -c {words[-3].strip(chr(39))} {words[6]} > {problem.output}"
        else:
            line = f"echo {words[-1]} > {problem.output}"
        result = play(env, [calls(env, ToolCall.create("bash", {"command": line}, "c1")), "Done."])[-1]
        assert result.metrics["success"] == 1.0, (problem.task.instruction, line, result.logs["grade"])
    shown = make("workspace/shell_intro").demonstration()  # type: ignore[attr-defined]
    assert [m["role"] for m in shown] == ["user", "assistant", "tool", "assistant"] * 3
    assert not {"notes.txt", "todo.txt"} & set(make("workspace/shell_intro").spec.files)  # type: ignore[attr-defined]


def test_written_credit_pays_a_wrong_output_in_the_asked_file_and_nothing_else() -> None:
    """The shaping is below the check's 1 and goes only to the asked file: the wrong number there earns
    it, the same number elsewhere or an emptied input earns nothing, the right output earns 1."""
    env_args = {"written_credit": 0.3, "tool_use_reward": 0.1}

    def reward(content: str, path: str | None = None, closing: str = "Done.") -> float:
        env = make("workspace/shell_intro", seed=5, **env_args)
        problem = env.problem  # type: ignore[attr-defined]
        line = f"echo {content} > {path or problem.output}"  # the intro rung has the bash tool alone
        write = ToolCall.create("bash", {"command": line}, "c1")
        return play(env, [calls(env, write), closing])[-1].reward

    expected = make("workspace/shell_intro", seed=5).problem.expected  # type: ignore[attr-defined]
    assert reward(expected) == 1.0
    assert reward("zzz") == pytest.approx(0.3)
    assert reward("zzz", closing="") == pytest.approx(-0.1)  # an empty last reply: the format penalty
    assert reward(expected, path="elsewhere.txt") == pytest.approx(
        0.1
    )  # a call and a closing reply  # a call and a closing reply
    with pytest.raises(ValueError, match="written_credit"):
        make("workspace/shell_intro", written_credit=1.0)
    checked = check_env("workspace/shell_intro-v0", model=TEST_MODEL, quick=True, **env_args)
    assert checked.passed, checked.failures


@pytest.mark.parametrize("env_id", FAMILY_IDS)
def test_train_and_test_draw_disjoint_tasks(env_id: str) -> None:
    keys = {split: {make(env_id, s, split=split).spec.key for s in range(12)} for split in ("train", "test")}  # type: ignore[attr-defined]
    assert keys["train"].isdisjoint(keys["test"]) and len(keys["train"]) > 6


def test_repo_hidden_suite_grades_the_module_not_the_visible_tests() -> None:
    env = make("workspace/repo", seed=5)
    problem = env.problem  # type: ignore[attr-defined]
    assert (
        "hidden" not in str(env.spec.files)
        and all(  # type: ignore[attr-defined]
            repr(expected) not in env.spec.files["tests/test_core.py"]  # type: ignore[attr-defined]
            for _, (args, expected) in problem.hidden[-3:]
            if len(repr(expected)) > 6
        )
    )
    fixed = make("workspace/repo", seed=5)
    fix = fixed.reference_calls()[0]  # type: ignore[attr-defined]
    run_tests = ToolCall.create("bash", {"command": "python3 -m unittest -q 2>&1 | tail -1"}, "c2")
    results = play(fixed, [calls(fixed, fix, run_tests), "Fixed."])
    assert "OK" in results[0].logs["calls"] and results[-1].reward == 1.0


def test_git_bisect_answer_is_checked_against_the_real_history() -> None:
    env = make("workspace/git_hard", seed=2)
    results = play(env, [env.reference_reply(), "Found it."])  # type: ignore[attr-defined]
    assert results[-1].reward == 1.0, results[-1].logs
    wrong = make("workspace/git_hard", seed=2)
    guess = ToolCall.create("bash", {"command": "cd repo && git rev-parse HEAD~1 > /work/answer.txt"}, "c1")
    assert play(wrong, [calls(wrong, guess), "Found it."])[-1].reward == 0.0


# The families' conformance (the reward-hacking probes included: a succeeded attack fails the report) is
# tests/test_conformance.py's, which checks every available catalog id with the same model: checking
# three of them again here cost ~90 s of the suite for no assertion of its own.


# ---- Harbor's task format ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", shipped_tasks())
def test_every_shipped_task_oracle_scores_1_and_doing_nothing_0(name: str) -> None:
    oracle = make(f"harbor/{name}")
    assert isinstance(oracle, HarborEnv) and oracle.reference_calls()
    final = play(oracle, [oracle.reference_reply() or "", "Done."])[-1]  # type: ignore[attr-defined]
    assert final.reward == 1.0, final.logs["grade"]
    idle = make(f"harbor/{name}")
    final = play(idle, ["Done."])[-1]
    assert final.reward == 0.0 and "reward.txt: 0" in final.logs["grade"]


def test_a_forged_reward_file_and_a_planted_verifier_earn_nothing() -> None:
    for attack in make("harbor/word-frequency").attacks():  # type: ignore[attr-defined]
        env = make("harbor/word-frequency")
        final = play(env, [calls(env, *attack.calls), "Done."])[-1]
        assert final.reward == 0.0, attack.name


def test_a_verifier_killed_before_its_end_scores_0_whatever_reward_it_left(tmp_path: Path) -> None:
    task = tmp_path / "killed"
    shutil.copytree(TASKS / "word-frequency", task)
    (task / "tests" / "test.sh").write_text(
        "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; kill -9 $$\n"
    )
    env = make(f"harbor:{task}")
    final = play(env, ["Done."])[-1]
    assert final.reward == 0.0 and "exit 137" in final.logs["grade"]


def test_any_task_folder_is_an_env_by_its_path(tmp_path: Path) -> None:
    task = tmp_path / "mine"
    shutil.copytree(TASKS / "csv-to-json", task)
    spec = envsuite.registry.spec(f"harbor:{task}")
    assert spec.unavailable is None and "harbor" in spec.tags
    env = make(f"harbor:{task}")
    assert play(env, [env.reference_reply() or "", "Done."])[-1].reward == 1.0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            lambda d: (d / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\n"),
            "needs a Docker build",
        ),
        (
            lambda d: (d / "task.toml").write_text('[environment]\ndocker_image = "org/img:1"\n'),
            "Docker image",
        ),
        (lambda d: (d / "task.toml").write_text("[environment]\ngpus = 1\n"), "GPU"),
        (lambda d: (d / "tests" / "test.sh").unlink(), "no tests/test.sh"),
        (lambda d: (d / "task.toml").write_text("version = \n"), "not valid TOML"),
        (
            lambda d: (d / "task.toml").write_text('[metadata]\nrequires = ["no-such-program-zz"]\n'),
            "needs no-such-program-zz in the sandbox's system",
        ),
    ],
)
def test_tasks_the_sandbox_cannot_run_are_refused_with_the_reason(
    tmp_path: Path, change: Any, reason: str
) -> None:
    task = tmp_path / "task"
    shutil.copytree(TASKS / "word-frequency", task)
    change(task)
    with pytest.raises(HarborTaskError, match=reason):
        load_harbor_task(task)
    spec = envsuite.registry.spec(f"harbor:{task}")
    assert spec.unavailable is not None and reason in spec.unavailable
    with pytest.raises(UnavailableEnvError, match=reason):
        make(f"harbor:{task}")


def test_task_toml_sets_the_limits() -> None:
    task = load_harbor_task(TASKS / "word-frequency")
    limits = task.limits()
    assert (limits.episode_wall_s, limits.memory_mb, limits.disk_mb) == (120.0, 1024, 256)
    assert task.verifier_timeout_s == 60.0


def test_a_process_the_agents_script_leaves_behind_cannot_rewrite_the_reward() -> None:
    """log-error-script's verifier runs the agent's script; one that leaves a loop renaming reward
    files into place won 1 of 5 episodes before the verifier ended every other process first."""
    loop = "while true; do echo 1 > /tmp/r.$$ && mv -f /tmp/r.$$ /logs/verifier/reward.txt; done"
    script = f"#!/bin/bash\n( setsid bash -c '{loop}' & ) >/dev/null 2>&1\necho wrong\n"
    for _ in range(4):
        env = make("harbor/log-error-script")
        plant = [
            ToolCall.create("write_file", {"path": "/app/errors.sh", "content": script}, "c1"),
            ToolCall.create("bash", {"command": "chmod +x /app/errors.sh"}, "c2"),
        ]
        final = play(env, [calls(env, *plant), "Done."])[-1]
        assert final.reward == 0.0, final.logs["grade"]
