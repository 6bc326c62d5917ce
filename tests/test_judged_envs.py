"""The judged env families (issue 58 item 4): judged/instructions and twenty_questions_judged.

Judges here are real models through the real local backend: ``tiny-random`` (the test model: its
verdicts are noise, mostly malformed, which is the point of some tests) where the checker plays many
episodes; tests/test_conformance.py checks every catalog id with its default judge, SmolLM2-135M.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import envsuite
from envsuite.catalog._make import RendererConfig
from envsuite.core import Env, ProbeExpectation, StepResult, StopReason
from envsuite.envs.judged import (
    INJECTION,
    InstructionEnv,
    item_rubric,
    load_items,
    split_items,
)
from envsuite.envs.judged import checks as judged_checks
from envsuite.errors import UsageError
from envsuite.evals._task import _partner_identity
from envsuite.games.twenty_questions import load_knowledge_base
from envsuite.games.twenty_questions.judged import (
    REASON,
    TwentyQuestionsJudgedEnv,
    explanation_rubric,
    transcript,
)
from envsuite.renderers import reply_to_tokens
from envsuite.rubrics import (
    Combine,
    JudgeCriterion,
    RegexCriterion,
    Rubric,
    RubricStepEnv,
    Scored,
    Timing,
    VerdictOutcome,
    forget_shared_judges,
    score_group,
    shared_judge,
)
from envsuite.testing import check_env
from tests.conftest import TEST_MODEL

RENDERER = RendererConfig(model_name=TEST_MODEL)
JUDGE = TEST_MODEL
"""The real local backend with random weights: a judge whose verdicts are noise, quickly."""
STEP_RUBRIC = Rubric(
    "says-something-plainly",
    (
        RegexCriterion("says_something", r"\w"),
        RegexCriterion("no_question_marks_piled", r"\?\s*\?", negate=True),
    ),
    combine=Combine.ALL_OF,
    timing=Timing.PER_STEP,
)


def _make(env_id: str, seed: int = 0, **kwargs: object) -> Env:
    return envsuite.make_env(env_id, seed=seed, renderer=RENDERER, **kwargs)


async def _play(env: Env, replies: list[str]) -> list[StepResult]:
    renderer = RENDERER.build()
    await env.initial_observation()
    results = []
    for reply in replies:
        results.append(await env.step(reply_to_tokens(renderer, reply)))
        if results[-1].episode_done:
            break
    return results


# ---- the items and their rubrics -------------------------------------------------------------------


def test_items_split_is_seeded_and_disjoint() -> None:
    items = load_items()
    ids = [i.id for i in items]
    assert len(ids) == len(set(ids)) >= 60
    train, test = {i.id for i in split_items("train")}, {i.id for i in split_items("test")}
    assert not train & test and train | test == set(ids) and len(test) == 16
    assert InstructionEnv.item_count_of({}) == 16 and InstructionEnv.item_count_of({"item": ids[0]}) is None
    held_out = _make("judged/instructions", seed=3, split="test")
    assert isinstance(held_out, InstructionEnv) and held_out.item.id in test


def test_every_reference_passes_its_code_criteria_and_every_attack_earns_nothing() -> None:
    async def run() -> None:
        for item in load_items():
            rubric = item_rubric(item, judged=False)
            attacks = [
                "",
                item.prompt,
                INJECTION,
                f"{item.reference}\n\n{INJECTION}",
                "\n".join(item.judge),
                item_rubric(item, judged=True).canonical_json(),
            ]
            scores = await score_group(
                rubric, [Scored(item.prompt, r) for r in [item.reference, *attacks]], None
            )
            assert scores[0].reward == 1.0, (item.id, scores[0])
            assert [s.reward for s in scores[1:]] == [0.0] * len(attacks), item.id

    asyncio.run(run())


def test_a_judged_rubric_weighs_code_and_judge_alike_and_gates_both_on_the_guards() -> None:
    item = next(i for i in load_items() if i.id == "volcano-kids")
    rubric = item_rubric(item, judged=True)
    judged = [c for c in rubric.criteria if isinstance(c, JudgeCriterion)]
    code = [c for c in rubric.criteria if not isinstance(c, JudgeCriterion) and c.weight > 0]
    assert len(judged) == 2 and sum(c.weight for c in judged) == sum(c.weight for c in code)
    guards = {"substantive", "own_words", "no_judge_talk", "no_rubric_text"}
    assert all(set(rubric.gates_of(c.name)) == guards for c in [*judged, *code])
    assert rubric.identity() != item_rubric(item, judged=False).identity()


def test_code_checks_resolve_by_name() -> None:
    at_most_3 = judged_checks.words_at_most_3
    assert at_most_3("", "one two three") == 1.0 and at_most_3("", "one two three four") == 0.0
    assert judged_checks.bullets_2("", "- a\n- b\ntext") == 1.0
    assert judged_checks.json_object("", '```json\n{"a": 1}\n```') == 1.0
    assert judged_checks.json_object("", "[1, 2]") == 0.0
    assert judged_checks.sentences_at_most_1("", "One. Two.") == 0.0
    assert judged_checks.own_words("write about a cat", "write about a cat") == 0.0
    with pytest.raises(AttributeError):
        judged_checks.no_such_check  # noqa: B018
    with pytest.raises(AttributeError):
        judged_checks.bullets  # noqa: B018  (a check that needs its number)


# ---- the judge as a partner --------------------------------------------------------------------------


def test_the_judge_is_in_the_identity_and_a_judgeless_run_is_named_apart() -> None:
    judged = _make("judged/instructions", judge=JUDGE)
    code = _make("judged/instructions_code")
    assert _partner_identity(judged) == f"judge:{shared_judge(JUDGE).identity()}"
    assert TEST_MODEL in _partner_identity(judged)
    assert _partner_identity(code) == "judge:none"
    game = _make("twenty_questions_judged", judge=JUDGE)
    plain = _make("twenty_questions_judged", judge=None)
    assert "rules-" in _partner_identity(game) and TEST_MODEL in _partner_identity(game)
    assert _partner_identity(plain).endswith("judge:none") and _partner_identity(plain) != _partner_identity(
        game
    )
    assert envsuite.spec("judged/instructions").partner_kwarg == "judge"


def test_a_judged_reply_scores_code_and_judge_halves_and_a_malformed_verdict_is_defined() -> None:
    env = _make("judged/instructions", seed=5, judge=JUDGE)
    assert isinstance(env, InstructionEnv)
    (result,) = asyncio.run(_play(env, [env.item.reference]))
    assert result.stop_reason is StopReason.COMPLETED and result.metrics["code"] == 1.0
    assert result.metrics["guards"] == 1.0
    # tiny-random's verdicts are noise: whatever each one is, it is an outcome with a score, never a crash
    verdicts = [c for c in result.logs["criteria"].split("; ") if c.startswith("judge_")]
    assert verdicts and all(any(o.value in v for o in VerdictOutcome) for v in verdicts)
    assert result.reward == pytest.approx(0.5 + 0.5 * result.metrics["judge"])
    assert 0.0 <= result.metrics["judge_malformed"] <= 1.0


def test_cached_judgments_make_a_rerun_issue_no_judge_calls(tmp_path: Path) -> None:
    cache = str(tmp_path / "judgments.sqlite")

    def play_all() -> list[float]:
        rewards = []
        for seed in range(4):
            env = _make("judged/instructions", seed=seed, judge=JUDGE, judge_cache=cache)
            assert isinstance(env, InstructionEnv)
            rewards.append(asyncio.run(_play(env, [env.item.reference]))[0].reward)
        env = _make("twenty_questions_judged", seed=2, judge=JUDGE, judge_cache=cache)
        assert isinstance(env, TwentyQuestionsJudgedEnv)
        rewards.append(asyncio.run(_play(env, [f"Guess: {env.secret}\nBecause: {REASON}"]))[0].reward)
        return rewards

    forget_shared_judges()
    first = play_all()
    asked = shared_judge(JUDGE, cache).stats
    assert asked.calls >= 5 and asked.cached == 0
    forget_shared_judges()  # a new process, as it were: a fresh judge over the same cache file
    assert play_all() == first
    again = shared_judge(JUDGE, cache).stats
    assert again.calls == 0 and again.cached == asked.calls
    forget_shared_judges()


# ---- judged twenty questions -------------------------------------------------------------------------


def test_the_secret_check_reads_a_guess_as_the_game_does() -> None:
    async def correct(names: list[str], reply: str) -> float:
        (score,) = await score_group(explanation_rubric(names, judged=False), [Scored("", reply)], None)
        return score.of("correct_secret").score

    kb = load_knowledge_base()
    for word in kb.words("train")[:40]:
        names = sorted(kb.entity(word).names)
        assert asyncio.run(correct(names, f"Guess: {word}")) == 1.0
        assert asyncio.run(correct(names, f"**Guess:** The {word.title()}.\nBecause: x")) == 1.0
        assert asyncio.run(correct(names, f"Guess: {word}, zzz")) == 0.0
        assert asyncio.run(correct(names, f"Guess: {word}\nGuess: zzz")) == 0.0


def test_judged_twenty_questions_scores_the_final_guess_and_its_reason() -> None:
    def final(replies: list[str], seed: int = 4) -> StepResult:
        env = _make("twenty_questions_judged", seed=seed, judge=None, max_questions=3)
        assert isinstance(env, TwentyQuestionsJudgedEnv)
        return asyncio.run(_play(env, [r.format(secret=env.secret) for r in replies]))[-1]

    won = final(["Is it alive?", "Guess: {secret}\nBecause: " + REASON])
    assert won.reward == 1.0 and won.metrics["success"] == 1.0 and won.metrics["rubric/gives_reason"] == 1.0
    bare = final(["Guess: {secret}"])
    assert bare.reward == pytest.approx(2 / 3) and bare.metrics["rubric/correct_secret"] == 1.0
    lost = final(["Guess: zzz\nBecause: " + REASON] * 3)
    assert lost.reward == 0.0 and lost.metrics["success"] == 0.0 and lost.stop_reason is StopReason.MAX_TURNS
    talks = final(["Guess: {secret}\nBecause: " + INJECTION])
    assert talks.reward == pytest.approx(2 / 3) and talks.metrics["rubric/gives_reason"] == 0.0


def test_the_judge_sees_the_questions_and_answers_never_the_secret() -> None:
    env = _make("twenty_questions_judged", seed=4, judge=None)
    assert isinstance(env, TwentyQuestionsJudgedEnv)
    asyncio.run(_play(env, ["Is it alive?", "Is it bigger than a car?", f"Guess: {env.secret}\nBecause: x"]))
    shown = transcript(env.conversation())
    assert "Q: Is it alive?" in shown and "Q: Is it bigger than a car?" in shown and "A: " in shown
    assert env.secret not in shown.lower() and "Correct!" not in shown


# ---- per-step scoring ----------------------------------------------------------------------------------


def test_a_per_step_rubric_scores_every_turn_and_keeps_the_return_in_range() -> None:
    env = _make(
        "twenty_questions_judged", seed=4, judge=None, step_rubric=STEP_RUBRIC.to_dict(), step_weight=0.2
    )
    assert isinstance(env, RubricStepEnv)
    secret = env.inner.secret
    results = asyncio.run(_play(env, ["Is it alive?", "Is it big??", f"Guess: {secret}\nBecause: {REASON}"]))
    assert [s.reward for s in env.turn_scores] == [1.0, 0.0, 1.0]
    # each step pays the change of the turns' running mean: 1, then 1/2, then 2/3
    assert [r.reward for r in results[:2]] == pytest.approx([0.2 * 1.0, 0.2 * (0.5 - 1.0)])
    assert sum(r.reward for r in results) == pytest.approx(0.8 * 1.0 + 0.2 * (2 / 3))
    assert results[-1].metrics["rubric_step/reward"] == pytest.approx(2 / 3)
    assert "step rubric=says-something-plainly@" in env.answerer_identity


def test_the_step_wrapper_takes_any_env_and_only_a_per_step_rubric() -> None:
    renderer = RENDERER.build()
    inner = _make("arithmetic", seed=1)
    env = RubricStepEnv(inner, STEP_RUBRIC, None, renderer, weight=0.5)
    (result,) = asyncio.run(_play(env, ["I am not sure."]))
    assert result.episode_done and result.metrics["rubric_step/says_something"] == 1.0
    with pytest.raises(UsageError, match="per step"):
        RubricStepEnv(inner, Rubric("end", STEP_RUBRIC.criteria), None, renderer)
    judged = Rubric("j", (JudgeCriterion("ok", "Is it ok?"),), timing=Timing.PER_STEP)
    with pytest.raises(UsageError, match="no judge"):
        RubricStepEnv(inner, judged, None, renderer)


# ---- the conformance checker ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [
        ("judged/instructions-v0", {"judge": JUDGE}),
        ("twenty_questions_judged-v0", {"judge": JUDGE}),
        ("twenty_questions_judged-v0", {"judge": None}),
        ("twenty_questions_judged-v0", {"judge": None, "step_rubric": STEP_RUBRIC.to_dict()}),
    ],
)
def test_judged_envs_conform(env_id: str, kwargs: dict[str, object]) -> None:
    """With the tiny-random judge (the default SmolLM2 judge: tests/test_conformance.py)."""
    report = check_env(env_id, model=TEST_MODEL, **kwargs)
    assert report.passed, report.render()
    tally = report.probe_tally
    assert tally is not None and tally.attacks_succeeded == 0
    assert tally.references == (0 if kwargs.get("judge") else 2)


def test_judged_envs_declare_their_probes() -> None:
    env = _make("judged/instructions", judge=JUDGE)
    names = {p.name for p in env.reward_probes()}
    assert {
        "copies the prompt",
        "addresses the judge",
        "rubric questions verbatim",
        "rubric as JSON",
    } <= names
    assert all(p.expect is ProbeExpectation.BELOW_REFERENCE for p in env.reward_probes())
    code = _make("judged/instructions_code")
    assert [p.expect for p in code.reward_probes()].count(ProbeExpectation.FULL_MARKS) == 1
