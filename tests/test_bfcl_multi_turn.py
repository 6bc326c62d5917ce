"""BFCL's multi-turn categories as catalog envs on BFCL's own simulated APIs: the ground truth played
through the env scores 1 by BFCL's own multi-turn checker, wrong play scores 0, the env's live results
are BFCL's execution's, held-out functions arrive on their turn, the step limit forces a quit as BFCL's
does, and nothing of the model's text reaches BFCL's ``eval`` as code."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

import envsuite
from envsuite.core import StepResult, StopReason, ToolCall
from envsuite.renderers import reply_to_tokens
from tests.conftest import TEST_MODEL

pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (pip install --no-deps bfcl-eval)")

from envsuite.envs.bfcl import MULTI_TURN_CATEGORIES, NO_CALL_REPLY, BfclMultiTurnEnv, env_id

SPREAD = (0, 37, 101, 199)
"""Entries per category played to the end here (the whole 800 are played by the sweep in docs/bfcl.md)."""


def _env(category: str, seed: int) -> BfclMultiTurnEnv:
    env = envsuite.make_env(env_id(category), seed=seed, model=TEST_MODEL)
    assert isinstance(env, BfclMultiTurnEnv)
    return env


def _play(env: BfclMultiTurnEnv, replies: list[str]) -> list[StepResult]:
    async def go() -> list[StepResult]:
        await env.initial_observation()
        results = []
        for reply in replies:
            results.append(await env.step(reply_to_tokens(env.renderer, reply)))
            if results[-1].episode_done:
                break
        return results

    return asyncio.run(go())


def test_the_four_categories_are_listed_multi_turn_with_200_entries_each() -> None:
    for category in MULTI_TURN_CATEGORIES:
        spec = envsuite.registry.spec(env_id(category))
        assert spec.unavailable is None and spec.max_turns and spec.context_tokens, category
        assert "multi-turn" in spec.tags and envsuite.env_family(spec) == "bfcl"
    seeds = {_env("multi_turn_base", seed).entry["id"] for seed in range(200)}
    assert len(seeds) == 200  # seeds 0..199 are the whole category


@pytest.mark.parametrize("category", MULTI_TURN_CATEGORIES)
def test_the_ground_truth_played_through_the_env_is_what_bfcls_checker_accepts(category: str) -> None:
    for seed in SPREAD:
        env = _env(category, seed)
        results = _play(env, env.reference_replies())
        final = results[-1]
        assert final.episode_done and final.stop_reason is StopReason.COMPLETED, (seed, final.logs)
        assert final.reward == 1.0 and final.metrics["correct"] == 1.0, (seed, final.logs)
        assert final.metrics["turns"] == len(env.entry["question"])


def test_wrong_or_missing_work_scores_0_with_bfcls_reason() -> None:
    env = _env("multi_turn_base", 0)
    silent = _play(env, [NO_CALL_REPLY] * 10)[-1]
    assert silent.reward == 0.0 and "empty_turn_model_response" in str(silent.logs["grade"])
    env = _env("multi_turn_base", 0)
    reference = env.reference_replies()
    first_only = reference[: reference.index(NO_CALL_REPLY) + 1] + [NO_CALL_REPLY] * 10
    assert _play(env, first_only)[-1].reward == 0.0


def test_the_envs_live_results_are_bfcls_own_execution_results() -> None:
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    from envsuite.envs.bfcl._multi_upstream import ApiSession, call_string, ground_truth_calls, load_answers

    for seed in SPREAD:
        env = _env("multi_turn_base", seed)
        entry, ours = env.entry, ApiSession(env.entry, "multi_turn_base")
        name = f"envsuite_test_{seed}"
        try:
            for turn in load_answers("multi_turn_base")[entry["id"]]:
                calls = [ground_truth_calls(c, ours) for c in turn]
                strings = [call_string(n, a, list(ours.methods)) for n, a in calls]
                theirs, _ = multi_turn_utils.execute_multi_turn_func_call(
                    strings, entry["initial_config"], entry["involved_classes"], name, entry["id"]
                )
                assert [ours.run(n, a) for n, a in calls] == theirs
        finally:
            for key in [k for k in vars(multi_turn_utils) if name in k]:
                delattr(multi_turn_utils, key)


def test_held_out_functions_are_declared_on_their_turn_with_bfcls_message() -> None:
    env = _env("multi_turn_miss_func", 0)  # its turn 3 adds `sort`
    reference = env.reference_replies()
    assert "sort" not in {t["name"] for t in env.tool_specs()}
    results = _play(env, reference)
    assert "sort" in {t["name"] for t in env.tool_specs()}
    assert any("updated some more functions" in str(m["content"]) for m in env.conversation())
    assert results[-1].reward == 1.0


def test_more_than_bfcls_step_limit_in_a_turn_forces_a_quit_that_fails() -> None:
    env = _env("multi_turn_base", 0)
    looking = env._reply_text([ToolCall.create("pwd", {}, "c")])
    results = _play(env, [looking] * 30)
    assert len(results) == 21 and results[-1].episode_done  # BFCL: more than 20 steps, forced to quit
    assert results[-1].stop_reason is StopReason.MAX_TURNS and results[-1].reward == 0.0


def test_the_models_text_never_runs_as_code_in_bfcls_checker(tmp_path: Path) -> None:
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    from envsuite.envs.bfcl._multi_upstream import UNDEFINED_CALL, call_string

    planted = tmp_path / "planted"
    known = ["ls", "cd"]
    attacks: list[tuple[str, Any]] = [
        ("open", {"file": str(planted), "mode": "w"}),  # a builtin BFCL's eval would run
        ("ls", {f"a=open({str(planted)!r},'w') or 1,b": 1}),  # an argument name that is code
        ("__import__", {"name": "os"}),
        ("ls", {"a": float("nan")}),  # a value whose repr is no literal
    ]
    assert all(call_string(name, args, known) == UNDEFINED_CALL for name, args in attacks)
    assert call_string("cd", {"folder": "doc's"}, known) == 'cd(folder="doc\'s")'
    env = _env("multi_turn_base", 0)
    hostile = env._reply_text([ToolCall.create("open", {"file": str(planted), "mode": "w"}, "x")])
    env_result = _play(env, [hostile, NO_CALL_REPLY] * 10)[-1]
    assert env_result.reward == 0.0 and not planted.exists()
    assert not [k for k in vars(multi_turn_utils) if k.startswith("envsuite_")]  # its instances removed
    assert os.path.exists(tmp_path)
