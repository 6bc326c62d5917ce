"""tinker-cookbook envs in envsuite's catalog.

envsuite's contracts match tinker-cookbook 0.5.8's names and meanings, so its envs, group builders and
datasets run in envsuite's rollouts, trainer and checker as they are: their ``StepResult`` (which has
no ``stop_reason`` field) is read through its ``stop/<reason>`` metric, their overflow sentinel by its
fields, and an exception from their ``step`` ends the episode with ``StopReason.ENV_ERROR`` in the
rollout driver. What is left here is only what the catalog itself needs:

* a catalog entry is built from an :class:`~envsuite.core.EnvContext` (seed, renderer, split), which
  cookbook builders do not take: :func:`register_cookbook_env` names a factory
  ``(ctx, group_size, **kwargs) -> their EnvGroupBuilder``;
* ``make_env`` is synchronous but a cookbook env comes out of an ``async make_envs()``:
  :class:`CookbookCatalogEnv` builds it on ``initial_observation`` and then passes every call through
  unchanged (it also applies the catalog's ``max_context_tokens`` to the first prompt, as every
  catalog env does).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from envsuite.catalog._make import CatalogGroupBuilder
from envsuite.catalog.registration import EnvSpec
from envsuite.core import (
    Action,
    ActionExtra,
    Env,
    EnvContext,
    InitialObservationOverflow,
    Metrics,
    Observation,
    StepResult,
    StopCondition,
    StopReason,
    Trajectory,
    tokens_outside_vocabulary,
)

COOKBOOK_TAG = "tinker-cookbook"
"""The spec tag of catalog entries made by :func:`register_cookbook_env`: their contract lets ``step``
raise on a bad action (envsuite's rollouts record ``env_error``), so the checker warns where it fails
envsuite's own envs."""


class CookbookGroupBuilderLike(Protocol):
    """What envsuite needs of a tinker-cookbook ``EnvGroupBuilder`` (the same methods as ours)."""

    async def make_envs(self) -> Sequence[Any]: ...

    async def compute_group_rewards(
        self, trajectory_group: list[Any], env_group: Sequence[Any]
    ) -> list[tuple[float, Metrics]]: ...

    async def cleanup(self) -> None: ...

    def logging_tags(self) -> list[str]: ...


def load_builder_factory(factory: str) -> Callable[..., object]:
    """Import ``"package.module:function"`` (a cookbook group-builder factory)."""
    module_name, _, attr = factory.partition(":")
    if not attr:
        raise ValueError(f"builder_factory {factory!r} must look like 'package.module:function'")
    found: object = importlib.import_module(module_name)
    for part in attr.split("."):
        found = getattr(found, part)
    if not callable(found):
        raise TypeError(f"builder_factory {factory!r} is not callable")
    return found


def build_cookbook_group(
    ctx: EnvContext, group_size: int, builder_factory: str, factory_kwargs: Mapping[str, object]
) -> CookbookGroupBuilderLike:
    """Call the registered factory: ``factory(ctx, group_size, **kwargs) -> their EnvGroupBuilder``."""
    builder = load_builder_factory(builder_factory)(ctx, group_size, **factory_kwargs)
    if not callable(getattr(builder, "make_envs", None)):
        raise TypeError(f"{builder_factory} returned {type(builder).__name__}, not an EnvGroupBuilder")
    return cast("CookbookGroupBuilderLike", builder)


class CookbookCatalogEnv(Env):
    """The catalog's single env for a cookbook entry: member 0 of the group the factory builds for ``ctx``.

    Built on ``initial_observation``; after that every ``step`` is the cookbook env's own, result
    included (a cookbook ``StepResult``).
    """

    def __init__(self, ctx: EnvContext, *, builder_factory: str, **factory_kwargs: object) -> None:
        self.ctx = ctx
        self._factory = builder_factory
        self._factory_kwargs = factory_kwargs
        self.inner: Any = None
        """The cookbook env, once built."""
        self.builder: CookbookGroupBuilderLike | None = None
        self.last_observation: tuple[Observation, StopCondition] | None = None
        """The latest prompt and stop condition: what a final step with an invalid action shows."""

    async def initial_observation(self) -> tuple[Observation, StopCondition] | InitialObservationOverflow:
        self.builder = build_cookbook_group(self.ctx, 1, self._factory, self._factory_kwargs)
        envs = await self.builder.make_envs()
        if not envs:
            raise ValueError(f"{self._factory} built a group with no envs")
        self.inner = envs[0]
        start = await self.inner.initial_observation()
        if isinstance(start, tuple) and start[0].length > self.ctx.max_context_tokens:
            return InitialObservationOverflow.prompt_too_long(start[0].length, self.ctx.max_context_tokens)
        if isinstance(start, tuple):
            self.last_observation = (start[0], start[1])
        return cast("tuple[Observation, StopCondition] | InitialObservationOverflow", start)

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        if self.inner is None:
            raise RuntimeError("step() called before initial_observation()")
        outside = tokens_outside_vocabulary(action, self.ctx.renderer.vocab_size)
        if outside is not None:  # cookbook envs decode without checking; reward 0, the reason logged
            assert self.last_observation is not None
            observation, stop = self.last_observation
            return StepResult.final(0.0, StopReason.PARSE_ERROR, observation, stop, logs={"error": outside})
        result = cast("StepResult", await self.inner.step(action, extra=extra))
        self.last_observation = (result.next_observation, result.next_stop_condition)
        return result

    def conversation(self) -> list[Any]:
        inner_conversation = getattr(self.inner, "conversation", None)
        if callable(inner_conversation):
            return list(inner_conversation())
        # Their message-level envs (EnvFromMessageEnv: AgentToolMessageEnv, ...) keep the conversation
        # in the message env's history, tool definitions and results included.
        history = getattr(getattr(self.inner, "message_env", None), "history", None)
        return list(history) if isinstance(history, list) else []


@dataclass(frozen=True)
class CookbookCatalogGroupBuilder(CatalogGroupBuilder):
    """The catalog's group builder for cookbook entries: one factory call per group, their envs as they are."""

    _made: list[CookbookGroupBuilderLike] = field(default_factory=list, compare=False, repr=False)
    """Cookbook builders made so far, released by :meth:`cleanup` (empty when pickled before use)."""
    _owner_of: dict[int, CookbookGroupBuilderLike] = field(default_factory=dict, compare=False, repr=False)
    """Which cookbook builder made each env (by ``id``), for its group rewards."""

    async def make_envs(self) -> Sequence[Env]:
        kwargs = dict(self.env_kwargs)
        factory = str(kwargs.pop("builder_factory"))
        ctx = EnvContext(
            seed=self.seed,
            renderer=self.renderer.build(),
            split=self.split,
            max_context_tokens=self.max_context_tokens,
            env_id=self.env_spec.id,
        )
        builder = build_cookbook_group(ctx, self.group_size, factory, kwargs)
        self._made.append(builder)
        envs = await builder.make_envs()
        if len(envs) != self.group_size:
            raise ValueError(f"{factory} made {len(envs)} envs for a group of {self.group_size}")
        self._owner_of.update((id(env), builder) for env in envs)
        return cast("Sequence[Env]", envs)

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        owners = {id(b): b for b in (self._owner_of.get(id(env)) for env in env_group) if b is not None}
        if len(owners) != 1:
            return await super().compute_group_rewards(trajectory_group, env_group)
        return await next(iter(owners.values())).compute_group_rewards(trajectory_group, env_group)

    async def cleanup(self) -> None:
        while self._made:
            await self._made.pop().cleanup()
        self._owner_of.clear()


def register_cookbook_env(
    env_id: str,
    builder_factory: str,
    *,
    factory_kwargs: Mapping[str, object] | None = None,
    **spec_fields: Any,
) -> EnvSpec:
    """Add a tinker-cookbook env to the catalog under ``env_id``.

    ``builder_factory`` names ``"module:function"`` with signature
    ``function(ctx: EnvContext, group_size: int, **factory_kwargs) -> their EnvGroupBuilder``: it builds
    the group that plays the episode ``ctx.seed`` picks (``ctx.renderer`` and ``ctx.split`` are
    envsuite's). Once registered, ``make_env``, ``make_group_builder``, ``make_dataset_builder``,
    ``envsuite check``, ``bench`` and ``train`` all work on the id; group rewards are theirs. The spec
    is tagged ``tinker-cookbook`` (their contract lets ``step`` raise on a bad action, which the
    checker then reports as a warning rather than a failure).
    """
    from envsuite.catalog.registration import register

    tags = (*spec_fields.pop("tags", ()), COOKBOOK_TAG)
    return register(
        env_id,
        entry_point="envsuite.adapters.cookbook:CookbookCatalogEnv",
        kwargs={"builder_factory": builder_factory, **dict(factory_kwargs or {})},
        group_builder_entry_point="envsuite.adapters.cookbook:CookbookCatalogGroupBuilder",
        tags=tags,
        **spec_fields,
    )
