"""The math envs (arithmetic, math) on the real SmolLM2 tokenizer and renderer."""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path
from typing import Any

import pytest

import envsuite
from envsuite import Env, EnvKwargsError, InitialObservationOverflow, StepResult, StopReason
from envsuite.envs import MathDatasetError, Problem, ProblemEnv

MODEL = "tiny-random"


def make(env_id: str, **kwargs: Any) -> Env:
    return envsuite.make_env(env_id, model=MODEL, **kwargs)


async def prompt_of(env: Env) -> list[int]:
    start = await env.initial_observation()
    assert not isinstance(start, InitialObservationOverflow)
    return start[0].to_ints()


def reply_tokens(env: Env, text: str, *, stop: bool = True) -> list[int]:
    """Tokens a sampler would return for ``text`` (ending with the stop token when ``stop``)."""
    renderer = envsuite.RendererConfig(model_name=MODEL).build()
    tokens = list(renderer.tokenizer.encode(text, add_special_tokens=False))
    sequences = renderer.get_stop_sequences()
    if stop:
        first = sequences[0]
        tokens += (
            [first] if isinstance(first, int) else renderer.tokenizer.encode(first, add_special_tokens=False)
        )
    return tokens


async def play(env: Env, text: str, *, stop: bool = True) -> StepResult:
    await prompt_of(env)
    return await env.step(reply_tokens(env, text, stop=stop))


def problem_of(env: Env) -> Problem:
    assert isinstance(env, ProblemEnv)
    return env.problem


def reference(env: Env) -> str:
    return problem_of(env).answer


# -- determinism and splits --------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", ["arithmetic", "math"])
async def test_same_seed_same_episode(env_id: str) -> None:
    first, second = make(env_id, seed=11), make(env_id, seed=11)
    assert await prompt_of(first) == await prompt_of(second)
    action = reply_tokens(first, f"\\boxed{{{reference(first)}}}")
    r1, r2 = await first.step(action), await second.step(action)
    assert (r1.reward, r1.metrics) == (r2.reward, r2.metrics)
    prompts = {tuple(await prompt_of(make(env_id, seed=s))) for s in range(6)}
    assert len(prompts) > 1


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [
        ("arithmetic", {"digits": 1, "operations": "+", "n_terms": 2}),
        ("arithmetic", {"digits": 2, "operations": ["*", "//"], "n_terms": 3, "allow_negatives": True}),
        ("math", {}),
    ],
)
def test_train_and_test_problems_are_disjoint(env_id: str, kwargs: dict[str, Any]) -> None:
    def questions(split: str) -> set[str]:
        return {problem_of(make(env_id, seed=s, split=split, **kwargs)).question for s in range(120)}

    train, test = questions("train"), questions("test")
    assert train and test
    assert not train & test


def test_arithmetic_answers_match_python() -> None:
    for seed in range(40):
        env = make("arithmetic", seed=seed, digits=2, operations="+-*//", n_terms=4, allow_negatives=True)
        problem = problem_of(env)
        # Our own generated expression (never model output), checked against Python's arithmetic.
        assert eval(problem.question, {"__builtins__": {}}) == int(problem.answer)


def test_arithmetic_without_negatives_stays_non_negative() -> None:
    for seed in range(40):
        problem = problem_of(make("arithmetic", seed=seed, operations="-", n_terms=3))
        assert "(-" not in problem.question and int(problem.answer) >= 0


# -- rewards -----------------------------------------------------------------------------------------


async def test_arithmetic_number_format_rewards() -> None:
    env = make("arithmetic", seed=3)
    answer = reference(env)
    correct = await play(env, answer)
    assert (correct.reward, correct.stop_reason) == (1.0, StopReason.COMPLETED)
    assert correct.metrics["correct"] == 1.0 and correct.metrics["format"] == 1.0
    assert correct.metrics["stop/completed"] == 1.0
    unformatted = await play(make("arithmetic", seed=3), f"Let me see... it is {answer}")
    assert unformatted.reward == pytest.approx(0.9)
    wrong = await play(make("arithmetic", seed=3), str(int(answer) + 1))
    assert (wrong.reward, wrong.metrics["correct"], wrong.metrics["format"]) == (0.0, 0.0, 1.0)
    assert wrong.logs["reference"] == answer and wrong.logs["answer"] == str(int(answer) + 1)


