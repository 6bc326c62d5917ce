"""From one catalog id to every way of using the env: a single async env, a group, a dataset, a gym env.

Names are consistent: ``make_env`` (one single-use :class:`~envsuite.core.Env`), ``make_group_builder``
(an :class:`~envsuite.core.EnvGroupBuilder` of ``group_size`` envs sharing one episode),
``make_dataset_builder`` (an :class:`~envsuite.core.RLDatasetBuilder` of batches of groups) and ``make``
(a ``gymnasium.Env``, in ``envsuite.adapters``). All of them are plain data and pickle.

Each takes a catalog id or the :class:`~envsuite.catalog.registration.EnvSpec` it resolved to. The id is resolved
once, where a caller starts (a training run, a bench), and the spec travels from there: builders carry
it, so making a group or an env never looks the id up again (and a worker process makes envs of specs
registered only in the process that sent them).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from envsuite.catalog.registration import EnvKwargs, EnvKwargsError, EnvSpec, UnavailableEnvError, spec
from envsuite.core import Env, EnvContext, EnvGroupBuilder, RLDataset, RLDatasetBuilder, Split
from envsuite.errors import UsageError

if TYPE_CHECKING:
    from envsuite.renderers.base import Renderer

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_MAX_CONTEXT_TOKENS = 4096


@dataclass(frozen=True)
class RendererConfig:
    """Which tokenizer and chat format envs render for. Picklable; the renderer is built per process."""

    model_name: str = DEFAULT_MODEL
    """Model whose tokenizer is used (a known name, a local dir, or a hub id)."""
    renderer_name: str | None = None
    """Chat format; None picks the model's own (``chatml-smollm2`` for the embedded models)."""

    def build(self) -> Renderer:
        return _build_renderer(self.model_name, self.resolved_renderer_name)

    @property
    def resolved_renderer_name(self) -> str:
        if self.renderer_name is not None:
            return self.renderer_name
        from envsuite.models import default_renderer_name

        return default_renderer_name(self.model_name)


@functools.lru_cache(maxsize=16)
def _build_renderer(model_name: str, renderer_name: str) -> Renderer:
    from envsuite.models import get_tokenizer
    from envsuite.renderers import Tokenizer, get_renderer

    # HF tokenizers type decode() as str | list[str]; for a list of ids it always returns str.
    return get_renderer(renderer_name, cast("Tokenizer", get_tokenizer(model_name)))


EnvRef = str | EnvSpec
"""A catalog id (``[namespace/]name[-vN]``), or the spec an earlier lookup resolved it to."""


def available_spec(env_id: EnvRef) -> EnvSpec:
    """The spec for ``env_id`` (looked up only when it is an id), refusing envs the catalog lists as
    unable to run here."""
    env_spec = env_id if isinstance(env_id, EnvSpec) else spec(env_id)
    if env_spec.unavailable:
        raise UnavailableEnvError(f"{env_spec.id} cannot run here: {env_spec.unavailable}")
    return env_spec


