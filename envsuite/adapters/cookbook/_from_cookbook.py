"""tinker-cookbook envs inside envsuite: wrap their Env / EnvGroupBuilder / RLDataset in our contracts.

tinker-cookbook's ``rl.types`` has the same names and call signatures as :mod:`envsuite.core`, so the
adapters only bridge types. Their envs are used duck-typed (tinker-cookbook need not be importable):

* their ``StepResult`` has no ``stop_reason`` field; the final step's ``stop/<reason>`` metric says why,
  and reasons we lack map onto ours (``tool_stopped`` -> completed, ``max_sampled_tokens`` ->
  max_tokens, ``max_tool_calls`` -> max_turns; none at all -> completed);
* their ``InitialObservationOverflow`` carries a reward instead of token counts; the adapter also
  enforces envsuite's own ``max_context_tokens`` on the first prompt;
* an exception from their ``step`` ends the episode with :attr:`StopReason.ENV_ERROR` (our contract
  says a bad action is never an exception).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from envsuite._make import CatalogGroupBuilder
from envsuite.core import (
    STOP_METRIC_PREFIX,
    Action,
    Env,
    EnvContext,
    EnvGroupBuilder,
    InitialObservationOverflow,
    Logs,
    Metrics,
    Observation,
    RLDataset,
    RLDatasetBuilder,
    StepResult,
    StopCondition,
    StopReason,
    Trajectory,
)
from envsuite.registration import EnvSpec

_REASON_ALIASES = {
    "tool_stopped": StopReason.COMPLETED,
    "max_sampled_tokens": StopReason.MAX_TOKENS,
    "max_tool_calls": StopReason.MAX_TURNS,
}
_MAX_ERROR_CHARS = 500


class CookbookEnvLike(Protocol):
    """What envsuite needs of a tinker-cookbook ``Env`` (their ``step`` also takes ``extra=``)."""

    async def initial_observation(self) -> Any: ...

    async def step(self, action: Action) -> Any: ...


class CookbookGroupBuilderLike(Protocol):
    """What envsuite needs of a tinker-cookbook ``EnvGroupBuilder``."""

    async def make_envs(self) -> Sequence[Any]: ...

    async def compute_group_rewards(
        self, trajectory_group: list[Any], env_group: Sequence[Any]
    ) -> list[tuple[float, Metrics]]: ...

    async def cleanup(self) -> None: ...

    def logging_tags(self) -> list[str]: ...


def stop_reason_from_metrics(metrics: Mapping[str, float | int]) -> tuple[StopReason, str | None]:
    """Our stop reason for a final step's metrics, and their own reason name when it had to be mapped."""
    named = [key[len(STOP_METRIC_PREFIX) :] for key in metrics if key.startswith(STOP_METRIC_PREFIX)]
    if not named:
        return StopReason.COMPLETED, None
    try:
        return StopReason(named[0]), None
    except ValueError:
        return _REASON_ALIASES.get(named[0], StopReason.COMPLETED), named[0]


class CookbookEnvAdapter(Env):
    """An envsuite :class:`~envsuite.core.Env` that runs a tinker-cookbook env."""

    def __init__(
        self,
        inner: CookbookEnvLike,
        *,
        max_context_tokens: int | None = None,
        builder: CookbookGroupBuilderLike | None = None,
    ) -> None:
        self.inner = inner
        self.max_context_tokens = max_context_tokens
        self.builder = builder
        """The cookbook group builder that made ``inner`` (for group rewards), if known."""
        self._stop: StopCondition = []
        self._last_ob: Observation | None = None

    async def initial_observation(self) -> tuple[Observation, StopCondition] | InitialObservationOverflow:
        start = await self.inner.initial_observation()
        budget = self.max_context_tokens if self.max_context_tokens is not None else 0
        if not isinstance(start, tuple):
            # Their overflow sentinel does not say how long the prompt was: 0 means unknown.
            return InitialObservationOverflow(prompt_tokens=0, max_tokens=budget)
        ob, stop = start
        if self.max_context_tokens is not None and ob.length > self.max_context_tokens:
            return InitialObservationOverflow(prompt_tokens=ob.length, max_tokens=self.max_context_tokens)
        self._stop, self._last_ob = stop, ob
        return ob, stop

    async def step(self, action: Action) -> StepResult:
        try:
            result = await self.inner.step(action)
        except Exception as exc:
            import tinker  # only here: importing this package must stay light (it hosts a plugin)

            return StepResult.final(
                reward=0.0,
                stop_reason=StopReason.ENV_ERROR,
                next_observation=self._last_ob
                if self._last_ob is not None
                else tinker.ModelInput.from_ints([]),
                next_stop_condition=self._stop,
                logs={"error": repr(exc)[:_MAX_ERROR_CHARS]},
            )
        metrics: Metrics = {
            k: v for k, v in dict(result.metrics).items() if not k.startswith(STOP_METRIC_PREFIX)
        }
        logs: Logs = dict(result.logs)
        self._stop, self._last_ob = result.next_stop_condition, result.next_observation
        if not result.episode_done:
            return StepResult(float(result.reward), False, result.next_observation, self._stop, metrics, logs)
        reason, original = stop_reason_from_metrics(result.metrics)
        if original is not None:
            logs["cookbook_stop_reason"] = original
        return StepResult.final(
            float(result.reward), reason, result.next_observation, self._stop, metrics, logs
        )


