"""Every catalog env passes the conformance checker, and the checker catches broken envs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import envsuite
from envsuite.testing import CheckOutcome, ProbeTally, check_env
from envsuite.testing._reward_probes import summarize
from tests.conftest import TEST_MODEL

AVAILABLE_IDS = sorted(s.id for s in envsuite.registry.all_specs() if not s.unavailable and not s.deprecated)
QUICK_NAMESPACES = ("reasoning_gym/",)
"""Namespaces of many envs of one class: checked on fewer episodes (``quick``), every id still checked.
Their env class is checked in full on a sample (``QUICK_FULL``), and the reasoning-gym tests check the
part the namespaces differ in (each dataset's problems, answers and scores)."""
QUICK_FULL = frozenset({"reasoning_gym/chain_sum-v1", "reasoning_gym/composite-v0", "reasoning_gym/aiw-v0"})


_PROBE_TALLIES: dict[str, ProbeTally] = {}
"""What the reward-hacking suite tried on each catalog env, for the whole-catalog line."""


@pytest.mark.parametrize("env_id", AVAILABLE_IDS)
def test_catalog_env_conforms(env_id: str) -> None:
    quick = env_id.startswith(QUICK_NAMESPACES) and env_id not in QUICK_FULL
    report = check_env(env_id, model=TEST_MODEL, quick=quick)
    if report.probe_tally is not None:
        _PROBE_TALLIES[env_id] = report.probe_tally
    assert report.passed, report.render()


def test_reward_hacking_suite_over_the_whole_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    """Sums what the catalog checks above tried (run after them, in this file's order) and prints
    ``reward hacking: N probes over M envs (K attacks), 0 attacks succeeded``."""
    if len(_PROBE_TALLIES) < len(AVAILABLE_IDS) // 2:
        pytest.skip("the catalog's conformance tests did not run in this session (a -k selection)")
    line = summarize(list(_PROBE_TALLIES.values()))
    with capsys.disabled():
        print(f"\n{line}")
    assert sum(t.attacks_succeeded for t in _PROBE_TALLIES.values()) == 0, line
    assert all(not t.failures for t in _PROBE_TALLIES.values()), line


@pytest.fixture
def broken_envs() -> Iterator[None]:
    names = {
        "scratch/good-v0": "EchoNumberEnv",
        "scratch/global-random-v0": "GlobalRandomEnv",
        "scratch/raising-v0": "RaisingEnv",
        "scratch/no-stop-reason-v0": "NoStopReasonEnv",
        "scratch/env-error-v0": "ReportsEnvErrorEnv",
        "scratch/sometimes-env-error-v0": "SometimesEnvErrorEnv",
        "scratch/old-cookbook-parse-v0": "OldCookbookParseEnv",
    }
    for env_id, cls in names.items():
        envsuite.register(env_id, f"tests.support.toy_envs:{cls}", reward_range=(0.0, 1.0))
    yield
    for env_id in names:
        envsuite.registry.unregister(env_id)


def _outcomes(env_id: str) -> dict[str, CheckOutcome]:
    return {r.name: r.outcome for r in check_env(env_id, model=TEST_MODEL).results}


def test_checker_passes_a_good_env(broken_envs: None) -> None:
    report = check_env("scratch/good", model=TEST_MODEL)
    assert report.passed, report.render()
    assert "PASS" in report.render()


def test_checker_catches_global_random(broken_envs: None) -> None:
    outcomes = _outcomes("scratch/global-random")
    assert outcomes["seeded determinism"] is CheckOutcome.FAILED
    assert outcomes["group shares one episode"] is CheckOutcome.FAILED


def test_checker_catches_exceptions_on_garbage(broken_envs: None) -> None:
    report = check_env("scratch/raising", model=TEST_MODEL)
    garbage = next(r for r in report.results if r.name == "garbage actions")
    assert garbage.outcome is CheckOutcome.FAILED and "empty" in garbage.detail and garbage.fix
    assert not report.passed and "FAIL" in report.render()


def test_checker_catches_missing_stop_reason(broken_envs: None) -> None:
    outcomes = _outcomes("scratch/no-stop-reason")
    assert outcomes["final transition has a stop reason"] is CheckOutcome.FAILED


def test_checker_fails_an_env_whose_episodes_all_end_in_env_error(broken_envs: None) -> None:
    report = check_env("scratch/env-error", model=TEST_MODEL)
    errors = next(r for r in report.results if r.name == "episodes end without env errors")
    assert errors.outcome is CheckOutcome.FAILED and "2 of 2 episodes ended in env_error" in errors.detail
    assert "boom" in errors.detail and not report.passed


def test_checker_warns_on_a_high_env_error_rate(broken_envs: None) -> None:
    seeds = (0, 3)  # seed 0 draws an odd number (env_error), seed 3 an even one
    report = check_env("scratch/sometimes-env-error", model=TEST_MODEL, seeds=seeds)
    errors = next(r for r in report.results if r.name == "episodes end without env errors")
    assert errors.outcome is CheckOutcome.WARNED and "1 of 2" in errors.detail
    assert (
        report.passed
        and not check_env("scratch/sometimes-env-error", model=TEST_MODEL, seeds=seeds, strict=True).passed
    )


def test_checker_fails_an_env_that_raises_on_every_reply(broken_envs: None) -> None:
    """The old cookbook interop bug: an env that cannot unpack the renderer's result raises every step."""
    outcomes = _outcomes("scratch/old-cookbook-parse")
    assert outcomes["episodes end without env errors"] is CheckOutcome.FAILED
    assert outcomes["final transition has a stop reason"] is CheckOutcome.FAILED


def test_checker_reports_unknown_ids_and_kwargs() -> None:
    report = check_env("no-such-env", model=TEST_MODEL)
    assert not report.passed and "no env registered" in report.results[0].detail
    report = check_env("arithmetic", model=TEST_MODEL, colour="red")
    assert not report.passed and "colour" in report.results[0].detail
