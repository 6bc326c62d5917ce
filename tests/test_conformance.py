"""Every catalog env passes the conformance checker, and the checker catches broken envs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import envsuite
from envsuite.testing import CheckOutcome, check_env
from tests.conftest import TEST_MODEL

AVAILABLE_IDS = sorted(s.id for s in envsuite.registry.all_specs() if not s.unavailable and not s.deprecated)


@pytest.mark.parametrize("env_id", AVAILABLE_IDS)
def test_catalog_env_conforms(env_id: str) -> None:
    report = check_env(env_id, model=TEST_MODEL)
    assert report.passed, report.render()


@pytest.fixture
def broken_envs() -> Iterator[None]:
    names = {
        "scratch/good-v0": "EchoNumberEnv",
        "scratch/global-random-v0": "GlobalRandomEnv",
        "scratch/raising-v0": "RaisingEnv",
        "scratch/no-stop-reason-v0": "NoStopReasonEnv",
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


def test_checker_reports_unknown_ids_and_kwargs() -> None:
    report = check_env("no-such-env", model=TEST_MODEL)
    assert not report.passed and "no env registered" in report.results[0].detail
    report = check_env("arithmetic", model=TEST_MODEL, colour="red")
    assert not report.passed and "colour" in report.results[0].detail