def _to_cookbook_trajectory(trajectory: Trajectory) -> Any:
    """Their Trajectory when tinker-cookbook is importable; ours otherwise (the field names agree)."""
    try:
        types = importlib.import_module("tinker_cookbook.rl.types")
        completers = importlib.import_module("tinker_cookbook.completers")
    except ImportError:
        return trajectory
    transitions = [
        types.Transition(
            ob=t.ob,
            ac=completers.TokensWithLogprobs(tokens=t.ac.tokens, maybe_logprobs=t.ac.maybe_logprobs),
            reward=t.reward,
            episode_done=t.episode_done,
            metrics=dict(t.metrics),
            logs=dict(t.logs),
        )
        for t in trajectory.transitions
    ]
    reason = trajectory.stop_reason
    return types.Trajectory(transitions, trajectory.final_ob, reason.value if reason else None)


async def cookbook_group_rewards(
    builder: CookbookGroupBuilderLike, trajectories_G: list[Trajectory], env_G: Sequence[Env]
) -> list[tuple[float, Metrics]]:
    """Their ``compute_group_rewards`` on our trajectories, given the adapters of their envs."""
    inner_G = [env.inner if isinstance(env, CookbookEnvAdapter) else env for env in env_G]
    cookbook_G = [_to_cookbook_trajectory(t) for t in trajectories_G]
    rewards = await builder.compute_group_rewards(cookbook_G, inner_G)
    return [(float(reward), dict(metrics)) for reward, metrics in rewards]


