"""tinker-cookbook interop both ways, and reasoning-gym datasets as catalog envs.

tinker-cookbook cannot be installed next to this project (every release pins transformers<=5.5.4), so
the cookbook-side classes here are written in its shapes (their StepResult has no stop_reason, their
step takes ``extra=``, their builders compute pairwise group rewards); the tests that need the real
package skip with the reason when it is missing.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import tinker

import envsuite
from envsuite.adapters.cookbook import (
    COOKBOOK_MISSING,
    CompleterForCookbook,
    CookbookDatasetBuilderAdapter,
    CookbookEnvAdapter,
    EnvForCookbook,
    GroupBuilderForCookbook,
    register_cookbook_env,
    stop_reason_from_metrics,
)
from envsuite.completers import ScriptedTokenCompleter
from envsuite.core import EnvContext, StopReason, Trajectory
from envsuite.rollouts import do_group_rollout
from envsuite.testing import check_env
from tests.conftest import TEST_MODEL

SECRETS = ("apple", "river", "stone", "cloud", "ember", "maple", "orbit", "tiger")


@dataclass
class CbStepResult:
    """tinker-cookbook's StepResult shape: no stop_reason field, the reason is a stop/ metric."""

    reward: float
    episode_done: bool
    next_observation: tinker.ModelInput
    next_stop_condition: list[int]
    metrics: dict[str, float] = field(default_factory=dict)
    logs: dict[str, str | int | float] = field(default_factory=dict)


class SayTheWordEnv:
    """A cookbook-style env: say the secret word. It raises on an empty reply, as fragile envs do."""

    def __init__(self, secret: str, renderer: Any) -> None:
        self.secret, self.renderer = secret, renderer

    async def initial_observation(self) -> tuple[tinker.ModelInput, list[int]]:
        prompt = self.renderer.build_generation_prompt([{"role": "user", "content": f"Say {self.secret}."}])
        return prompt, self.renderer.get_stop_sequences()

    async def step(self, action: list[int], *, extra: Any = None) -> CbStepResult:
        if not action:
            raise ValueError("empty action")
        text = self.renderer.tokenizer.decode(action)
        reward = float(self.secret in text)
        return CbStepResult(reward, True, tinker.ModelInput.from_ints(action), [], {"stop/tool_stopped": 1.0})


@dataclass(frozen=True)
class SayTheWordGroup:
    """A cookbook-style group builder whose group reward is a bonus for the shortest reply."""

    secret: str
    group_size: int
    model: str

    async def make_envs(self) -> Sequence[SayTheWordEnv]:
        renderer = envsuite.RendererConfig(self.model).build()
        return [SayTheWordEnv(self.secret, renderer) for _ in range(self.group_size)]

    async def compute_group_rewards(
        self, trajectory_group: list[Any], env_group: Sequence[Any]
    ) -> list[tuple[float, dict[str, float]]]:
        assert all(isinstance(env, SayTheWordEnv) for env in env_group)
        lengths = [sum(len(t.ac.tokens) for t in traj.transitions) for traj in trajectory_group]
        return [(0.5 if n == min(lengths) else 0.0, {"reply_tokens": float(n)}) for n in lengths]

    async def cleanup(self) -> None:
        return None

    def logging_tags(self) -> list[str]:
        return ["say_the_word"]


def make_say_the_word(ctx: EnvContext, group_size: int, *, model: str = TEST_MODEL) -> SayTheWordGroup:
    """The registered factory: the seed picks the secret."""
    return SayTheWordGroup(SECRETS[ctx.seed % len(SECRETS)], group_size, model)


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


def test_a_registered_cookbook_env_passes_the_conformance_checker(cookbook_env_id: str) -> None:
    report = check_env(cookbook_env_id, model=TEST_MODEL)
    assert report.passed, report.render()


