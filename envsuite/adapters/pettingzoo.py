"""PettingZoo AEC and Parallel envs for turn-based catalog games (anything implementing ``TurnGame``).

PettingZoo's API tests need numeric observations, so each agent observes a dict: ``observation``, the
token ids of the latest text the game showed it (the last ``obs_tokens`` tokens, right-padded with 0),
and ``action_mask``, the legal moves (all zero when it is not the agent's turn). The text itself and
the legal moves as strings are in ``infos``. An action is an index into the game's move vocabulary
when it has one (tic-tac-toe, chess) or into the current legal-move list. Spaces are cached: the same
object is returned on every call.

In the parallel view every live agent submits an action each step and only the agent to move acts;
the others' actions are ignored.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, ClassVar, TypeAlias, TypedDict, Unpack

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils import AgentSelector

from envsuite.adapters._pz_core import SeatInfo, TurnGameCore

if TYPE_CHECKING:
    from envsuite.turn_games import GameFactory

DEFAULT_OBS_TOKENS = 256
DEFAULT_MAX_MOVES = 64
DEFAULT_MAX_STEPS = 1000
DEFAULT_TOKENIZER = "smollm2-135m-instruct"

Observations: TypeAlias = dict[str, dict[str, np.ndarray]]
"""Per agent: ``observation`` (token ids) and ``action_mask``."""


class WrapperOptions(TypedDict, total=False):
    """The keyword arguments both PettingZoo views take besides the game."""

    model: str
    """The tokenizer observations are encoded with."""
    obs_tokens: int
    max_moves: int
    max_steps: int


def _spaces(core: TurnGameCore) -> tuple[spaces.Dict, spaces.Discrete]:
    observation = spaces.Dict(
        {
            "observation": spaces.Box(0, core.vocab_size - 1, shape=(core.obs_tokens,), dtype=np.int64),
            "action_mask": spaces.Box(0, 1, shape=(core.num_actions,), dtype=np.int8),
        }
    )
    return observation, spaces.Discrete(core.num_actions)


class TurnGameAECEnv(AECEnv[str, dict[str, np.ndarray], int | None]):
    """A turn-based game as a PettingZoo AEC env; agents are ``player_0`` .. ``player_{n-1}``."""

    metadata: ClassVar[dict[str, str | bool | list[str]]] = {
        "name": "envsuite_turn_game_v0",
        "render_modes": [],
        "is_parallelizable": True,
    }

    def __init__(
        self,
        game: GameFactory,
        *,
        model: str = DEFAULT_TOKENIZER,
        obs_tokens: int = DEFAULT_OBS_TOKENS,
        max_moves: int = DEFAULT_MAX_MOVES,
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> None:
        super().__init__()
        self._core = TurnGameCore(
            game, model=model, obs_tokens=obs_tokens, max_moves=max_moves, max_steps=max_steps
        )
        self.possible_agents = list(self._core.agents)
        self._spaces = _spaces(self._core)
        self._seat = {agent: i for i, agent in enumerate(self.possible_agents)}

    @functools.cache  # noqa: B019  (one cache entry per agent; the env lives as long)
    def observation_space(self, agent: str) -> spaces.Dict:
        return self._spaces[0]

    @functools.cache  # noqa: B019
    def action_space(self, agent: str) -> spaces.Discrete:
        return self._spaces[1]

    def reset(self, seed: int | None = None, options: dict[str, object] | None = None) -> None:
        self._core.reset(seed)
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: self._core.info(self._seat[a]) for a in self.agents}
        self._selector = AgentSelector(self.agents)
        self.agent_selection = self.possible_agents[self._core.current_seat()]

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        return self._core.observation(self._seat[agent])

    def step(self, action: int | None) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self._core.play(action)
        over, truncated = self._core.game.is_over(), self._core.truncated
        rewards = self._core.rewards()
        for a in self.agents:
            self.rewards[a] = rewards[self._seat[a]] if over else 0.0
            self.terminations[a] = over
            self.truncations[a] = truncated
            self.infos[a] = self._core.info(self._seat[a])
        if not (over or truncated):
            self.agent_selection = self.possible_agents[self._core.current_seat()]
        self._accumulate_rewards()

    def close(self) -> None:
        self._core.game.close()


class TurnGameParallelEnv(ParallelEnv[str, dict[str, np.ndarray], int]):
    """The same game as a PettingZoo Parallel env: only the agent to move acts each step."""

    metadata: ClassVar[dict[str, str | bool | list[str]]] = {
        "name": "envsuite_turn_game_parallel_v0",
        "render_modes": [],
    }

    def __init__(
        self,
        game: GameFactory,
        *,
        model: str = DEFAULT_TOKENIZER,
        obs_tokens: int = DEFAULT_OBS_TOKENS,
        max_moves: int = DEFAULT_MAX_MOVES,
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> None:
        self._core = TurnGameCore(
            game, model=model, obs_tokens=obs_tokens, max_moves=max_moves, max_steps=max_steps
        )
        self.possible_agents = list(self._core.agents)
        self.agents: list[str] = []
        self._spaces = _spaces(self._core)

    @functools.cache  # noqa: B019
    def observation_space(self, agent: str) -> spaces.Dict:
        return self._spaces[0]

    @functools.cache  # noqa: B019
    def action_space(self, agent: str) -> spaces.Discrete:
        return self._spaces[1]

    def _views(self) -> tuple[Observations, dict[str, SeatInfo]]:
        obs = {a: self._core.observation(i) for i, a in enumerate(self.possible_agents) if a in self.agents}
        infos = {a: self._core.info(i) for i, a in enumerate(self.possible_agents) if a in self.agents}
        return obs, infos

    def reset(
        self, seed: int | None = None, options: dict[str, object] | None = None
    ) -> tuple[Observations, dict[str, SeatInfo]]:
        self._core.reset(seed)
        self.agents = list(self.possible_agents)
        return self._views()

    def step(
        self, actions: dict[str, int]
    ) -> tuple[Observations, dict[str, float], dict[str, bool], dict[str, bool], dict[str, SeatInfo]]:
        mover = self.possible_agents[self._core.current_seat()]
        self._core.play(actions.get(mover))
        over, truncated = self._core.game.is_over(), self._core.truncated
        rewards = self._core.rewards()
        obs, infos = self._views()
        reward = {
            a: rewards[i] if over else 0.0 for i, a in enumerate(self.possible_agents) if a in self.agents
        }
        terminations = dict.fromkeys(self.agents, over)
        truncations = dict.fromkeys(self.agents, truncated)
        if over or truncated:
            self.agents = []
        return obs, reward, terminations, truncations, infos

    def close(self) -> None:
        self._core.game.close()


def game_factory(env_id: str) -> GameFactory:
    """The turn-based game behind catalog env ``env_id`` (its class must offer ``game_factory``)."""
    from envsuite.catalog._make import available_spec
    from envsuite.turn_games import spec_game_factory

    env_spec = available_spec(env_id)
    return spec_game_factory(env_spec, env_spec.resolve_kwargs({}))


def aec_env(env_id: str, **wrapper_kwargs: Unpack[WrapperOptions]) -> TurnGameAECEnv:
    """A PettingZoo AEC env for catalog game ``env_id`` (``tictactoe``, ``chess``, ``textarena/...``)."""
    return TurnGameAECEnv(game_factory(env_id), **wrapper_kwargs)


def parallel_env(env_id: str, **wrapper_kwargs: Unpack[WrapperOptions]) -> TurnGameParallelEnv:
    """A PettingZoo Parallel env for catalog game ``env_id``."""
    return TurnGameParallelEnv(game_factory(env_id), **wrapper_kwargs)
