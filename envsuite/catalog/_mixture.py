"""Several catalog envs as one RL dataset: each batch's groups drawn from the envs by weight.

The shape of tinker-cookbook's composite/interleaved datasets, over catalog ids: every group comes from
exactly one env (its members play one episode, so group-centred advantages still compare like with
like), and envs may differ in anything (family, turns, reward scale). Slots are handed out by smooth
weighted round-robin over the whole run's sequence of slots, so over any stretch of batches each env
gets its weight's share of groups (exactly, up to one slot), interleaved rather than in blocks, and
batch ``i`` is the same in every run and after a resume. The test set is every env's own test groups,
one after the other; :meth:`EnvGroupBuilder.logging_tags` names each group's env.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envsuite.catalog._make import (
    DEFAULT_MAX_CONTEXT_TOKENS,
    EnvRef,
    RendererConfig,
    _renderer_config,
    make_dataset_builder,
)
from envsuite.core import EnvGroupBuilder, RLDataset, RLDatasetBuilder


def round_robin_slots(weights: Sequence[float], n_slots: int) -> list[int]:
    """Which source fills each of the first ``n_slots`` slots: smooth weighted round-robin (each step
    every source gains its weight; the one furthest ahead takes the slot and pays the total)."""
    if not weights or any(not w > 0 for w in weights):
        raise ValueError(f"mixture weights must be positive, got {list(weights)}")
    total = float(sum(weights))
    credit = [0.0] * len(weights)
    slots = []
    for _ in range(n_slots):
        for source, weight in enumerate(weights):
            credit[source] += weight
        pick = max(range(len(weights)), key=lambda s: (credit[s], -s))
        credit[pick] -= total
        slots.append(pick)
    return slots


@dataclass(frozen=True)
class MixtureDataset(RLDataset):
    """Train batches whose groups come from several envs' datasets, by weight."""

    sources: tuple[RLDataset, ...]
    weights: tuple[float, ...]
    batch_size: int
    n_batches: int

    @functools.cached_property
    def _slots(self) -> list[int]:
        return round_robin_slots(self.weights, self.n_batches * self.batch_size)

    def sources_of(self, index: int) -> list[int]:
        """The source of each group of batch ``index``."""
        return self._slots[index * self.batch_size : (index + 1) * self.batch_size]

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        if not 0 <= index < self.n_batches:
            raise IndexError(f"batch {index} out of range for {self.n_batches} batches")
        batches: dict[int, Sequence[EnvGroupBuilder]] = {}
        groups = []
        for problem, source in enumerate(self.sources_of(index)):
            if source not in batches:
                batches[source] = self.sources[source].get_batch(index)
            groups.append(batches[source][problem])
        return groups

    def __len__(self) -> int:
        return self.n_batches


@dataclass(frozen=True)
class ConcatDataset(RLDataset):
    """One batch: every source's first batch, one after the other (a mixture's test set)."""

    sources: tuple[RLDataset, ...]

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        if index != 0:
            raise IndexError(f"batch {index} out of range for 1 batch")
        return [group for source in self.sources for group in source.get_batch(0)]

    def __len__(self) -> int:
        return 1


@dataclass(frozen=True)
class MixtureDatasetBuilder(RLDatasetBuilder):
    """Config for a mixture's train and test datasets (each source a dataset builder of one env)."""

    sources: tuple[RLDatasetBuilder, ...]
    weights: tuple[float, ...]
    batch_size: int
    n_batches: int

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        built = [await source() for source in self.sources]
        train = MixtureDataset(tuple(t for t, _ in built), self.weights, self.batch_size, self.n_batches)
        tests = tuple(test for _, test in built if test is not None)
        return train, ConcatDataset(tests) if tests else None


def make_mixture_dataset_builder(
    envs: Mapping[str, float] | Sequence[EnvRef],
    *,
    weights: Sequence[float] | None = None,
    batch_size: int,
    group_size: int,
    seed: int = 0,
    n_batches: int = 100,
    n_test_groups: int = 32,
    model: str | None = None,
    renderer: RendererConfig | str | None = None,
    max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS,
    env_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
) -> MixtureDatasetBuilder:
    """An RLDatasetBuilder over several envs: ``envs`` maps catalog ids to weights, or lists ids (or
    specs) with ``weights`` beside them (default: equal); each batch holds ``batch_size`` groups shared
    out by weight, and the test set ``n_test_groups`` groups of every env. ``env_kwargs`` maps an env
    (its id as named in ``envs``, or a spec's id) to its keyword arguments."""
    refs: list[EnvRef] = list(envs)
    if isinstance(envs, Mapping):
        weights = list(envs.values())
    weights = [1.0] * len(refs) if weights is None else list(weights)
    if not refs or len(weights) != len(refs):
        raise ValueError(
            f"a mixture needs at least one env and a weight per env, got {len(refs)} and {len(weights)}"
        )
    rendering = _renderer_config(renderer, model)
    sources = tuple(
        make_dataset_builder(
            env,
            batch_size=batch_size,
            group_size=group_size,
            seed=seed,
            n_batches=n_batches,
            n_test_groups=n_test_groups,
            renderer=rendering,
            max_context_tokens=max_context_tokens,
            **dict((env_kwargs or {}).get(env if isinstance(env, str) else env.id, {})),
        )
        for env in refs
    )
    shares = tuple(float(w) for w in weights)
    round_robin_slots(shares, 0)  # refuses a weight that is not positive, before any training
    return MixtureDatasetBuilder(sources, shares, batch_size, n_batches)
