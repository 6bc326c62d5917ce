"""Sampling and advantages of a run with a policy per role: each member of a group is played by the policy
of its seat, and each policy's advantages compare only members of one seat.

A group of a role game (``twenty_questions_duel_selfplay-v0``'s train split) holds both seats of one or more
games of the same episode; member ``i`` is one seat's env (``env.seat``; an env without seats is seat 0).
Member ``i``'s replies come from the completer of its seat's policy, its trajectory goes to that policy,
and a policy's group-relative advantages are computed per seat (the askers of a group against each other,
never against the answerers): :func:`assemble_for_policy` splits every group by seat and centres each part.

Sampling seam: :class:`PolicySamplers` gives each seat its policy's completer, today a
``SamplingTokenCompleter`` on that policy's own sampling client (one engine call per policy and reply).
Sampling the rows of several adapters in one engine step (multi-adapter batching) replaces
:meth:`PolicySamplers.completers` alone: the rollouts, the routing and the advantages stay as they are.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envsuite.core import Env, EnvGroupBuilder, TokenCompleter, TrajectoryGroup
from envsuite.rollouts import GroupRolloutResult, RolloutLimits, do_single_rollout
from envsuite.trainers._batches import AssembledBatch, assemble_batch, group_error
from envsuite.trainers._clients import PolicyClients
from envsuite.trainers._config import ConfigError
from envsuite.trainers.async_rl import SamplerSettings

if TYPE_CHECKING:
    from envsuite.backends import SamplingClient


@dataclass(frozen=True)
class SeatedGroup:
    """A finished group and the seat each member played."""

    group: TrajectoryGroup
    seats_G: tuple[int, ...]


@dataclass(frozen=True)
class SeatedRollouts:
    """The usable groups of one batch, the failed ones' reasons, and the usable ones' batch positions."""

    groups_P: list[SeatedGroup]
    failed_errors: list[str]
    indices_P: list[int]

    @property
    def plain_P(self) -> list[TrajectoryGroup]:
        return [g.group for g in self.groups_P]


def seat_of(env: Env) -> int:
    """The game seat ``env`` plays (``SeatEnv.seat``); an env without seats plays seat 0."""
    seat = getattr(env, "seat", 0)
    return seat if isinstance(seat, int) and not isinstance(seat, bool) else 0


class PolicySamplers:
    """Each policy's current sampling client, and per seat the completer of the seat's policy.

    The seam of multi-adapter sampling: :meth:`completers` is the one place that decides how a seat's
    replies are sampled (here: its policy's own client, one request per reply). A frozen policy with an
    opponent pool (``pool``) has several clients; each call draws one by its seed."""

    def __init__(
        self,
        clients: Mapping[str, PolicyClients],
        owners: Mapping[int, str],
        settings: SamplerSettings,
        pools: Mapping[str, Sequence[PolicyClients]] | None = None,
    ) -> None:
        self._clients = dict(clients)
        self._owners = dict(owners)
        self._settings = settings
        self._pools = {name: list(members) for name, members in (pools or {}).items() if members}
        self._sampling: dict[str, SamplingClient] = {}
        self._pool_sampling: dict[str, list[SamplingClient]] = {}
        self.draws: dict[str, list[int]] = {}
        """Per pooled policy, how many groups each member (0: its own weights) played since the last reset."""

    @property
    def limits(self) -> RolloutLimits:
        return self._settings.limits

    async def refresh(self, name: str) -> None:
        """A sampling client on policy ``name``'s current weights (the previous one let go first); the
        first refresh of a pooled policy also opens its pool members' samplers."""
        self._sampling.pop(name, None)
        self._sampling[name] = await self._clients[name].refresh_sampler()
        if name in self._pools and name not in self._pool_sampling:
            self._pool_sampling[name] = [await member.refresh_sampler() for member in self._pools[name]]
            self.draws[name] = [0] * (1 + len(self._pools[name]))

    def reset_draws(self) -> None:
        self.draws = {name: [0] * len(counts) for name, counts in self.draws.items()}

    def _client(self, name: str, seed: int) -> SamplingClient:
        """Policy ``name``'s client for the group seeded ``seed``: its own, or a pool member drawn by it."""
        own = self._sampling.get(name)
        if own is None:
            raise RuntimeError(f"policy {name!r} has no sampler yet")
        members = [own, *self._pool_sampling.get(name, [])]
        if len(members) == 1:
            return own
        index = random.Random(f"{name}:{seed}").randrange(len(members))  # own RNG: never the global one
        self.draws[name][index] += 1
        return members[index]

    def completers(self, seed: int) -> dict[int, TokenCompleter]:
        """Per seat, a completer seeded with ``seed`` on the seat's policy's current weights (a pooled
        policy's member drawn by ``seed``, one for all its seats of the group)."""
        from envsuite.completers import SamplingTokenCompleter

        clients = {name: self._client(name, seed) for name in dict.fromkeys(self._owners.values())}
        return {
            seat: SamplingTokenCompleter(
                clients[name],
                max_tokens=self._settings.max_tokens,
                temperature=self._settings.temperature,
                seed=seed,
            )
            for seat, name in self._owners.items()
        }


async def rollout_by_seat(
    builder: EnvGroupBuilder, completers: Mapping[int, TokenCompleter], limits: RolloutLimits
) -> tuple[GroupRolloutResult, tuple[int, ...]]:
    """Play every member of one group concurrently, each with its seat's completer (as
    :func:`envsuite.rollouts.do_group_rollout` plays them with one), and say which seat each played."""
    started = time.perf_counter()
    try:
        envs_G = list(await builder.make_envs())
    except Exception as exc:
        return GroupRolloutResult(None, f"make_envs failed: {exc!r}", time.perf_counter() - started), ()
    seats_G = tuple(seat_of(env) for env in envs_G)
    try:
        missing = sorted(set(seats_G) - set(completers))
        if missing:
            return GroupRolloutResult(None, f"no policy plays seat(s) {missing}"), seats_G
        played = [
            do_single_rollout(completers[s], env, limits) for s, env in zip(seats_G, envs_G, strict=True)
        ]
        trajectories_G = list(await asyncio.gather(*played))
        rewards_and_metrics = await builder.compute_group_rewards(trajectories_G, envs_G)
    except Exception as exc:
        return GroupRolloutResult(None, f"group rewards failed: {exc!r}"), seats_G
    finally:
        await builder.cleanup()
    group = TrajectoryGroup(
        trajectories_G,
        [float(reward) for reward, _ in rewards_and_metrics],
        [dict(metrics) for _, metrics in rewards_and_metrics],
    )
    return GroupRolloutResult(group, None, time.perf_counter() - started), seats_G


async def rollout_batch_by_seat(
    builders_P: Sequence[EnvGroupBuilder], seeds_P: Sequence[int], samplers: PolicySamplers
) -> SeatedRollouts:
    """Every group of a batch at once, each member sampled by its seat's policy."""
    done = await asyncio.gather(
        *(
            rollout_by_seat(b, samplers.completers(s), samplers.limits)
            for b, s in zip(builders_P, seeds_P, strict=True)
        )
    )
    groups_P: list[SeatedGroup] = []
    errors: list[str] = []
    indices_P: list[int] = []
    for index, (result, seats_G) in enumerate(done):
        error = group_error(result)
        if error is not None or result.group is None:
            errors.append(f"group {index}: {error}")
            continue
        groups_P.append(SeatedGroup(result.group, seats_G))
        indices_P.append(index)
    return SeatedRollouts(groups_P, errors, indices_P)


def seat_subgroup(group: TrajectoryGroup, members: Sequence[int]) -> TrajectoryGroup:
    """The members ``members`` of ``group`` as a group of their own."""
    metrics_G = group.metrics_G if len(group.metrics_G) == len(group.trajectories_G) else None
    return TrajectoryGroup(
        [group.trajectories_G[i] for i in members],
        [group.final_rewards_G[i] for i in members],
        [metrics_G[i] for i in members] if metrics_G is not None else [{} for _ in members],
    )


def seat_parts(groups_P: Sequence[SeatedGroup], seats: Collection[int]) -> list[TrajectoryGroup]:
    """The members of each group that played ``seats``, one group per (group, seat) that has any."""
    parts: list[TrajectoryGroup] = []
    for seated in groups_P:
        for seat in sorted(seats):
            members = [i for i, s in enumerate(seated.seats_G) if s == seat]
            if members:
                parts.append(seat_subgroup(seated.group, members))
    return parts


@dataclass(frozen=True)
class PolicyBatch:
    """One policy's share of a step: its members' groups (one per group and seat) and their datums."""

    groups_P: list[TrajectoryGroup]
    assembled: AssembledBatch


def assemble_for_policy(
    groups_P: Sequence[SeatedGroup], seats: Collection[int], *, scale_by_std: bool, version: int
) -> PolicyBatch:
    """The datums of the members that played ``seats``; advantages centred within each (group, seat)."""
    parts = seat_parts(groups_P, seats)
    assembled = assemble_batch(parts, scale_by_std=scale_by_std, versions_P=[version] * len(parts))
    return PolicyBatch(parts, assembled)


def check_seats(seats_G: Sequence[int], owners: Mapping[int, str], env_id: str) -> None:
    """Refuse a run whose groups hold a seat no policy plays (a ConfigError naming it)."""
    missing = sorted(set(seats_G) - set(owners))
    if missing:
        raise ConfigError(
            f"{env_id}'s groups hold seat(s) {missing}, which no policy plays (policies: "
            f"{dict(sorted(owners.items()))}): give each seat a policy, e.g. [policies.<name>] seats = {missing}"
        )