def episode_seed(base_seed: int, *path: int | str) -> int:
    """A 63-bit seed derived from ``base_seed`` and a path (split, batch, problem): stable across runs."""
    digest = hashlib.blake2b(repr((base_seed, *path)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def env_context(
    env_id: str, seed: int, split: Split, renderer: RendererConfig, max_context_tokens: int
) -> EnvContext:
    """The context a catalog env is constructed with (the renderer is built once per process)."""
    return EnvContext(
        seed=seed,
        renderer=renderer.build(),
        split=split,
        max_context_tokens=max_context_tokens,
        env_id=env_id,
    )


def _renderer_config(renderer: RendererConfig | str | None, model: str | None) -> RendererConfig:
    if isinstance(renderer, RendererConfig):
        return renderer
    return RendererConfig(model_name=model or DEFAULT_MODEL, renderer_name=renderer)


def context_tokens(env_spec: EnvSpec, asked: int | None) -> int:
    """The context an env is made with: the caller's, else its spec's, else the default."""
    return asked or env_spec.context_tokens or DEFAULT_MAX_CONTEXT_TOKENS


def make_env(
    env_id: EnvRef,
    *,
    seed: int = 0,
    split: Split = "train",
    model: str | None = None,
    renderer: RendererConfig | str | None = None,
    max_context_tokens: int | None = None,
    **env_kwargs: object,
) -> Env:
    """One single-use async env for ``env_id`` playing the episode chosen by ``seed``.

    A value the env refuses among ``env_kwargs`` (its constructor's ``ValueError`` or ``TypeError``) is
    an :class:`EnvKwargsError`, a user's mistake, with the env's own message.
    """
    env_spec = available_spec(env_id)
    builder = CatalogGroupBuilder(
        env_spec=env_spec,
        env_kwargs=env_spec.resolve_kwargs(env_kwargs),
        seed=seed,
        group_size=1,
        split=split,
        renderer=_renderer_config(renderer, model),
        max_context_tokens=context_tokens(env_spec, max_context_tokens),
    )
    try:
        return builder.make_env()
    except UsageError:
        raise
    except (ValueError, TypeError) as exc:
        if not env_kwargs:
            raise  # nothing the caller passed: the env's own fault
        given = ", ".join(f"{key}={value!r}" for key, value in env_kwargs.items())
        raise EnvKwargsError(f"{env_spec.id} refused its keyword arguments ({given}): {exc}") from exc


def make_group_builder(
    env_id: EnvRef,
    *,
    group_size: int,
    seed: int = 0,
    split: Split = "train",
    model: str | None = None,
    renderer: RendererConfig | str | None = None,
    max_context_tokens: int | None = None,
    **env_kwargs: object,
) -> EnvGroupBuilder:
    """An EnvGroupBuilder of ``group_size`` envs that all play the episode chosen by ``seed``."""
    env_spec = available_spec(env_id)
    return _group_builder(
        env_spec,
        env_spec.resolve_kwargs(env_kwargs),
        seed=seed,
        group_size=group_size,
        split=split,
        renderer=_renderer_config(renderer, model),
        max_context_tokens=context_tokens(env_spec, max_context_tokens),
    )


def _group_builder(
    env_spec: EnvSpec,
    env_kwargs: EnvKwargs,
    *,
    seed: int,
    group_size: int,
    split: Split,
    renderer: RendererConfig,
    max_context_tokens: int,
) -> EnvGroupBuilder:
    """The spec's group builder (its own class, or :class:`CatalogGroupBuilder`) over resolved kwargs."""
    builder_cls = env_spec.load_group_builder() or CatalogGroupBuilder
    builder = builder_cls(
        env_spec=env_spec,
        env_kwargs=env_kwargs,
        seed=seed,
        group_size=group_size,
        split=split,
        renderer=renderer,
        max_context_tokens=max_context_tokens,
    )
    if not isinstance(builder, EnvGroupBuilder):
        raise TypeError(f"{env_spec.id}: group builder {builder_cls!r} is not an EnvGroupBuilder")
    return builder


def make_dataset_builder(
    env_id: EnvRef,
    *,
    batch_size: int,
    group_size: int,
    seed: int = 0,
    n_batches: int = 100,
    n_test_groups: int = 32,
    model: str | None = None,
    renderer: RendererConfig | str | None = None,
    max_context_tokens: int | None = None,
    **env_kwargs: object,
) -> CatalogDatasetBuilder:
    """An RLDatasetBuilder: ``n_batches`` train batches of ``batch_size`` groups, plus a test set."""
    if batch_size < 1 or group_size < 1 or n_batches < 1 or n_test_groups < 0:
        raise ValueError("batch_size, group_size and n_batches must be >= 1 and n_test_groups >= 0")
    env_spec = available_spec(env_id)
    return CatalogDatasetBuilder(
        env_spec=env_spec,
        env_kwargs=env_spec.resolve_kwargs(env_kwargs),
        batch_size=batch_size,
        group_size=group_size,
        seed=seed,
        n_batches=n_batches,
        n_test_groups=n_test_groups,
        renderer=_renderer_config(renderer, model),
        max_context_tokens=context_tokens(env_spec, max_context_tokens),
    )


@dataclass(frozen=True)
class CatalogGroupBuilder(EnvGroupBuilder):
    """The default group builder: ``group_size`` copies of one catalog env on one seed.

    A spec's own group builder (``group_builder_entry_point``) is built with these same fields; the
    multi-agent and cookbook builders subclass this one.
    """

    env_spec: EnvSpec
    """The env, resolved once by whoever made the builder (its id is :attr:`env_id`)."""
    env_kwargs: EnvKwargs
    """The constructor's keyword arguments, already merged with the spec's defaults and checked."""
    seed: int
    group_size: int
    split: Split = "train"
    renderer: RendererConfig = field(default_factory=RendererConfig)
    max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS

    @property
    def env_id(self) -> str:
        """The versioned catalog id."""
        return self.env_spec.id

    def make_env(self) -> Env:
        env_spec = self.env_spec
        ctx = env_context(env_spec.id, self.seed, self.split, self.renderer, self.max_context_tokens)
        env = env_spec.load()(ctx, **self.env_kwargs)
        if not isinstance(env, Env):
            raise TypeError(f"{env_spec.id}: entry point built {type(env).__name__}, not an envsuite Env")
        return env

    async def make_envs(self) -> Sequence[Env]:
        return [self.make_env() for _ in range(self.group_size)]

    def logging_tags(self) -> list[str]:
        return [self.env_spec.base_id]


@dataclass(frozen=True)
class CatalogDataset(RLDataset):
    """Batches of catalog groups; the seed of each group is derived from (seed, split, batch, problem)."""

    builder: CatalogDatasetBuilder
    split: Split
    n_batches: int
    batch_size: int

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        if not 0 <= index < self.n_batches:
            raise IndexError(f"batch {index} out of range for {self.n_batches} batches")
        b = self.builder
        return [
            _group_builder(
                b.env_spec,
                b.env_kwargs,
                group_size=b.group_size if self.split == "train" else 1,
                seed=episode_seed(b.seed, self.split, index, problem),
                split=self.split,
                renderer=b.renderer,
                max_context_tokens=b.max_context_tokens,
            )
            for problem in range(self.batch_size)
        ]

    def __len__(self) -> int:
        return self.n_batches


@dataclass(frozen=True)
class CatalogDatasetBuilder(RLDatasetBuilder):
    """Config for a catalog env's train and test datasets (test groups have one member each)."""

    env_spec: EnvSpec
    env_kwargs: EnvKwargs
    """Merged with the spec's defaults and checked once, when the builder was made."""
    batch_size: int
    group_size: int
    seed: int = 0
    n_batches: int = 100
    n_test_groups: int = 32
    renderer: RendererConfig = field(default_factory=RendererConfig)
    max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS

    @property
    def env_id(self) -> str:
        """The versioned catalog id."""
        return self.env_spec.id

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        train = CatalogDataset(self, "train", self.n_batches, self.batch_size)
        test = CatalogDataset(self, "test", 1, self.n_test_groups) if self.n_test_groups else None
        return train, test
