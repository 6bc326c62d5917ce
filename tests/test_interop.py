"""tinker-cookbook interop both ways without adapters (reasoning-gym: tests/test_reasoning_gym.py).

tinker-cookbook 0.5.8 is installed in the test environment (``--no-deps``; its imports come from the
dev extras), so these tests use its real classes: its envs in envsuite's catalog, checker, rollouts and
trainer, and envsuite's builders and completers in its ``do_group_rollout``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import tinker
from tinker_cookbook.rl import rollouts as cb_rollouts
from tinker_cookbook.rl import types as cb

import envsuite
from envsuite.adapters.cookbook import CookbookCatalogEnv, GroupBuilderForCookbook, register_cookbook_env
from envsuite.completers import ScriptedTokenCompleter
from envsuite.core import EnvContext, StopReason
from envsuite.rollouts import do_group_rollout
from envsuite.testing import CheckOutcome, check_env
from tests.conftest import TEST_MODEL

SECRETS = ("apple", "river", "stone", "cloud", "ember", "maple", "orbit", "tiger")


class SayTheWordEnv(cb.Env):
    """A tinker-cookbook env: say the secret word. It raises on an empty reply, as fragile envs do."""

    def __init__(self, secret: str, renderer: Any) -> None:
        self.secret, self.renderer = secret, renderer

    async def initial_observation(self) -> tuple[tinker.ModelInput, list[int]]:
        prompt = self.renderer.build_generation_prompt([{"role": "user", "content": f"Say {self.secret}."}])
        return prompt, self.renderer.get_stop_sequences()

    async def step(self, action: list[int], *, extra: cb.ActionExtra | None = None) -> cb.StepResult:
        if not action:
            raise ValueError("empty action")
        message, termination = self.renderer.parse_response(action)
        reward = float(self.secret in message["content"] and termination.is_clean)
        return cb.StepResult(
            reward, True, tinker.ModelInput.from_ints(action), [], {"stop/tool_stopped": 1.0}
        )


class SayTheWordGroup(cb.EnvGroupBuilder):
    """A tinker-cookbook group builder whose group reward is a bonus for the shortest reply."""

    def __init__(self, secret: str, group_size: int, renderer: Any) -> None:
        self.secret, self.group_size, self.renderer = secret, group_size, renderer

    async def make_envs(self) -> Sequence[cb.Env]:
        return [SayTheWordEnv(self.secret, self.renderer) for _ in range(self.group_size)]

    async def compute_group_rewards(
        self, trajectory_group: list[cb.Trajectory], env_group: Sequence[cb.Env]
    ) -> list[tuple[float, cb.Metrics]]:
        assert all(isinstance(env, SayTheWordEnv) for env in env_group)
        lengths = [sum(len(t.ac.tokens) for t in traj.transitions) for traj in trajectory_group]
        return [(0.5 if n == min(lengths) else 0.0, {"reply_tokens": float(n)}) for n in lengths]

    def logging_tags(self) -> list[str]:
        return ["say_the_word"]


def make_say_the_word(ctx: EnvContext, group_size: int) -> SayTheWordGroup:
    """The registered factory: the seed picks the secret; the renderer is envsuite's."""
    return SayTheWordGroup(SECRETS[ctx.seed % len(SECRETS)], group_size, ctx.renderer)


@pytest.fixture
def cookbook_env_id() -> Iterator[str]:
    env_id = "scratch/say_the_word-v0"
    register_cookbook_env(
        env_id, "tests.test_interop:make_say_the_word", reward_range=(0.0, 1.5), description="cookbook env"
    )
    yield env_id
    envsuite.registry.unregister(env_id)


def _reply(text: str) -> list[int]:
    renderer = envsuite.RendererConfig(TEST_MODEL).build()
    stop = renderer.get_stop_sequences()
    return [*renderer.tokenizer.encode(text, add_special_tokens=False), int(stop[0])]


# -- tinker-cookbook envs in envsuite ------------------------------------------------------------


def test_a_registered_cookbook_env_passes_the_conformance_checker(cookbook_env_id: str) -> None:
    report = check_env(cookbook_env_id, model=TEST_MODEL)
    assert report.passed, report.render()
    # Their contract lets step raise on an empty reply; envsuite's rollouts record env_error: a warning.
    garbage = next(r for r in report.results if r.name == "garbage actions")
    assert garbage.outcome is CheckOutcome.WARNED and "empty: raised ValueError" in garbage.detail


async def test_cookbook_step_results_are_used_as_they_are(cookbook_env_id: str) -> None:
    env = envsuite.make_env(cookbook_env_id, seed=0, model=TEST_MODEL)
    assert isinstance(env, CookbookCatalogEnv)
    await env.initial_observation()
    result = await env.step(_reply("apple"))
    assert isinstance(result, cb.StepResult) and result.reward == 1.0
    assert result.metrics == {"stop/tool_stopped": 1.0}


