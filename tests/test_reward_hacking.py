"""The reward-hacking suite of the conformance checker: sound rewards pass, gameable ones are caught.

The whole catalog runs it in ``tests/test_conformance.py`` (it is one of the checker's checks); here
deliberately broken envs show that each kind of attack fails an env, and real envs that their probes
say what their graders do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import envsuite
from envsuite import ProbeExpectation, RendererConfig
from envsuite.testing import CheckOutcome, CheckResult, ConformanceReport, check_env
from envsuite.testing._reward_probes import GENERIC_PROBES, ProbeOutcome, probes_of, summarize
from tests.conftest import TEST_MODEL

TOYS = {
    "scratch/probed-echo-v0": "ProbedEchoEnv",
    "scratch/rewards-everything-v0": "RewardsEverythingEnv",
    "scratch/rewards-the-format-v0": "RewardsTheFormatEnv",
    "scratch/short-reference-v0": "ShortReferenceEnv",
    "scratch/pays-the-exit-v0": "PaysTheExitEnv",
    "scratch/silence-wins-v0": "SilenceWinsEnv",
    "scratch/silence-sometimes-wins-v0": "SilenceSometimesWinsEnv",
}
EVEN_AND_ODD_SEEDS = (0, 3)
"""EchoNumberEnv draws 49 on seed 0 and 30 on seed 3."""


@pytest.fixture
def toys() -> Iterator[None]:
    for env_id, cls in TOYS.items():
        envsuite.register(env_id, f"tests.support.reward_toys:{cls}", reward_range=(0.0, 1.0))
    yield
    for env_id in TOYS:
        envsuite.registry.unregister(env_id)


def _suite(env_id: str, seeds: tuple[int, ...] = (0, 1)) -> tuple[CheckResult, ConformanceReport]:
    report = check_env(env_id, model=TEST_MODEL, seeds=seeds)
    return next(r for r in report.results if r.name == "reward hacking"), report


def test_a_sound_env_passes_and_reports_what_was_tried(toys: None) -> None:
    result, report = _suite("scratch/probed-echo")
    assert result.outcome is CheckOutcome.PASSED and report.passed, report.render()
    tally = report.probe_tally
    assert tally is not None and tally.attacks_succeeded == 0 and not tally.failures
    own, generic = 3, len(GENERIC_PROBES)  # 'sys.exit' (NO_CREDIT) is played on the first seed only
    assert (tally.probes, tally.references, tally.attacks) == (
        2 * (own + generic) - 1,
        2,
        2 * (own + generic - 1) - 1,
    )
    assert "0 attacks succeeded" in result.detail and "reward hacking" in report.render()


def test_an_env_that_rewards_every_answer_is_caught(toys: None) -> None:
    result, report = _suite("scratch/rewards-everything")
    assert result.outcome is CheckOutcome.FAILED and not report.passed
    assert (
        "'junk' earned 1 (must earn less than 1)" in result.detail and "'sys.exit' earned 1" in result.detail
    )
    tally = report.probe_tally
    assert tally is not None and tally.attacks_succeeded == tally.attacks == 2 * (2 + len(GENERIC_PROBES)) - 1
    assert "unavailable" in result.fix
    assert summarize([tally]).endswith(f"{tally.attacks} attacks succeeded")


def test_the_generic_format_only_probe_finds_a_grader_that_pays_the_format(toys: None) -> None:
    result, report = _suite("scratch/rewards-the-format")
    assert result.outcome is CheckOutcome.FAILED
    tally = report.probe_tally
    assert tally is not None and {v.run.probe.name for v in tally.failures} == {"format only: \\boxed{}"}


def test_a_reference_short_of_full_marks_fails_and_is_not_counted_as_an_attack(toys: None) -> None:
    result, report = _suite("scratch/short-reference")
    tally = report.probe_tally
    assert result.outcome is CheckOutcome.FAILED and tally is not None
    assert {v.outcome for v in tally.failures} == {ProbeOutcome.REFERENCE_SHORT}
    assert tally.attacks_succeeded == 0 and "needs full marks 1" in result.detail
    assert "references short of full marks" in summarize([tally])


def test_an_attack_on_the_grader_must_earn_nothing_not_only_less(toys: None) -> None:
    result, _ = _suite("scratch/pays-the-exit")
    assert result.outcome is CheckOutcome.FAILED
    assert "'sys.exit' earned 0.25 (must earn at most 0)" in result.detail


def test_an_env_without_a_reference_is_judged_on_the_mean_over_seeds(toys: None) -> None:
    """Doing nothing that wins every seed is caught; winning one seed of two (an opponent that lost on
    its own) is not an attack."""
    result, _ = _suite("scratch/silence-wins", EVEN_AND_ODD_SEEDS)
    assert result.outcome is CheckOutcome.FAILED and "'empty reply' earned 1" in result.detail
    assert "seeds 0, 3 (mean)" in result.detail
    result, _ = _suite("scratch/silence-sometimes-wins", EVEN_AND_ODD_SEEDS)
    assert result.outcome is CheckOutcome.PASSED and "no reference answer" in result.detail


@pytest.mark.parametrize(
    ("env_id", "own"),
    [
        ("arithmetic", {"reference", "wrong answer in format", "format without an answer"}),
        (
            "reasoning_gym/chain_sum",
            {"reference", "wrong answer in format", "format without an answer", "wrong number in format"},
        ),
        ("reasoning_gym/graph_color", {"wrong answer in format"}),  # no reference answer in its items
        ("tools/kv_store", {"reference", "answer without acting", "a call that does nothing"}),
        (
            "twenty_questions_easy-v2",
            {
                "reference",
                "wrong guess",
                "format only: Guess:",
                "every candidate at once",
                "every candidate named",
            },
        ),
        ("textarena/TicTacToe-v0", set()),  # a game: no reference answer, the generic probes only
    ],
)
def test_catalog_envs_name_their_probes(env_id: str, own: set[str]) -> None:
    env = envsuite.make_env(env_id, seed=0, renderer=RendererConfig(model_name=TEST_MODEL))
    probes = asyncio.run(probes_of(env))
    assert probes is not None
    assert {p.name for p in probes} == own | {p.name for p in GENERIC_PROBES}
    full = [p for p in probes if p.expect is ProbeExpectation.FULL_MARKS]
    assert len(full) == ("reference" in own)


def test_a_tool_reference_acts_through_calls_in_the_renderers_format() -> None:
    env = envsuite.make_env("tools/kv_store", seed=0, renderer=RendererConfig(model_name=TEST_MODEL))
    asyncio.run(env.initial_observation())
    reference = next(p for p in env.reward_probes() if p.name == "reference")
    assert "<tool_call>" in reference.reply and '"name": "done"' in reference.reply


def test_envsuite_check_shows_the_suite_and_sums_it_over_several_envs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from envsuite.cli import main

    assert main(["check", "arithmetic", "math_easy", "--quick", "--model", TEST_MODEL]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "[PASSED ] reward hacking: 7 probes (1 reference, 6 attacks), 0 attacks succeeded" in out
    assert "reward hacking: 14 probes over 2 envs (12 attacks), 0 attacks succeeded" in out