@dataclass(frozen=True)
class CookbookGroupBuilderAdapter(EnvGroupBuilder):
    """An envsuite group builder around a (picklable) tinker-cookbook group builder."""

    inner: CookbookGroupBuilderLike
    max_context_tokens: int | None = None

    async def make_envs(self) -> Sequence[Env]:
        envs = await self.inner.make_envs()
        return [
            CookbookEnvAdapter(e, max_context_tokens=self.max_context_tokens, builder=self.inner)
            for e in envs
        ]

    async def compute_group_rewards(
        self, trajectories_G: list[Trajectory], env_G: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        return await cookbook_group_rewards(self.inner, trajectories_G, env_G)

    async def cleanup(self) -> None:
        await self.inner.cleanup()

    def logging_tags(self) -> list[str]:
        return list(self.inner.logging_tags())


@dataclass(frozen=True)
class CookbookDatasetAdapter(RLDataset):
    """Batches of a tinker-cookbook ``RLDataset``, each group wrapped."""

    inner: Any
    max_context_tokens: int | None = None

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return [CookbookGroupBuilderAdapter(b, self.max_context_tokens) for b in self.inner.get_batch(index)]

    def __len__(self) -> int:
        return len(self.inner)


@dataclass(frozen=True)
class CookbookDatasetBuilderAdapter(RLDatasetBuilder):
    """A tinker-cookbook ``RLDatasetBuilder`` (an async callable giving ``(train, test)``) as ours."""

    inner: Any
    max_context_tokens: int | None = None

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        train, test = await self.inner()
        wrapped_test = CookbookDatasetAdapter(test, self.max_context_tokens) if test is not None else None
        return CookbookDatasetAdapter(train, self.max_context_tokens), wrapped_test


# -- the catalog ---------------------------------------------------------------------------------


def load_builder_factory(factory: str) -> Any:
    """Import ``"package.module:function"`` (a cookbook group-builder factory)."""
    module_name, _, attr = factory.partition(":")
    if not attr:
        raise ValueError(f"builder_factory {factory!r} must look like 'package.module:function'")
    found: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        found = getattr(found, part)
    if not callable(found):
        raise TypeError(f"builder_factory {factory!r} is not callable")
    return found


def build_cookbook_group(
    ctx: EnvContext, group_size: int, builder_factory: str, factory_kwargs: Mapping[str, Any]
) -> CookbookGroupBuilderLike:
    """Call the registered factory: ``factory(ctx, group_size, **kwargs) -> their EnvGroupBuilder``."""
    builder = load_builder_factory(builder_factory)(ctx, group_size, **factory_kwargs)
    if not callable(getattr(builder, "make_envs", None)):
        raise TypeError(f"{builder_factory} returned {type(builder).__name__}, not an EnvGroupBuilder")
    return cast("CookbookGroupBuilderLike", builder)


class CookbookCatalogEnv(CookbookEnvAdapter):
    """The catalog entry point for cookbook envs: member 0 of the group the factory builds for ``ctx``."""

    def __init__(self, ctx: EnvContext, *, builder_factory: str, **factory_kwargs: Any) -> None:
        self.ctx = ctx
        self._factory = builder_factory
        self._factory_kwargs = factory_kwargs
        super().__init__(_Unstarted(), max_context_tokens=ctx.max_context_tokens)

    async def initial_observation(self) -> tuple[Observation, StopCondition] | InitialObservationOverflow:
        builder = build_cookbook_group(self.ctx, 1, self._factory, self._factory_kwargs)
        envs = await builder.make_envs()
        if not envs:
            raise ValueError(f"{self._factory} built a group with no envs")
        self.inner, self.builder = envs[0], builder
        return await super().initial_observation()


class _Unstarted:
    """Stands in for the cookbook env until :meth:`CookbookCatalogEnv.initial_observation` builds it."""

    async def initial_observation(self) -> Any:
        raise RuntimeError("the cookbook env is built by initial_observation()")

    async def step(self, action: Action) -> Any:
        raise RuntimeError("step() called before initial_observation()")


@dataclass(frozen=True)
class CookbookCatalogGroupBuilder(CatalogGroupBuilder):
    """The catalog's group builder for cookbook envs: one factory call per group, group rewards theirs."""

    _made: list[CookbookGroupBuilderLike] = field(default_factory=list, compare=False, repr=False)
    """Cookbook builders made so far, released by :meth:`cleanup` (empty when pickled before use)."""

    async def make_envs(self) -> Sequence[Env]:
        env_spec = self.env_spec
        kwargs = dict(self.env_kwargs)
        factory = str(kwargs.pop("builder_factory"))
        ctx = EnvContext(
            seed=self.seed,
            renderer=self.renderer.build(),
            split=self.split,
            max_context_tokens=self.max_context_tokens,
            env_id=env_spec.id,
        )
        builder = build_cookbook_group(ctx, self.group_size, factory, kwargs)
        self._made.append(builder)
        envs = await builder.make_envs()
        if len(envs) != self.group_size:
            raise ValueError(f"{factory} made {len(envs)} envs for a group of {self.group_size}")
        return [
            CookbookEnvAdapter(e, max_context_tokens=self.max_context_tokens, builder=builder) for e in envs
        ]

    async def compute_group_rewards(
        self, trajectories_G: list[Trajectory], env_G: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        builders = {
            id(e.builder): e.builder for e in env_G if isinstance(e, CookbookEnvAdapter) and e.builder
        }
        if len(builders) != 1:
            return await super().compute_group_rewards(trajectories_G, env_G)
        return await cookbook_group_rewards(next(iter(builders.values())), trajectories_G, env_G)

    async def cleanup(self) -> None:
        while self._made:
            await self._made.pop().cleanup()


def register_cookbook_env(
    env_id: str,
    builder_factory: str,
    *,
    factory_kwargs: Mapping[str, Any] | None = None,
    **spec_fields: Any,
) -> EnvSpec:
    """Add a tinker-cookbook env to the catalog under ``env_id``.

    ``builder_factory`` names ``"module:function"`` with signature
    ``function(ctx: EnvContext, group_size: int, **factory_kwargs) -> their EnvGroupBuilder``: it builds
    the group that plays the episode ``ctx.seed`` picks (``ctx.renderer`` and ``ctx.split`` are
    envsuite's). Once registered, ``make_env``, ``make_group_builder``, ``make_dataset_builder``,
    ``envsuite check``, ``bench`` and ``train`` all work on the id; group rewards are theirs.
    """
    from envsuite.registration import register

    return register(
        env_id,
        entry_point="envsuite.adapters.cookbook:CookbookCatalogEnv",
        kwargs={"builder_factory": builder_factory, **dict(factory_kwargs or {})},
        group_builder_entry_point="envsuite.adapters.cookbook:CookbookCatalogGroupBuilder",
        **spec_fields,
    )
