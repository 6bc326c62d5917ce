"""Catalog entries for the games: twenty questions, chess, tic-tac-toe and every textarena game.

``register_games`` is cheap: the textarena entries come from the probed static table, so textarena
itself is imported only when one of its envs is made.
"""

from __future__ import annotations

from typing import TypedDict

from envsuite.catalog.registration import EnvKind, register, registry
from envsuite.games import twenty_questions
from envsuite.games.textarena._table import all_games
from envsuite.games.tictactoe import EASY_LEGAL_MOVE_REWARD, EASY_SYSTEM_PROMPT


class _SharedFields(TypedDict):
    """The spec fields several versions of one env share (the rest differ per version)."""

    entry_point: str
    kind: EnvKind
    reward_range: tuple[float, float]
    max_turns: int
    partner_kwarg: str
    tags: tuple[str, ...]


def register_games() -> None:
    """Register ``twenty_questions-v0``, ``chess-v0``, ``tictactoe-v0``, their easier rungs, the role games and
    ``textarena/<Game>-v0``.

    The ``envsuite.envs`` entry point ``games`` calls this once per process. Idempotent: a second call
    (the entry point and a test both asking) changes nothing.
    """
    if "chess-v0" in registry:
        return
    register(
        "twenty_questions-v0",
        entry_point="envsuite.games.twenty_questions.env:TwentyQuestionsEnv",
        kind=EnvKind.MULTI_TURN,
        description="Ask yes/no questions, then 'Guess: <word>'; offline deterministic answerer by default.",
        reward_range=(0.0, 1.0),
        max_turns=20,
        partner_kwarg="answerer",
        tags=("game", "dialogue"),
    )
    easy_twenty_questions: _SharedFields = {
        "entry_point": "envsuite.games.twenty_questions.env:TwentyQuestionsEnv",
        "kind": EnvKind.MULTI_TURN,
        "reward_range": (0.0, 1.0),
        "max_turns": 6,
        "partner_kwarg": "answerer",
        "tags": ("game", "dialogue"),
    }
    register(
        "twenty_questions_easy-v0",
        kwargs={"candidates": 4, "max_questions": 6},
        description="Twenty questions, first rung: the word is one of 4 listed candidates; 6 turns.",
        deprecated=(
            "SmolLM2-135M never wrote a 'Guess:' line in it (0 of 24 held-out games won; see "
            "docs/results.md); use twenty_questions_easy-v1"
        ),
        **easy_twenty_questions,
    )
    register(
        "twenty_questions_easy-v1",
        kwargs={"candidates": 4, "max_questions": 6, "guess_by_mention": True},
        description="Twenty questions, first rung: one of 4 listed words, naming one guesses it; 6 turns.",
        **easy_twenty_questions,
    )
    register(
        "twenty_questions_easy-v2",
        kwargs={
            "candidates": 4,
            "max_questions": 6,
            "guess_by_mention": True,
            "system_prompt": twenty_questions.EASY_SYSTEM_PROMPT,
            "rules": twenty_questions.EASY_RULES,
            "listed_guess_reward": twenty_questions.EASY_LISTED_GUESS_REWARD,
        },
        description=(
            "v1 with the reply forms in a system prompt, a short opening, and +0.1 per listed word guessed "
            "in a lost game."
        ),
        **easy_twenty_questions,
    )
    register(
        "twenty_questions_judged-v0",
        entry_point="envsuite.games.twenty_questions.judged:twenty_questions_judged",
        kind=EnvKind.MULTI_TURN,
        description=(
            "Twenty questions whose final 'Guess:' and 'Because:' are scored by one rubric: the right "
            "secret (code), a reason, and a judge (SmolLM2 by default) on its consistency with the answers."
        ),
        reward_range=(0.0, 1.0),
        max_turns=20,
        partner_kwarg="answerer",
        family="judged",
        tags=("game", "dialogue", "judged"),
    )
    register(
        "chess-v0",
        entry_point="envsuite.games.chess:ChessEnv",
        kind=EnvKind.GAME,
        description="Chess on python-chess (SAN or UCI moves, full draw rules) against an opponent seat.",
        reward_range=(-1.0, 1.0),
        max_turns=150,
        partner_kwarg="opponent",
        tags=("game", "two-player"),
    )
    register(
        "tictactoe-v0",
        entry_point="envsuite.games.tictactoe:TicTacToeEnv",
        kind=EnvKind.GAME,
        description="Tic-tac-toe against a random, fixed or optimal (minimax) opponent.",
        reward_range=(-1.0, 1.0),
        max_turns=100,
        partner_kwarg="opponent",
        tags=("game", "two-player"),
    )
    _register_tictactoe_rungs()
    _register_role_games()
    for game in all_games():
        register(
            game.env_id,
            entry_point="envsuite.games.textarena:TextArenaEnv",
            kwargs={"game": game.name},
            kind=EnvKind.GAME,
            description=_textarena_description(game.name, game.num_players),
            reward_range=(-1.0, 1.0),
            max_turns=100,
            partner_kwarg="opponent",
            unavailable=game.unavailable,
            tags=("game", "textarena"),
        )


