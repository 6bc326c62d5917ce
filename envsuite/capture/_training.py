"""Captured episodes as the trainer's rollouts: trajectories of the exact tokens, grouped for GRPO.

An episode yields one :class:`~envsuite.core.Trajectory` per choice of its last call, along the path
:meth:`CapturedEpisode.chains` gives: each call is a transition whose observation is the call's prompt
tokens and whose action is the sampled tokens and logprobs of its choice. The episode's reward for that
choice is the last transition's reward. Episodes of one group (the client's group id, else the same
opening prompt) form a :class:`~envsuite.core.TrajectoryGroup`, so the trainer's usual datum assembly
applies: turns whose prompts extend the previous prompt plus the sampled reply merge into one sequence,
and nothing is ever re-tokenized.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import tinker

from envsuite.capture._records import CapturedEpisode
from envsuite.core import StopReason, TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition


@dataclass(frozen=True)
class CapturedGroups:
    """Scored episodes grouped for training, and what was left out."""

    groups_P: list[TrajectoryGroup]
    group_ids_P: list[str]
    base_models: list[str]
    """Every base model the groups were sampled from (training needs exactly one)."""
    n_unscored: int
    """Episodes without a score (not trained on)."""


def episode_trajectories(episode: CapturedEpisode) -> list[Trajectory]:
    """One trajectory per final choice, rewarded with that choice's reward (the episode must be scored)."""
    rewards = episode.rewards()
    trajectories = []
    for chain, reward in zip(episode.chains(), rewards, strict=True):
        transitions = []
        for position, (call, index) in enumerate(chain):
            choice = call.choices[index]
            last = position == len(chain) - 1
            transitions.append(
                Transition(
                    ob=tinker.ModelInput.from_ints(call.prompt_tokens),
                    ac=TokensWithLogprobs(
                        list(choice.tokens),
                        list(choice.logprobs),
                        "length" if choice.finish_reason == "length" else "stop",
                    ),
                    reward=reward if last else 0.0,
                    episode_done=last,
                    stop_reason=StopReason.COMPLETED.value if last else None,
                )
            )
        final = chain[-1][0].extends(chain[-1][1])
        trajectories.append(
            Trajectory(transitions, tinker.ModelInput.from_ints(final), StopReason.COMPLETED.value)
        )
    return trajectories


def captured_groups(episodes: Iterable[CapturedEpisode]) -> CapturedGroups:
    """The scored episodes as trajectory groups, in the order their groups first appear."""
    by_group: dict[str, list[Trajectory]] = {}
    models: set[str] = set()
    unscored = 0
    for episode in episodes:
        if episode.score is None:
            unscored += 1
            continue
        by_group.setdefault(episode.group, []).extend(episode_trajectories(episode))
        models.update(call.base_model for call in episode.calls)
    groups = [
        TrajectoryGroup(trajectories, [0.0] * len(trajectories), [{} for _ in trajectories])
        for trajectories in by_group.values()
    ]
    return CapturedGroups(groups, list(by_group), sorted(models), unscored)