async def test_cookbook_stop_reasons_and_exceptions_become_ours(cookbook_env_id: str) -> None:
    env = envsuite.make_env(cookbook_env_id, seed=0, model=TEST_MODEL)
    assert isinstance(env, CookbookEnvAdapter)
    await env.initial_observation()
    result = await env.step(_reply("apple"))
    assert result.reward == 1.0 and result.stop_reason is StopReason.COMPLETED
    assert result.metrics == {"stop/completed": 1.0} and result.logs["cookbook_stop_reason"] == "tool_stopped"
    broken = envsuite.make_env(cookbook_env_id, seed=0, model=TEST_MODEL)
    await broken.initial_observation()
    failed = await broken.step([])
    assert failed.stop_reason is StopReason.ENV_ERROR and "empty action" in str(failed.logs["error"])
    assert stop_reason_from_metrics({"stop/max_sampled_tokens": 1.0}) == (
        StopReason.MAX_TOKENS,
        "max_sampled_tokens",
    )
    assert stop_reason_from_metrics({}) == (StopReason.COMPLETED, None)


async def test_cookbook_group_rewards_run_on_envsuite_rollouts(cookbook_env_id: str) -> None:
    builder = envsuite.make_group_builder(cookbook_env_id, group_size=2, seed=1, model=TEST_MODEL)
    policy = ScriptedTokenCompleter([_reply("river"), _reply("it is river")])
    result = await do_group_rollout(builder, policy)
    assert result.group is not None, result.error
    assert result.group.get_total_rewards() == [1.5, 1.0]
    first, second = result.group.metrics_G
    assert first["reply_tokens"] < second["reply_tokens"]


async def test_cookbook_datasets_wrap_into_envsuite_datasets() -> None:
    @dataclass(frozen=True)
    class Dataset:
        def get_batch(self, index: int) -> list[SayTheWordGroup]:
            return [SayTheWordGroup(SECRETS[index], 2, TEST_MODEL)]

        def __len__(self) -> int:
            return 3

    async def build() -> tuple[Dataset, None]:
        return Dataset(), None

    train, test = await CookbookDatasetBuilderAdapter(build)()
    assert len(train) == 3 and test is None
    envs = await train.get_batch(2)[0].make_envs()
    assert len(envs) == 2 and isinstance(envs[0], CookbookEnvAdapter)


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


# -- envsuite envs in tinker-cookbook's shapes (no tinker-cookbook needed to wrap) ----------------


async def test_envsuite_group_for_cookbook_keeps_rewards_and_unwraps_envs() -> None:
    builder = envsuite.make_group_builder("arithmetic", group_size=2, seed=0, model=TEST_MODEL)
    wrapped = GroupBuilderForCookbook(builder)
    envs = await wrapped.make_envs()
    assert all(isinstance(e, EnvForCookbook) for e in envs)
    trajectory = Trajectory([], tinker.ModelInput.from_ints([]))
    assert await wrapped.compute_group_rewards([trajectory, trajectory], envs) == [(0.0, {}), (0.0, {})]
    assert wrapped.logging_tags() == ["arithmetic"]


@pytest.mark.skipif(importlib.util.find_spec("tinker_cookbook") is not None, reason="cookbook installed")
def test_cookbook_side_types_fail_clearly_without_tinker_cookbook() -> None:
    env = EnvForCookbook(envsuite.make_env("arithmetic", model=TEST_MODEL))
    with pytest.raises(ImportError, match="transformers"):
        asyncio.run(env.initial_observation())
    assert "tinker-cookbook" in COOKBOOK_MISSING


# -- with the real tinker-cookbook ----------------------------------------------------------------


def _cookbook() -> Any:
    return pytest.importorskip("tinker_cookbook.rl.rollouts", reason=COOKBOOK_MISSING)