async def test_cookbook_groups_run_in_envsuite_rollouts_with_their_rewards_and_errors(
    cookbook_env_id: str,
) -> None:
    builder = envsuite.make_group_builder(cookbook_env_id, group_size=2, seed=1, model=TEST_MODEL)
    result = await do_group_rollout(builder, ScriptedTokenCompleter([_reply("river"), _reply("it is river")]))
    assert result.group is not None, result.error
    assert result.group.get_total_rewards() == [1.5, 1.0]
    assert [t.stop_reason for t in result.group.trajectories_G] == ["tool_stopped", "tool_stopped"]
    first, second = result.group.metrics_G
    assert first["reply_tokens"] < second["reply_tokens"]
    failing = envsuite.make_group_builder(cookbook_env_id, group_size=2, seed=1, model=TEST_MODEL)
    broken = await do_group_rollout(failing, ScriptedTokenCompleter([[], _reply("river")]))
    assert broken.group is not None
    assert broken.group.trajectories_G[0].stop_reason == StopReason.ENV_ERROR
    assert [(e.error_type, e.error_message) for e in broken.group.rollout_errors] == [
        ("ValueError", "empty action")
    ]


async def test_a_cookbook_dataset_runs_in_envsuite_rollouts_directly() -> None:
    class Dataset(cb.RLDataset):
        def get_batch(self, index: int) -> list[SayTheWordGroup]:
            return [SayTheWordGroup(SECRETS[index], 2, envsuite.RendererConfig(TEST_MODEL).build())]

        def __len__(self) -> int:
            return 3

    builder = Dataset().get_batch(2)[0]
    result = await do_group_rollout(builder, ScriptedTokenCompleter([_reply("stone")], cycle=True))  # type: ignore[arg-type]
    assert result.group is not None and result.group.get_total_rewards() == [1.5, 1.5]


def test_a_cookbook_env_trains_with_envsuite_trainer(cookbook_env_id: str, tmp_path: Path) -> None:
    from envsuite.trainers import StopCause, TrainConfig, run_training

    config = TrainConfig(
        env_id=cookbook_env_id,
        log_dir=str(tmp_path / "run"),
        model=TEST_MODEL,
        n_steps=1,
        batch_size=1,
        group_size=2,
        max_tokens=8,
        eval_every=0,
        n_transcripts=0,
    )
    result = run_training(config, show_progress=False)
    assert result.cause is StopCause.COMPLETED and result.steps_completed == 1


# -- envsuite envs in tinker-cookbook --------------------------------------------------------------


async def test_tinker_cookbook_rollouts_run_envsuite_builders_and_completers_directly() -> None:
    builder = envsuite.make_group_builder("arithmetic", group_size=2, seed=3, model=TEST_MODEL)
    policy = ScriptedTokenCompleter([_reply("7"), _reply("I am not sure.")])
    group = await cb_rollouts.do_group_rollout(builder, policy)  # type: ignore[arg-type]
    assert len(group.trajectories_G) == 2
    assert sorted(str(t.stop_reason) for t in group.trajectories_G) in (
        ["completed", "parse_error"],
        ["parse_error", "parse_error"],
    )
    assert all(t.transitions[0].ac.stop_reason == "stop" for t in group.trajectories_G)


async def test_tinker_cookbook_runner_passes_a_token_budget_to_envsuite_completers() -> None:
    from tinker_cookbook.rl.rollout_limits import RolloutLimits
    from tinker_cookbook.rl.rollout_runner import run_rollout

    env = envsuite.make_env("arithmetic", seed=3, model=TEST_MODEL)
    policy = ScriptedTokenCompleter([_reply("the answer is 7")])
    trajectory = await run_rollout(policy, env, limits=RolloutLimits(max_turn_tokens=3))  # type: ignore[arg-type]
    assert (
        len(trajectory.transitions[0].ac.tokens) == 3 and trajectory.transitions[0].ac.stop_reason == "length"
    )
    assert trajectory.stop_reason == "max_tokens"


async def test_an_overflowing_envsuite_env_needs_the_group_builder_for_cookbook() -> None:
    builder = envsuite.make_group_builder(
        "arithmetic", group_size=2, seed=0, model=TEST_MODEL, max_context_tokens=4
    )
    with pytest.raises(TypeError):  # their runner knows only its own sentinel class
        await cb_rollouts.do_group_rollout(builder, ScriptedTokenCompleter([[1]]))  # type: ignore[arg-type]
    group = await cb_rollouts.do_group_rollout(
        GroupBuilderForCookbook(builder), ScriptedTokenCompleter([[1]])
    )  # type: ignore[arg-type]
    assert [t.stop_reason for t in group.trajectories_G] == ["max_tokens", "max_tokens"]


def test_envsuite_builders_pickle_for_cookbook_executors() -> None:
    import pickle

    builder = GroupBuilderForCookbook(
        envsuite.make_group_builder("arithmetic", group_size=2, seed=0, model=TEST_MODEL)
    )
    clone = pickle.loads(pickle.dumps(builder))
    assert asyncio.run(clone.make_envs())[0].env is not None
