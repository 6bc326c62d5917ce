"""Twenty questions: the offline answerer (accuracy, negations, guesses, unknowns) and the env."""

from __future__ import annotations

import random

import pytest

from envsuite import EnvContext, Message, MessageCompleter, RendererConfig, StopReason, make_env
from envsuite.core import Split
from envsuite.games.twenty_questions import (
    Answer,
    RuleAnswerer,
    TwentyQuestionsEnv,
    evaluate_answerer,
    load_knowledge_base,
    load_labelled_cases,
    word_split,
)
from envsuite.renderers import Renderer

ACCURACY_FLOOR = 0.85


@pytest.fixture(scope="module")
def answerer() -> RuleAnswerer:
    return RuleAnswerer()


@pytest.fixture(scope="module")
def renderer() -> Renderer:
    return RendererConfig(model_name="tiny-random").build()


def _ctx(renderer: Renderer, seed: int = 0, split: Split = "train", max_tokens: int = 4096) -> EnvContext:
    return EnvContext(seed=seed, renderer=renderer, split=split, max_context_tokens=max_tokens)


def _reply(renderer: Renderer, text: str) -> list[int]:
    """Tokens of a clean assistant reply: the text followed by the end-of-turn stop token."""
    stop = renderer.get_stop_sequences()
    assert stop and isinstance(stop[0], int)
    return [*renderer.tokenizer.encode(text, add_special_tokens=False), stop[0]]


# -- knowledge base ------------------------------------------------------------------------------


def test_knowledge_base_size_and_coverage() -> None:
    kb = load_knowledge_base()
    assert len(kb.entities) >= 150
    top = {e.chain[-2] if len(e.chain) > 1 else e.chain[0] for e in kb.entities.values()}
    assert {"living thing", "food", "object", "place", "body part"} <= top
    assert all(e.size_m is not None for e in kb.entities.values())


def test_split_is_deterministic_and_disjoint() -> None:
    kb = load_knowledge_base()
    train, test = set(kb.words("train")), set(kb.words("test"))
    assert train and test and not train & test
    assert train | test == set(kb.entities)
    assert all(word_split(w) == "test" for w in test)


# -- answerer ------------------------------------------------------------------------------------


async def test_accuracy_on_held_out_labelled_set(answerer: RuleAnswerer) -> None:
    cases = load_labelled_cases()
    assert len(cases) >= 300
    report = await evaluate_answerer(answerer, cases)
    assert report.accuracy >= ACCURACY_FLOOR, [(c.question, c.word, got) for c, got in report.misses]
    # Abstaining beats a confident wrong answer: those must stay rare.
    assert report.confident_wrong <= 0.03 * report.total


@pytest.mark.parametrize(
    ("word", "question", "expected"),
    [
        ("dog", "Is it an animal?", Answer.YES),
        ("dog", "Is it not an animal?", Answer.NO),
        ("dog", "Isn't it an animal?", Answer.YES),
        ("hammer", "Is it not alive?", Answer.YES),
        ("penguin", "Can't it fly?", Answer.NO),
        ("penguin", "Can it not fly?", Answer.YES),
        ("apple", "Is it inedible?", Answer.NO),
        ("car", "Doesn't it have wheels?", Answer.YES),
    ],
)
def test_negations(answerer: RuleAnswerer, word: str, question: str, expected: Answer) -> None:
    assert answerer.answer_now(word, question) is expected


@pytest.mark.parametrize(
    ("word", "question", "expected"),
    [
        ("cat", "Is it a cat?", Answer.YES),
        ("cat", "Is it a dog?", Answer.NO),
        ("cat", "Is it a kitten?", Answer.YES),
        ("car", "Is it an automobile?", Answer.YES),
        ("cat", "Is it a hamster?", Answer.NO),  # a specific thing outside the word list
        ("cat", "Are you thinking of a cat?", Answer.YES),
        ("cat", "Is the word cat?", Answer.YES),
    ],
)
def test_guesses_as_questions(answerer: RuleAnswerer, word: str, question: str, expected: Answer) -> None:
    assert answerer.answer_now(word, question) is expected


@pytest.mark.parametrize(
    "question",
    [
        "What color is it?",
        "Is it a car or a truck?",
        "",
        "   ",
        "zxq vlorp",
        "Is it a gizmo?",
        "Is it happy?",
        "Tell me the word.",
        "\x00\ufffd\ufffd",
        "Is it" * 500,
    ],
)
def test_unknown_questions(answerer: RuleAnswerer, question: str) -> None:
    assert answerer.answer_now("dog", question) is Answer.UNKNOWN


def test_size_questions(answerer: RuleAnswerer) -> None:
    assert answerer.answer_now("elephant", "Is it bigger than a breadbox?") is Answer.YES
    assert answerer.answer_now("key", "Is it bigger than a breadbox?") is Answer.NO
    assert answerer.answer_now("key", "Can you hold it in your hand?") is Answer.YES
    assert answerer.answer_now("piano", "Can you hold it in your hand?") is Answer.NO
    assert answerer.answer_now("bus", "Is it smaller than a car?") is Answer.NO


