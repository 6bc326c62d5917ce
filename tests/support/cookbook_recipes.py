"""tinker-cookbook 0.5.8's offline env recipes, built with envsuite's renderer, as catalog entries.

Each factory has the signature :func:`envsuite.adapters.cookbook.register_cookbook_env` asks for,
``(ctx, group_size) -> their EnvGroupBuilder``: the recipe's own env and group-builder classes, with
``ctx.renderer`` (envsuite's) as their renderer and ``ctx.seed`` picking the episode. Only the pieces a
recipe leaves to its dataset are chosen here: the problem, the secret, and for twenty questions a
scripted answerer (the recipe's default answerer is a hosted model).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from tinker_cookbook.completers import MessageCompleter
from tinker_cookbook.recipes.math_rl.arithmetic_env import ArithmeticEnv
from tinker_cookbook.recipes.multiplayer_rl.guess_number.env import GuessNumberEnvGroupBuilder
from tinker_cookbook.recipes.multiplayer_rl.text_arena.env import TwoPlayerEnvGroupBuilder
from tinker_cookbook.recipes.multiplayer_rl.text_arena.tictactoe import OptimalOpponent
from tinker_cookbook.recipes.multiplayer_rl.twenty_questions.env import (
    TwentyQuestionsEnvGroupBuilder,
    _load_words_from_file,
)
from tinker_cookbook.renderers import Message
from tinker_cookbook.rl.problem_env import ProblemGroupBuilder
from tinker_cookbook.rl.types import Env, EnvGroupBuilder

from envsuite.core import EnvContext

RECIPES: dict[str, dict[str, Any]] = {
    "cookbook/arithmetic-v0": {
        "factory": "tests.support.cookbook_recipes:arithmetic_group",
        "reward_range": (-0.1, 1.0),
        "max_turns": 1,
    },
    "cookbook/guess_number-v0": {
        "factory": "tests.support.cookbook_recipes:guess_number_group",
        "reward_range": (-10.0, 1.0),
        "max_turns": 10,
    },
    "cookbook/twenty_questions-v0": {
        "factory": "tests.support.cookbook_recipes:twenty_questions_group",
        "reward_range": (0.0, 1.0),
        "max_turns": 20,
    },
    "cookbook/tictactoe-v0": {
        "factory": "tests.support.cookbook_recipes:tictactoe_group",
        "reward_range": (-2.0, 1.0),
        "max_turns": 5,
    },
}
"""Catalog id -> factory and the spec fields the checker verifies (reward range, turn budget)."""


def arithmetic_group(ctx: EnvContext, group_size: int) -> EnvGroupBuilder:
    """math_rl's arithmetic: the recipe's ``ArithmeticEnv`` with its few-shot prefix, grouped as its dataset does."""
    rng = random.Random(ctx.seed)
    x, y = rng.randint(0, 100), rng.randint(0, 100)
    env_thunk = partial(
        ArithmeticEnv, x, y, renderer=ctx.renderer, convo_prefix=ArithmeticEnv.standard_fewshot_prefix()
    )
    return ProblemGroupBuilder(env_thunk=env_thunk, num_envs=group_size, dataset_name="arithmetic")


def guess_number_group(ctx: EnvContext, group_size: int) -> EnvGroupBuilder:
    """multiplayer_rl's guess-the-number, the secret drawn from the seed."""
    answer = random.Random(ctx.seed).randrange(1024)
    return GuessNumberEnvGroupBuilder(answer=answer, renderer=ctx.renderer, num_envs=group_size)


class ScriptedAnswerer(MessageCompleter):
    """Answers 'yes' to a correct ``Guess: <word>``, 'no' to anything else (the recipe's rule, no model)."""

    async def __call__(self, messages: list[Message]) -> Message:
        system = str(messages[0]["content"])
        secret = re.search(r"Your secret word is (\S+?)\.", system)
        question = str(messages[-1]["content"]).strip()
        guess = re.match(r"Guess: (.*)", question)
        right = secret is not None and guess is not None and guess.group(1).lower() == secret.group(1).lower()
        return {"role": "assistant", "content": "yes" if right else "no"}


def twenty_questions_group(ctx: EnvContext, group_size: int) -> EnvGroupBuilder:
    """multiplayer_rl's twenty questions over the recipe's own word list, with a scripted answerer."""
    words = _load_words_from_file()
    answer = words[random.Random(ctx.seed).randrange(len(words))]
    return TwentyQuestionsEnvGroupBuilder(
        answerer=ScriptedAnswerer(), answer=answer, renderer=ctx.renderer, num_envs=group_size
    )


@dataclass
class FirstSeatGroup(EnvGroupBuilder):
    """The text-arena recipe's builder against a fixed opponent, keeping only the first seat's envs.

    The recipe builds seats 0 and 1 in pairs (each against the opponent); a GRPO group needs every
    member to play the same episode, so each member here is seat 0 of its own game.
    """

    inner: TwoPlayerEnvGroupBuilder

    async def make_envs(self) -> Sequence[Env]:
        return list(await self.inner.make_envs())[0::2]


def tictactoe_group(ctx: EnvContext, group_size: int) -> EnvGroupBuilder:
    """multiplayer_rl's text-arena tic-tac-toe against the recipe's minimax opponent."""
    inner = TwoPlayerEnvGroupBuilder(
        game_name="TicTacToe-v0",
        renderer=ctx.renderer,
        num_envs=2 * group_size,
        self_play=False,
        opponent_policy=OptimalOpponent(),
    )
    return FirstSeatGroup(inner)