async def test_arithmetic_boxed_format_rewards() -> None:
    env = make("arithmetic", seed=5, answer_format="boxed", format_coef=0.2)
    answer = reference(env)
    assert isinstance(env, ProblemEnv) and "\\boxed" in env.prompt
    assert (await play(env, f"So \\boxed{{{answer}}}")).reward == 1.0
    assert (
        await play(make("arithmetic", seed=5, answer_format="boxed", format_coef=0.2), answer)
    ).reward == (pytest.approx(0.8))


async def test_math_rewards_and_logs() -> None:
    env = make("math", seed=2)
    answer = reference(env)
    good = await play(env, f"Step by step... the answer is \\boxed{{{answer}}}.")
    assert (good.reward, good.stop_reason) == (1.0, StopReason.COMPLETED)
    assert good.metrics == {
        "correct": 1.0,
        "format": 1.0,
        "grade_timeout": 0.0,
        "grade_unavailable": 0.0,
        "stop/completed": 1.0,
    }
    assert isinstance(env, ProblemEnv) and good.logs["question"] == env.problem.question
    assert env.prompt.startswith(env.problem.question) and "\\boxed{}" in env.prompt
    assert good.logs["answer"] == answer
    bare = await play(make("math", seed=2), f"The result is {answer}")
    assert bare.reward == pytest.approx(0.9)
    wrong = await play(make("math", seed=2), "\\boxed{-123456}")
    assert (wrong.reward, wrong.metrics["correct"]) == (0.0, 0.0)
    assert wrong.logs["grade"].startswith("wrong")


async def test_truncated_reply_is_not_graded() -> None:
    env = make("arithmetic", seed=4)
    result = await play(env, reference(env), stop=False)
    assert result.stop_reason is StopReason.MAX_TOKENS
    assert result.reward == pytest.approx(-0.1)
    assert result.metrics["stop/max_tokens"] == 1.0


async def test_reply_without_an_answer_is_a_parse_error() -> None:
    result = await play(make("math", seed=1), "I do not know.")
    assert result.stop_reason is StopReason.PARSE_ERROR
    assert result.reward == pytest.approx(-0.1)


# -- garbage, overflow, bad configuration ------------------------------------------------------------


def _garbage_actions() -> dict[str, list[int]]:
    rng = random.Random(0)
    renderer = envsuite.RendererConfig(model_name=MODEL).build()
    emoji = renderer.tokenizer.encode("😀", add_special_tokens=False)
    stop = renderer.get_stop_sequences()
    stop_ids = [s for s in stop if isinstance(s, int)]
    return {
        "empty": [],
        "random": [rng.randrange(49152) for _ in range(300)],
        "random+stop": [rng.randrange(49152) for _ in range(300)] + stop_ids,
        "10k tokens": [rng.randrange(49152) for _ in range(10_000)],
        "invalid utf-8": emoji[:1] + stop_ids,
        "out of vocab": [49152, 10**9, -1, 2**62, *stop_ids],
        "stop only": stop_ids,
    }


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env_id", ["arithmetic", "math"])
@pytest.mark.parametrize("name", list(_garbage_actions()))
async def test_garbage_actions_never_raise(env_id: str, name: str) -> None:
    env = make(env_id, seed=0)
    await prompt_of(env)
    result = await env.step(_garbage_actions()[name])
    assert result.episode_done and result.stop_reason is not None
    assert result.metrics[f"stop/{result.stop_reason.value}"] == 1.0
    assert result.stop_reason in {StopReason.PARSE_ERROR, StopReason.MAX_TOKENS, StopReason.COMPLETED}
    assert -0.1 <= result.reward <= 1.0


@pytest.mark.parametrize("env_id", ["arithmetic", "math"])
async def test_prompt_over_budget_gives_overflow_sentinel(env_id: str) -> None:
    start = await make(env_id, seed=0, max_context_tokens=8).initial_observation()
    assert isinstance(start, InitialObservationOverflow)
    assert start.max_tokens == 8 and start.prompt_tokens > 8