def test_fuzz_never_raises(answerer: RuleAnswerer) -> None:
    rng = random.Random(0)
    alphabet = "abcdefghijklmnopqrstuvwxyz ?'!-,.0123456789éß\u200b"
    words = list(load_knowledge_base().entities)
    for _ in range(300):
        question = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        assert answerer.answer_now(rng.choice(words), question) in set(Answer)


@pytest.mark.parametrize(
    "question",
    [
        "Is it an animal? " * 200,  # ~3,400 characters: hit RecursionError before (issue 15.4)
        "Is it an animal? " * 5000,
        "Is it a " + "big " * 3000 + "dog?",
        "Is it " + "x" * 100_000 + "?",
    ],
)
def test_long_questions_are_declined_not_crashed(answerer: RuleAnswerer, question: str) -> None:
    assert answerer.answer_now("dog", question) is Answer.UNKNOWN


def test_a_rambling_question_near_the_limit_still_gets_an_answer(answerer: RuleAnswerer) -> None:
    padded = "Okay, so, hmm, well, " * 13 + "is it an animal?"  # 289 characters, under the limit
    assert len(padded) <= 300 and answerer.answer_now("elephant", padded) is Answer.YES


def test_unknown_secret_is_a_clear_error(answerer: RuleAnswerer) -> None:
    with pytest.raises(ValueError, match="not in the knowledge base"):
        answerer.answer_now("flibbertigibbet", "Is it an animal?")


# -- env ---------------------------------------------------------------------------------------


async def test_scripted_winning_game(renderer: Renderer) -> None:
    env = TwentyQuestionsEnv(_ctx(renderer), secret="dog")
    first = await env.initial_observation()
    assert not isinstance(first, type(None))
    step = await env.step(_reply(renderer, "Is it an animal?"))
    assert not step.episode_done and step.logs["answer"] == "Yes."
    step = await env.step(_reply(renderer, "Does it bark?"))
    assert step.logs["answer"] == "Yes."
    step = await env.step(_reply(renderer, "Guess: Dog"))
    assert step.episode_done and step.reward == 1.0 and step.stop_reason is StopReason.COMPLETED
    assert step.metrics["success"] == 1.0 and step.metrics["questions_asked"] == 2
    assert step.metrics["stop/completed"] == 1.0


async def test_question_penalty_shapes_the_win(renderer: Renderer) -> None:
    env = TwentyQuestionsEnv(_ctx(renderer), secret="cat", question_penalty=0.1)
    await env.initial_observation()
    await env.step(_reply(renderer, "Is it a pet?"))
    await env.step(_reply(renderer, "Guess: dog"))  # a wrong guess counts as a question
    step = await env.step(_reply(renderer, "Guess: cat"))
    assert step.reward == pytest.approx(0.8) and step.metrics["wrong_guesses"] == 1


async def test_losing_game_runs_out_of_questions(renderer: Renderer) -> None:
    env = TwentyQuestionsEnv(_ctx(renderer), secret="piano")
    await env.initial_observation()
    for turn in range(20):
        step = await env.step(_reply(renderer, "Is it an animal?"))
        assert step.episode_done == (turn == 19)
    assert step.reward == 0.0 and step.stop_reason is StopReason.MAX_TURNS
    assert step.metrics["questions_asked"] == 20 and step.metrics["success"] == 0.0
    assert step.logs["secret"] == "piano"


async def test_malformed_turns_are_answered_and_counted(renderer: Renderer) -> None:
    env = TwentyQuestionsEnv(_ctx(renderer), secret="apple", max_questions=5)
    await env.initial_observation()
    vocab = 49152
    rng = random.Random(1)
    for action in (
        [],
        [rng.randrange(vocab) for _ in range(40)],
        [0xF0, 0x9F],
        _reply(renderer, "Is it")[:-1],
    ):
        step = await env.step(action)
        assert not step.episode_done
        assert step.logs["answer"] == Answer.UNKNOWN.value
    step = await env.step(_reply(renderer, "Is it a fruit?"))
    assert step.episode_done and step.stop_reason is StopReason.MAX_TURNS
    assert step.metrics["malformed_turns"] >= 3 and step.metrics["unanswerable_rate"] >= 0.6


async def test_empty_turns_are_malformed_and_skip_the_answerer(renderer: Renderer) -> None:
    """Issue 15.4 (decided in docs/twenty_questions.md): a turn with no word uses a turn, is answered
    "I can't answer that." and counts as malformed; the answerer is never asked."""
    asked: list[str] = []

    class Recording(RuleAnswerer):
        async def answer(self, secret: str, question: str) -> Answer:
            asked.append(question)
            return await super().answer(secret, question)

    empties = ["", "   ", "?", "...", "Guess:", "**Guess:** ?"]
    env = TwentyQuestionsEnv(
        _ctx(renderer), secret="dog", max_questions=len(empties) + 1, answerer=Recording()
    )
    await env.initial_observation()
    for text in empties:
        step = await env.step(_reply(renderer, text))
        assert not step.episode_done and step.logs["answer"] == Answer.UNKNOWN.value
    step = await env.step(_reply(renderer, "Is it an animal?"))
    assert step.episode_done and asked == ["Is it an animal?"]
    assert step.metrics["malformed_turns"] == len(empties)
    assert step.metrics["questions_asked"] == len(empties) + 1