async def test_tinker_cookbook_rollouts_drive_an_envsuite_env() -> None:
    rollouts = _cookbook()
    builder = GroupBuilderForCookbook(
        envsuite.make_group_builder("arithmetic", group_size=2, seed=3, model=TEST_MODEL)
    )
    policy = CompleterForCookbook(ScriptedTokenCompleter([_reply("7"), _reply("I am not sure.")]))
    group = await rollouts.do_group_rollout(builder, policy)
    assert len(group.trajectories_G) == 2
    assert all(t.stop_reason in ("completed", "parse_error") for t in group.trajectories_G)
    assert all(
        len(t.transitions) == 1 and t.transitions[0].ac.stop_reason == "stop" for t in group.trajectories_G
    )


def make_real_cookbook_group(ctx: EnvContext, group_size: int) -> Any:
    """A factory building real tinker_cookbook.rl.types subclasses (only called when it is installed)."""
    from tinker_cookbook.rl import types as cb

    secret = SECRETS[ctx.seed % len(SECRETS)]

    class RealSayTheWordEnv(cb.Env):
        def __init__(self) -> None:
            self.inner = SayTheWordEnv(secret, ctx.renderer)

        async def initial_observation(self) -> Any:
            return await self.inner.initial_observation()

        async def step(self, action: list[int], *, extra: Any = None) -> Any:
            ours = await self.inner.step(action or [0], extra=extra)
            return cb.StepResult(ours.reward, True, ours.next_observation, [], {"stop/completed": 1.0})

    class RealGroup(cb.EnvGroupBuilder):
        async def make_envs(self) -> Sequence[Any]:
            return [RealSayTheWordEnv() for _ in range(group_size)]

    return RealGroup()


def test_a_real_tinker_cookbook_env_registers_and_conforms_here() -> None:
    _cookbook()
    register_cookbook_env("scratch/real_cookbook-v0", "tests.test_interop:make_real_cookbook_group")
    try:
        report = check_env("scratch/real_cookbook", model=TEST_MODEL)
        assert report.passed, report.render()
        env = envsuite.make_env("scratch/real_cookbook", seed=0, model=TEST_MODEL)
        asyncio.run(env.initial_observation())
        result = asyncio.run(env.step(_reply("apple")))
        assert result.reward == 1.0 and result.stop_reason is StopReason.COMPLETED
    finally:
        envsuite.registry.unregister("scratch/real_cookbook-v0")


# -- reasoning-gym ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reasoning_gym_ids() -> list[str]:
    pytest.importorskip(
        "reasoning_gym", reason="reasoning-gym is not installed (pip install 'envsuite[reasoning-gym]')"
    )
    from envsuite.adapters.reasoning_gym import DEFAULT_DATASETS, register_reasoning_gym

    register_reasoning_gym()
    return [f"reasoning_gym/{name}-v0" for name in DEFAULT_DATASETS]


@pytest.mark.parametrize("name", ["chain_sum", "word_sorting", "caesar_cipher"])
def test_reasoning_gym_envs_conform(reasoning_gym_ids: list[str], name: str) -> None:
    assert f"reasoning_gym/{name}-v0" in reasoning_gym_ids
    report = check_env(f"reasoning_gym/{name}", model=TEST_MODEL)
    assert report.passed, report.render()


def test_reasoning_gym_scores_with_its_own_scorer(reasoning_gym_ids: list[str]) -> None:
    gym_env = envsuite.make("reasoning_gym/chain_sum", mode="text", model=TEST_MODEL)
    gym_env.reset(seed=5)
    _, reward, done, _, info = gym_env.step("<answer>no idea</answer>")
    assert done and reward == 0.0 and info["metrics"]["score"] == 0.0
    reference = info["logs"]["reference"]
    gym_env.reset(seed=5)
    _, reward, _, _, info = gym_env.step(f"<answer>{reference}</answer>")
    assert reward == 1.0 and info["metrics"]["score"] == 1.0
    gym_env.reset(seed=5)
    _, reward, _, _, info = gym_env.step(f"The sum is\n{reference}")
    assert reward == pytest.approx(0.9), "right answer outside the tags loses only the format bonus"
