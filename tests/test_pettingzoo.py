"""PettingZoo AEC and Parallel wrappers pass PettingZoo's own API tests."""

from __future__ import annotations

import warnings

import numpy as np
from pettingzoo.test import api_test, parallel_api_test

from envsuite.adapters.pettingzoo import TurnGameAECEnv, TurnGameParallelEnv
from envsuite.games.textarena import TextArenaFactory
from envsuite.games.tictactoe import TicTacToeFactory


def test_tictactoe_passes_the_api_tests() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        api_test(TurnGameAECEnv(TicTacToeFactory(), model="tiny-random", obs_tokens=64), num_cycles=50)
        parallel_api_test(
            TurnGameParallelEnv(TicTacToeFactory(), model="tiny-random", obs_tokens=64), num_cycles=50
        )


def test_textarena_connect_four_passes_the_api_tests() -> None:
    factory = TextArenaFactory("ConnectFour")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        api_test(TurnGameAECEnv(factory, model="tiny-random", obs_tokens=64, max_steps=40), num_cycles=50)
        parallel_api_test(
            TurnGameParallelEnv(factory, model="tiny-random", obs_tokens=64, max_steps=40), num_cycles=50
        )


def test_spaces_are_cached_and_text_is_in_infos() -> None:
    env = TurnGameAECEnv(TicTacToeFactory(), model="tiny-random", obs_tokens=32)
    env.reset(seed=0)
    assert env.observation_space("player_0") is env.observation_space("player_0")
    assert env.action_space("player_1") is env.action_space("player_1")
    obs = env.observe("player_0")
    assert obs["observation"].dtype == np.int64 and obs["action_mask"].sum() == 9
    assert "tic-tac-toe" in env.infos["player_0"]["text"]
    env.step(4)
    assert env.agent_selection == "player_1"
    assert env.observe("player_1")["action_mask"][4] == 0