async def test_a_long_question_in_the_env_is_declined(renderer: Renderer) -> None:
    env = TwentyQuestionsEnv(_ctx(renderer, max_tokens=100_000), secret="dog", max_questions=2)
    await env.initial_observation()
    step = await env.step(_reply(renderer, "Is it an animal? " * 200))
    assert not step.episode_done and step.logs["answer"] == Answer.UNKNOWN.value


async def test_observations_extend_previous_plus_action(renderer: Renderer) -> None:
    env = TwentyQuestionsEnv(_ctx(renderer), secret="car")
    first = await env.initial_observation()
    assert not isinstance(first, type(None)) and isinstance(first, tuple)
    prev = first[0].to_ints()
    for question in ("Is it a vehicle?", "Does it have wheels?"):
        action = _reply(renderer, question)
        step = await env.step(action)
        now = step.next_observation.to_ints()
        assert now[: len(prev) + len(action)] == prev + action
        prev = now


def test_secret_fixed_seed_determinism_and_group_sharing(renderer: Renderer) -> None:
    assert TwentyQuestionsEnv(_ctx(renderer, seed=3), secret="Dog").secret == "dog"
    secrets = {TwentyQuestionsEnv(_ctx(renderer, seed=s)).secret for s in range(40)}
    assert len(secrets) > 10
    assert (
        TwentyQuestionsEnv(_ctx(renderer, seed=7)).secret == TwentyQuestionsEnv(_ctx(renderer, seed=7)).secret
    )
    test_words = set(load_knowledge_base().words("test"))
    assert all(
        TwentyQuestionsEnv(_ctx(renderer, seed=s, split="test")).secret in test_words for s in range(20)
    )
    with pytest.raises(ValueError, match="unknown to answerer"):
        TwentyQuestionsEnv(_ctx(renderer), secret="flibbertigibbet")


async def test_group_from_catalog_shares_the_secret() -> None:
    envs = [make_env("twenty_questions-v0", seed=11, model="tiny-random") for _ in range(2)]
    assert all(isinstance(e, TwentyQuestionsEnv) for e in envs)
    first, second = (e for e in envs if isinstance(e, TwentyQuestionsEnv))
    assert first.secret == second.secret


async def test_context_overflow(renderer: Renderer) -> None:
    tiny = TwentyQuestionsEnv(_ctx(renderer, max_tokens=10), secret="dog")
    overflow = await tiny.initial_observation()
    assert not isinstance(overflow, tuple) and overflow.max_tokens == 10
    env = TwentyQuestionsEnv(_ctx(renderer, max_tokens=140), secret="dog")
    first = await env.initial_observation()
    assert isinstance(first, tuple)
    step = await env.step(_reply(renderer, "Is it an animal? " * 10))
    assert step.episode_done and step.stop_reason is StopReason.CONTEXT_OVERFLOW


class _AlwaysNo(MessageCompleter):
    """A stand-in for a model answerer: says no to everything, and records what it was shown."""

    def __init__(self) -> None:
        self.seen: list[list[Message]] = []

    async def __call__(self, messages: list[Message]) -> Message:
        self.seen.append(messages)
        return {"role": "assistant", "content": "No, it is not."}

    def identity(self) -> str:
        return "always-no-v1"


class _Broken(MessageCompleter):
    async def __call__(self, messages: list[Message]) -> Message:
        raise ConnectionError("model server down")


async def test_swapping_in_a_message_completer(renderer: Renderer) -> None:
    default = TwentyQuestionsEnv(_ctx(renderer), secret="dog")
    completer = _AlwaysNo()
    swapped = TwentyQuestionsEnv(_ctx(renderer), secret="dog", answerer=completer)
    assert default.answerer_identity.startswith("rules-")
    assert swapped.answerer_identity == "completer:always-no-v1"
    await swapped.initial_observation()
    step = await swapped.step(_reply(renderer, "Is it an animal?"))
    assert step.logs["answer"] == "No." and step.logs["answerer"] == "completer:always-no-v1"
    assert "dog" in completer.seen[0][0]["content"] and completer.seen[0][1]["content"] == "Is it an animal?"


async def test_failing_answerer_ends_with_partner_error(renderer: Renderer) -> None:
    env = TwentyQuestionsEnv(_ctx(renderer), secret="dog", answerer=_Broken())
    await env.initial_observation()
    step = await env.step(_reply(renderer, "Is it an animal?"))
    assert step.episode_done and step.stop_reason is StopReason.PARTNER_ERROR