def _textarena_description(name: str, num_players: int | None) -> str:
    """What a player of one TextArena game faces: alone, against opponents, or (unprobed) either."""
    if num_players == 1:
        return f"TextArena {name} (single-player puzzle)."
    if num_players:
        return f"TextArena {name} ({num_players}-player); the other seats are played by an opponent."
    return (
        f"TextArena {name} (player count unknown until it runs); any other seats are played by an opponent."
    )


def _register_role_games() -> None:
    """The role-asymmetric games (issue 59), one id per role: the trained policy plays that role's seat and
    ``opponent`` (default ``minimax``: the game's scripted player) the other; rewards are per seat. A third
    id per game, ``<name>_selfplay-v0``, puts both seats of each game in a train group (a policy per role)."""
    games = (
        (
            "twenty_questions_duel",
            "TwentyQuestionsDuelEnv",
            "Twenty questions, both seats learnable",
            "asker",
            "answerer",
        ),
        (
            "bargain",
            "BargainEnv",
            "Bargaining with private values, each side earns its surplus",
            "buyer",
            "seller",
        ),
        (
            "referential",
            "ReferentialEnv",
            "Cooperative: describe a target among objects, pick it",
            "describer",
            "picker",
        ),
    )
    for name, cls, about, first, second in games:
        for seat, (role, env_id) in enumerate(((first, f"{name}-v0"), (second, f"{name}_{second}-v0"))):
            register(
                env_id,
                entry_point=f"envsuite.games.roles:{cls}",
                kwargs={"seat": seat},
                kind=EnvKind.GAME,
                description=f"{about}; the policy is the {role} (seat {seat}).",
                reward_range=(-1.0, 1.0),
                max_turns=20,
                partner_kwarg="opponent",
                tags=("game", "two-player", "roles"),
            )
        register(
            f"{name}_selfplay-v0",
            entry_point=f"envsuite.games.roles:{cls}",
            kwargs={"seat": 0},
            group_builder_entry_point="envsuite.games.multiagent:RoleSelfPlayBuilder",
            kind=EnvKind.GAME,
            description=(
                f"{about}; both seats are policies (a train group holds both seats of each game: a policy "
                f"per role trains on it); held-out: the {first} against the scripted {second} and the "
                f"{second} against the scripted {first}, one game each."
            ),
            reward_range=(-1.0, 1.0),
            max_turns=20,
            partner_kwarg="opponent",
            tags=("game", "two-player", "roles", "selfplay"),
        )


def _register_tictactoe_rungs() -> None:
    easy = {"system_prompt": EASY_SYSTEM_PROMPT, "legal_move_reward": EASY_LEGAL_MOVE_REWARD}
    # X moves at most five times: a win after five legal moves is the best return.
    reward_range = (-1.0, 1.0 + 5 * EASY_LEGAL_MOVE_REWARD)
    register(
        "tictactoe_easy-v0",
        entry_point="envsuite.games.tictactoe:TicTacToeEnv",
        kwargs=easy,
        kind=EnvKind.GAME,
        description="Tic-tac-toe with the move format in a system prompt and +0.1 per legal move.",
        reward_range=reward_range,
        max_turns=100,
        partner_kwarg="opponent",
        tags=("game", "two-player"),
    )
    register(
        "tictactoe_selfplay-v0",
        entry_point="envsuite.games.tictactoe:TicTacToeEnv",
        kwargs=easy,
        group_builder_entry_point="envsuite.games.multiagent:CatalogSelfPlayBuilder",
        kind=EnvKind.GAME,
        description="tictactoe_easy in self-play: both seats are the policy (held-out: X vs the opponent).",
        reward_range=reward_range,
        max_turns=100,
        partner_kwarg="opponent",
        tags=("game", "two-player", "selfplay"),
    )
