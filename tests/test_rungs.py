"""Easier rungs and self-play for the learning results: tic-tac-toe shaping, the catalog's self-play
builder, head-to-head matches, twenty questions with listed candidates, one-step math problems."""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Callable

from envsuite import (
    Env,
    InitialObservationOverflow,
    RendererConfig,
    StopReason,
    TokensWithLogprobs,
    make_env,
    make_group_builder,
)
from envsuite.core import Observation, StepResult, StopCondition, TokenCompleter
from envsuite.games import twenty_questions
from envsuite.games.multiagent import listed_moves, play_match
from envsuite.games.tictactoe import EASY_SYSTEM_PROMPT
from envsuite.games.twenty_questions import TwentyQuestionsEnv
from envsuite.rollouts import do_single_rollout

MODEL = "tiny-random"
RENDERER = RendererConfig(model_name=MODEL)
Policy = Callable[[str], str]


def _tok():  # type: ignore[no-untyped-def]
    return RENDERER.build().tokenizer


def _legal_random(seed: int) -> Policy:
    rng = random.Random(seed)

    def act(prompt: str) -> str:
        legal = listed_moves(prompt.rsplit("<|im_start|>user", 1)[-1])
        return rng.choice(legal) if legal else "[0]"

    return act


class TextPolicy(TokenCompleter):
    """A token policy from a text policy (decode the prompt, encode the reply; logprobs 0)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    async def __call__(self, model_input: Observation, stop: StopCondition) -> TokensWithLogprobs:
        tok = _tok()
        reply = tok.encode(
            self.policy(tok.decode(model_input.to_ints())) + "<|im_end|>", add_special_tokens=False
        )
        return TokensWithLogprobs(tokens=reply, maybe_logprobs=[0.0] * len(reply))


async def _play(env: Env, policy: Policy) -> tuple[str, list[StepResult]]:
    tok = _tok()
    first = await env.initial_observation()
    assert not isinstance(first, InitialObservationOverflow)
    prompt, results = first[0], []
    opening = tok.decode(prompt.to_ints())
    while True:
        reply = policy(tok.decode(prompt.to_ints())) + "<|im_end|>"
        result = await env.step(tok.encode(reply, add_special_tokens=False))
        results.append(result)
        if result.episode_done:
            return opening, results
        prompt = result.next_observation


async def test_easy_tictactoe_pays_per_legal_move_and_states_the_format() -> None:
    for seed in range(6):
        env = make_env("tictactoe_easy", seed=seed, model=MODEL)
        opening, results = await _play(env, _legal_random(seed))
        assert EASY_SYSTEM_PROMPT in opening
        final = results[-1].metrics
        legal = int(final["legal_moves"])
        assert legal == len(results) and final["invalid_moves"] == 0
        assert all(r.reward == 0.1 for r in results[:-1])
        game = final["win"] - final["loss"]
        assert abs(sum(r.reward for r in results) - (game + 0.1 * legal)) < 1e-9
        assert final["win"] + final["loss"] + final["draw"] == 1.0 and final["solved"] == final["win"]


async def test_easy_tictactoe_forfeit_after_legal_moves_beats_a_forfeit_at_once() -> None:
    moves = iter(["[4]", "no idea", "still no idea"])
    _, results = await _play(make_env("tictactoe_easy", seed=0, model=MODEL), lambda _: next(moves))
    assert results[-1].stop_reason is StopReason.INVALID_MOVE
    assert abs(sum(r.reward for r in results) - (-1.0 + 0.1)) < 1e-9
    _, results = await _play(make_env("tictactoe_easy", seed=0, model=MODEL), lambda _: "no idea")
    assert sum(r.reward for r in results) == -1.0
    # The original id keeps its behaviour: no system prompt, no shaping.
    opening, results = await _play(make_env("tictactoe", seed=0, model=MODEL), _legal_random(0))
    assert EASY_SYSTEM_PROMPT not in opening and all(r.reward == 0 for r in results[:-1])


async def test_selfplay_rung_trains_both_seats_and_evaluates_against_the_opponent() -> None:
    builder = make_group_builder("tictactoe_selfplay", group_size=4, seed=5, model=MODEL)
    envs = await builder.make_envs()
    assert len(envs) == 4
    runs = await asyncio.gather(*(_play(env, _legal_random(i)) for i, env in enumerate(envs)))
    for game in range(2):
        (_, x), (_, o) = runs[2 * game], runs[2 * game + 1]
        assert (
            x[-1].metrics["win"] == o[-1].metrics["loss"] and x[-1].metrics["draw"] == o[-1].metrics["draw"]
        )
        assert x[-1].stop_reason is StopReason.COMPLETED and o[-1].stop_reason is StopReason.COMPLETED
    opening, _ = runs[1]
    assert "as O (Player 1)" in opening and EASY_SYSTEM_PROMPT in opening
    # An odd group: one full game, and a third member playing X against the env's opponent.
    odd = await make_group_builder("tictactoe_selfplay", group_size=3, seed=5, model=MODEL).make_envs()
    assert len(odd) == 3
    odd_runs = await asyncio.gather(*(_play(env, _legal_random(i)) for i, env in enumerate(odd)))
    assert all(r[-1].stop_reason is StopReason.COMPLETED for _, r in odd_runs)
    assert "as X (Player 0)" in odd_runs[2][0]
    held_out = make_group_builder("tictactoe_selfplay", group_size=1, seed=5, split="test", model=MODEL)
    (env,) = await held_out.make_envs()
    _, results = await _play(env, _legal_random(0))
    assert results[-1].episode_done and results[-1].stop_reason is StopReason.COMPLETED


async def test_match_alternates_seats_and_scores_forfeits_for_the_legal_player() -> None:
    legal, babble = TextPolicy(_legal_random(1)), TextPolicy(lambda _: "I like turtles")
    result = await play_match("tictactoe_easy", legal, babble, n_games=6, renderer=RENDERER)
    assert [g.seat_a for g in result.games] == [0, 1, 0, 1, 0, 1]
    assert result.score_a == 1.0 and result.counts() == {"wins": 6, "draws": 0, "losses": 0}
    assert all(g.stop_b == "invalid_move" and g.stop_a == "completed" for g in result.games)
    even = await play_match("tictactoe", legal, TextPolicy(_legal_random(2)), n_games=8, renderer=RENDERER)
    assert sum(g.score_a for g in even.games) == even.score_a * 8
    assert all(g.stop_a == "completed" and g.stop_b == "completed" for g in even.games)


async def test_twenty_questions_candidates_are_listed_seeded_and_held_out() -> None:
    env = make_env("twenty_questions_easy-v1", seed=3, model=MODEL)
    assert isinstance(env, TwentyQuestionsEnv)
    assert len(env.candidates) == 4 and env.secret in env.candidates and env.max_questions == 6
    again = make_env("twenty_questions_easy-v1", seed=3, model=MODEL)
    assert isinstance(again, TwentyQuestionsEnv) and again.candidates == env.candidates
    test_env = make_env("twenty_questions_easy-v1", seed=3, split="test", model=MODEL)
    assert isinstance(test_env, TwentyQuestionsEnv)
    from envsuite.games.twenty_questions._kb import load_knowledge_base

    assert set(test_env.candidates) <= set(load_knowledge_base().words("test"))
    opening, results = await _play(env, lambda _: f"Guess: {env.secret}")
    assert f"The word is one of: {', '.join(env.candidates)}." in opening
    assert results[-1].reward == 1.0 and len(results) == 1
    wrong = [w for w in env.candidates if w != env.secret]
    guesses = iter(wrong)
    other = make_env("twenty_questions_easy-v1", seed=3, model=MODEL)
    _, results = await _play(other, lambda _: f"Guess: {next(guesses, wrong[0])}")
    assert sum(r.reward for r in results) == 0.0 and len(results) == 6


def test_one_step_math_problems_have_right_answers_and_disjoint_splits() -> None:
    from envsuite.envs.math_word import MathWordEnv

    seen: dict[str, set[str]] = {"train": set(), "test": set()}
    for split in ("train", "test"):
        for seed in range(40):
            env = make_env("math_easy", seed=seed, split=split, model=MODEL)
            assert isinstance(env, MathWordEnv)
            question, answer = env.problem.question, int(env.problem.answer)
            numbers = [int(n) for n in re.findall(r"\d+", question)]
            a, b = numbers[0], numbers[1]
            assert answer in (a + b, a - b, a * b, a // b), question
            seen[split].add(question)
    assert not seen["train"] & seen["test"]
    # The original id still draws multi-step problems.
    one_step = re.compile(r"gets \d+ more|gives \d+ of them away|packs of|equally among")
    for seed in range(10):
        env = make_env("math", seed=seed, model=MODEL)
        assert isinstance(env, MathWordEnv) and not one_step.search(env.problem.question)
    try:
        make_env("math", seed=0, model=MODEL, problems="two_step")
    except ValueError as exc:
        assert "one_step" in str(exc)
    else:
        raise AssertionError("an unknown problem set must be refused")


async def test_episode_rollout_of_the_selfplay_test_split_uses_one_seat() -> None:
    env = make_env("tictactoe_selfplay", seed=1, split="test", model=MODEL)
    trajectory = await do_single_rollout(TextPolicy(_legal_random(3)), env)
    assert trajectory.stop_reason == StopReason.COMPLETED
    assert trajectory.total_reward >= -1.0 + 0.1  # at least one legal move before any ending


async def test_math_easy_asks_for_the_number_only_and_grades_it() -> None:
    from envsuite.envs.math_word import MathWordEnv

    tok = _tok()
    rewards = {}
    for reply in ("{a}", "The answer is {a}.", "{wrong}", "I do not know"):
        env = make_env("math_easy", seed=4, split="test", model=MODEL)
        assert isinstance(env, MathWordEnv)
        answer = env.problem.answer
        start = await env.initial_observation()
        assert not isinstance(start, InitialObservationOverflow)
        assert (
            tok.decode(start[0].to_ints())
            .rstrip()
            .endswith("Reply with the number only.<|im_end|>\n<|im_start|>assistant")
        )
        text = reply.format(a=answer, wrong=int(answer) + 1) + "<|im_end|>"
        result = await env.step(tok.encode(text, add_special_tokens=False))
        rewards[reply] = result.reward
    assert rewards == {"{a}": 1.0, "The answer is {a}.": 0.9, "{wrong}": 0.0, "I do not know": -0.1}


async def test_easy_twenty_questions_v1_reads_a_named_candidate_as_a_guess() -> None:
    from envsuite.registration import DeprecatedEnvError

    def fresh() -> TwentyQuestionsEnv:
        env = make_env("twenty_questions_easy-v1", seed=7, model=MODEL)
        assert isinstance(env, TwentyQuestionsEnv) and env.guess_by_mention
        return env

    env = fresh()
    _, results = await _play(env, lambda _: f"Hmm, maybe the {env.secret.upper()}?")
    assert results[-1].reward == 1.0 and results[-1].metrics["success"] == 1.0 and len(results) == 1
    env = fresh()
    others = [w for w in env.candidates if w != env.secret]
    _, results = await _play(env, lambda _: f"Is it a {others[0]}?")
    assert all(r.reward == 0 for r in results) and results[-1].metrics["wrong_guesses"] == 6
    env = fresh()
    _, results = await _play(env, lambda _: f"{others[0]} or {others[1]}? Is it alive?")
    assert results[-1].metrics["wrong_guesses"] == 0 and results[-1].metrics["malformed_turns"] == 0
    # A reply cut off at the token budget still guesses the one candidate it names.
    env = fresh()
    tok = _tok()
    first = await env.initial_observation()
    assert not isinstance(first, InitialObservationOverflow)
    cut = await env.step(
        tok.encode(f"I am quite sure that it is the {env.secret} because", add_special_tokens=False)
    )
    assert cut.episode_done and cut.reward == 1.0
    try:
        make_env("twenty_questions_easy-v0", seed=7, model=MODEL)
    except DeprecatedEnvError as exc:
        assert "twenty_questions_easy-v1" in str(exc)
    else:
        raise AssertionError("v0 is deprecated")


async def test_easy_twenty_questions_v2_states_the_reply_forms_and_pays_listed_guesses_in_a_loss() -> None:
    def fresh() -> TwentyQuestionsEnv:
        env = make_env("twenty_questions_easy", seed=11, model=MODEL)  # the newest version: v2
        assert isinstance(env, TwentyQuestionsEnv) and env.listed_guess_reward == 0.1
        return env

    env = fresh()
    others = [w for w in env.candidates if w != env.secret]
    opening, results = await _play(env, lambda _: env.secret)
    assert twenty_questions.EASY_SYSTEM_PROMPT in opening
    assert f"one of these words: {', '.join(env.candidates)}. Which one is it? You have 6 tries." in opening
    assert "Let's play twenty questions" not in opening and len(results) == 1 and results[-1].reward == 1.0
    # A lost game is paid 0.1 per distinct listed word it guessed, however often, never near a win.
    for guessed, expected in ((others[:1], 0.1), (others, 0.3), ([], 0.0)):
        env = fresh()
        replies = iter(guessed * 6)
        _, results = await _play(env, lambda _, replies=replies: next(replies, "Is it alive?"))
        assert len(results) == 6 and results[-1].episode_done and not results[-1].metrics["success"]
        assert abs(sum(r.reward for r in results) - expected) < 1e-9, guessed
        assert results[-1].metrics["listed_words_guessed"] == len(guessed)
    # Guessed after wrong guesses, the win still pays exactly 1 (no bonus for wrong guesses first).
    env = fresh()
    replies = iter([*others, env.secret])
    _, results = await _play(env, lambda _: f"Guess: {next(replies)}")
    assert [r.reward for r in results] == [0.0, 0.0, 0.0, 1.0]
    assert results[-1].metrics["listed_words_guessed"] == 4
    for bad in ({"listed_guess_reward": 0.4}, {"listed_guess_reward": -0.1}):
        try:
            make_env("twenty_questions_easy", seed=1, model=MODEL, **bad)
        except ValueError as exc:
            assert "less than a win" in str(exc)
        else:
            raise AssertionError(f"{bad} must be refused: three wrong guesses would pay >= a win")


async def test_guess_the_number_reports_solved_apart_from_partial_credit() -> None:
    bounds = {"lo": 1, "hi": 20, "last": 0}

    def bisect(prompt: str) -> str:
        tail = prompt.rsplit("<|im_start|>user", 1)[-1]
        if "higher" in tail:
            bounds["lo"] = bounds["last"] + 1
        elif "lower" in tail:
            bounds["hi"] = bounds["last"] - 1
        bounds["last"] = (bounds["lo"] + bounds["hi"]) // 2
        return f"[{bounds['last']}]"

    _, results = await _play(make_env("textarena/GuessTheNumber-v0", seed=2, model=MODEL), bisect)
    assert results[-1].reward == 1.0 and results[-1].metrics["solved"] == 1.0
    # A wrong guess, then the same guess twice more: invalid moves that end with partial credit.
    wrong = bounds["last"] + 1 if bounds["last"] < 20 else bounds["last"] - 1
    guesses = iter([f"[{wrong}]"] * 3)
    _, results = await _play(
        make_env("textarena/GuessTheNumber-v0", seed=2, model=MODEL), lambda _: next(guesses)
    )
    final = results[-1]
    assert 0.0 < final.reward < 1.0 and final.metrics["win"] == 1.0 and final.metrics["solved"] == 0.0