def test_unknown_kwarg_is_rejected() -> None:
    with pytest.raises(EnvKwargsError, match="bogus"):
        envsuite.make_env("arithmetic", bogus=1)
    with pytest.raises(EnvKwargsError, match="bogus"):
        envsuite.make_env("math", bogus=1)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"digits": 0},
        {"n_terms": 1},
        {"operations": "+%"},
        {"operations": []},
        {"answer_format": "words"},
        {"format_coef": -1.0},
    ],
)
def test_bad_arithmetic_knobs_fail_clearly(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        make("arithmetic", **kwargs)


async def test_group_builder_pickles_and_members_share_the_problem() -> None:
    builder = envsuite.make_group_builder("math", group_size=3, seed=7, model=MODEL)
    clone = pickle.loads(pickle.dumps(builder))
    envs = await clone.make_envs()
    assert len({reference(env) for env in envs}) == 1


# -- problem files -----------------------------------------------------------------------------------

GSM8K = [
    {
        "question": f"Tom has {n} apples and buys {n + 1} more. How many apples does he have?",
        "answer": f"{n} + {n + 1} = {2 * n + 1}\n#### {2 * n + 1:,}",
    }
    for n in range(500, 540)
]
MATH = [
    {
        "problem": f"Simplify $\\frac{{{n}}}{{{2 * n}}}$.",
        "solution": "Cancel: $\\boxed{\\frac{1}{2}}$.",
        "level": "Level 1",
    }
    for n in range(1, 41)
]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "\n", encoding="utf-8")
    return str(path)


async def test_jsonl_gsm8k_and_math_formats(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "mixed.jsonl", GSM8K + MATH)
    seen: dict[str, set[str]] = {"train": set(), "test": set()}
    for split in ("train", "test"):
        for seed in range(60):
            env = make("math", dataset=path, split=split, seed=seed)
            seen[split].add(problem_of(env).question)
    assert seen["train"] and seen["test"] and not seen["train"] & seen["test"]
    gsm = make("math", dataset=path, seed=0)
    problem = problem_of(gsm)
    if problem.question.startswith("Tom"):
        assert "," not in problem.answer and int(problem.answer) > 1000
        assert (await play(gsm, f"\\boxed{{{int(problem.answer):,}}}")).reward == 1.0
    else:
        assert problem.answer == "\\frac{1}{2}"
        assert (await play(gsm, "\\boxed{0.5}")).reward == 1.0


async def test_jsonl_explicit_split_files(tmp_path: Path) -> None:
    train = write_jsonl(tmp_path / "train.jsonl", GSM8K[:3])
    test = write_jsonl(tmp_path / "test.jsonl", MATH[:1])
    env = make("math", dataset=train, test_dataset=test, split="test", seed=5)
    assert reference(env) == "\\frac{1}{2}"
    assert (await play(env, "The answer is $\\boxed{\\dfrac{2}{4}}$")).reward == 1.0
    assert reference(make("math", dataset=train, test_dataset=test, seed=5)) in {"1001", "1003", "1005"}


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ('{"question": "q", "answer": "#### 1"}\nnot json\n', r":2: invalid JSON"),
        ('{"prompt": "q", "completion": "1"}\n', "unknown record format"),
        ('{"problem": "p", "solution": "no box"}\n', "no 'answer'"),
        ("\n\n", "no problems"),
        ("[1, 2]\n", "expected a JSON object"),
    ],
)
def test_bad_problem_files_fail_clearly(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(MathDatasetError, match=match):
        make("math", dataset=str(path))


def test_over_long_line_fails_without_reading_it_whole(tmp_path: Path) -> None:
    """Issue 15.2: a record over the 1 MiB line limit is refused as soon as the limit is passed."""
    path = tmp_path / "huge.jsonl"
    huge = {"question": "x" * (3 << 20), "answer": "#### 1"}
    path.write_text(json.dumps(GSM8K[0]) + "\n" + json.dumps(huge) + "\n", encoding="utf-8")
    with pytest.raises(MathDatasetError, match=r"huge.jsonl:2: line is longer than the 1 MiB limit"):
        make("math", dataset=str(path))


def test_over_large_file_is_refused_before_reading(tmp_path: Path) -> None:
    """Issue 15.2: files over 512 MiB are refused from their size (a sparse file: no disk is used)."""
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as handle:
        handle.truncate((512 << 20) + 1)
    with pytest.raises(MathDatasetError, match="over the 512 MiB limit"):
        make("math", dataset=str(path))


def test_non_utf8_line_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(json.dumps(GSM8K[0]).encode() + b"\n" + b'{"question": "caf\xe9", "answer": "#### 1"}\n')
    with pytest.raises(MathDatasetError, match=r"latin1.jsonl:2: not UTF-8"):
        make("math", dataset=str(path))


def test_missing_file_and_conflicting_sources_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(MathDatasetError, match="cannot read"):
        make("math", dataset=str(tmp_path / "nope.jsonl"))
    with pytest.raises(ValueError, match="not both"):
        make("math", dataset="x.jsonl", hf_dataset="openai/gsm8k")


def test_hub_dataset_fails_clearly_offline() -> None:
    with pytest.raises(MathDatasetError, match="dataset=PATH"):
        make("math", hf_dataset="openai/gsm8k", hf_config="main")
