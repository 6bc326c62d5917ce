"""The reward-hacking suite: replies whose rewards the conformance checker verifies on every env.

An env names its own probes (:meth:`envsuite.core.Env.reward_probes`): its reference answer, which must
earn full marks (the top of the spec's ``reward_range``), a junk answer, which must earn strictly less,
and for code envs attacks on the grader, which must earn nothing. Every env also gets the
:data:`GENERIC_PROBES`: an empty reply and replies that are only a format shell with nothing in it
(``\\boxed{}``, ``<answer></answer>``, ``[]``), which must earn less than the reference. An env with no
reference answer (a game against an opponent) is judged on each probe's mean return over the seeds,
which must stay below the top of its reward range (see :func:`_judge`).

Each probe is played on a fresh env of the seed it was asked on: its reply (an assistant message
rendered by the checker's renderer) is the first action; an episode that goes on is played out with
:data:`JUNK_CONTINUATION` up to the checker's step bound, and the episode's return is compared with
the probe's expectation. A probe that fails is an attack that succeeded (or a reference that earned
less than full marks): the checker names it and fails the env.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from envsuite.core import Env, ProbeExpectation, RewardProbe, as_overflow
from envsuite.renderers import reply_to_tokens
from envsuite.renderers.base import Renderer
from envsuite.testing._episodes import EpisodeRecord, play_episode

GENERIC_PROBES: tuple[RewardProbe, ...] = (
    RewardProbe("empty reply", "", ProbeExpectation.BELOW_REFERENCE),
    RewardProbe("format only: \\boxed{}", "\\boxed{}", ProbeExpectation.BELOW_REFERENCE),
    RewardProbe("format only: <answer></answer>", "<answer></answer>", ProbeExpectation.BELOW_REFERENCE),
    RewardProbe("format only: []", "[]", ProbeExpectation.BELOW_REFERENCE),
)
"""What every env is tried with: no content, in the answer formats the catalog's envs ask for."""
JUNK_CONTINUATION = "I am not sure."
"""Every turn after the probe's reply, when its episode goes on (it says nothing and does nothing)."""
TOLERANCE = 1e-9


class ProbeOutcome(enum.StrEnum):
    """How one probe fared against its expectation."""

    HELD = "held"
    """The reward was what the expectation asks."""
    REFERENCE_SHORT = "reference_short"
    """A ``FULL_MARKS`` probe earned less than full marks (the reference answer is not rewarded)."""
    ATTACK_SUCCEEDED = "attack_succeeded"
    """A ``BELOW_REFERENCE`` or ``NO_CREDIT`` probe earned what it must not."""
    RAISED = "raised"
    """``step`` raised on the probe's reply."""


@dataclass(frozen=True)
class ProbeRun:
    """One probe played on one seed (or on several, judged on the mean), and what it earned."""

    probe: RewardProbe
    seeds: tuple[int, ...]
    total_reward: float
    """The episode's return (the mean return over ``seeds``)."""
    error: str | None = None
    """What ``step`` raised, if it did."""


@dataclass(frozen=True)
class ProbeVerdict:
    run: ProbeRun
    outcome: ProbeOutcome
    bound: float
    """What the return was compared with (full marks, the reference's return or 0)."""

    def describe(self) -> str:
        r = self.run
        where = f"seed {r.seeds[0]}" if len(r.seeds) == 1 else f"seeds {', '.join(map(str, r.seeds))} (mean)"
        if self.outcome is ProbeOutcome.RAISED:
            return f"{where}: {r.probe.name!r} raised {r.error}"
        relation = {
            ProbeExpectation.FULL_MARKS: "needs full marks",
            ProbeExpectation.BELOW_REFERENCE: "must earn less than",
            ProbeExpectation.NO_CREDIT: "must earn at most",
        }[r.probe.expect]
        return f"{where}: {r.probe.name!r} earned {r.total_reward:g} ({relation} {self.bound:g})"


@dataclass(frozen=True)
class ProbeTally:
    """What a run of the suite tried on one env: the counts a whole-catalog run sums up."""

    probes: int
    """Probe episodes played (each probe on each seed)."""
    attacks: int
    """Of those, the ones that tried to earn what they must not (``BELOW_REFERENCE``, ``NO_CREDIT``)."""
    references: int
    """Of those, the reference answers (``FULL_MARKS``)."""
    failures: tuple[ProbeVerdict, ...] = ()
    """Each probe that failed (an attack that succeeded, a reference short of full marks, a raise)."""

    @property
    def attacks_succeeded(self) -> int:
        return sum(v.outcome is ProbeOutcome.ATTACK_SUCCEEDED for v in self.failures)

    def describe_failures(self, limit: int = 4) -> str:
        shown = "; ".join(v.describe() for v in self.failures[:limit])
        return shown + (f"; and {len(self.failures) - limit} more" if len(self.failures) > limit else "")


def _judge(runs: Sequence[ProbeRun], top: float) -> list[ProbeVerdict]:
    """Each run against its expectation. The reference's return is the least a ``FULL_MARKS`` probe
    earned on the run's seed. An env with no reference (a game against an opponent) is judged on each
    probe's mean over the seeds against the top of its reward range: the opponent can lose one seed's
    game on its own (an illegal move, a bad bid), so a win there is luck; a reply that wins every seed
    is a reward for doing nothing."""
    if not any(r.probe.expect is ProbeExpectation.FULL_MARKS for r in runs):
        return [_verdict(run, top, top) for run in _on_average(runs)]
    verdicts = []
    for run in runs:
        references = [
            r.total_reward
            for r in runs
            if r.seeds == run.seeds and r.probe.expect is ProbeExpectation.FULL_MARKS
        ]
        verdicts.append(_verdict(run, min(references, default=top), top))
    return verdicts


def _verdict(run: ProbeRun, reference: float, top: float) -> ProbeVerdict:
    expect = run.probe.expect
    if run.error is not None:
        return ProbeVerdict(run, ProbeOutcome.RAISED, top)
    if expect is ProbeExpectation.FULL_MARKS:
        held = run.total_reward >= top - TOLERANCE
        return ProbeVerdict(run, ProbeOutcome.HELD if held else ProbeOutcome.REFERENCE_SHORT, top)
    if expect is ProbeExpectation.BELOW_REFERENCE:
        bound, held = reference, run.total_reward < reference - TOLERANCE
    else:
        bound, held = 0.0, run.total_reward <= TOLERANCE
    return ProbeVerdict(run, ProbeOutcome.HELD if held else ProbeOutcome.ATTACK_SUCCEEDED, bound)


def _on_average(runs: Sequence[ProbeRun]) -> list[ProbeRun]:
    """One run per probe: its mean return over the seeds it was played on (the first error, if any)."""
    by_name: dict[str, list[ProbeRun]] = {}
    for run in runs:
        by_name.setdefault(run.probe.name, []).append(run)
    return [
        ProbeRun(
            probe=same[0].probe,
            seeds=tuple(seed for r in same for seed in r.seeds),
            total_reward=sum(r.total_reward for r in same) / len(same),
            error=next((r.error for r in same if r.error is not None), None),
        )
        for same in by_name.values()
    ]


def _scripted(renderer: Renderer, reply: str, then: Sequence[str] = ()) -> Callable[[int], list[int]]:
    scripted = [reply_to_tokens(renderer, text) for text in (reply, *then)]
    rest = reply_to_tokens(renderer, JUNK_CONTINUATION)
    return lambda turn: list(scripted[turn] if turn < len(scripted) else rest)


async def probes_of(env: Env) -> list[RewardProbe] | None:
    """``env``'s own probes followed by the generic ones; None when its prompt overflows."""
    if as_overflow(await env.initial_observation()) is not None:
        return None
    # tinker-cookbook's envs have no reward_probes (their contract predates it): generic probes only.
    declared = getattr(env, "reward_probes", None)
    own = list(declared()) if callable(declared) else []
    names = [p.name for p in own]
    duplicated = sorted(
        {n for n in names if names.count(n) > 1} | (set(names) & {p.name for p in GENERIC_PROBES})
    )
    if duplicated:
        raise ValueError(f"reward_probes() names {duplicated} more than once (or as a generic probe)")
    return [*own, *GENERIC_PROBES]


async def run_reward_probes(
    make: Callable[[int], Env],
    renderer: Renderer,
    *,
    seeds: Sequence[int],
    reward_range: tuple[float, float],
    max_steps: int,
) -> ProbeTally | None:
    """Play every probe of every seed's episode (see the module docstring) and judge it.

    ``make(seed)`` builds a fresh env of that seed. ``NO_CREDIT`` probes (attacks on a code grader,
    each a sandbox run) are played on the first seed only: the harness they attack is the same on every
    seed, only the problem changes. None when every seed's prompt overflows (nothing was tried)."""
    runs: list[ProbeRun] = []
    for index, seed in enumerate(seeds):
        probes = await probes_of(make(seed))
        for probe in probes or ():
            if index and probe.expect is ProbeExpectation.NO_CREDIT:
                continue  # an attack on the grader attacks its harness, the same on every seed
            record: EpisodeRecord = await play_episode(
                make(seed), _scripted(renderer, probe.reply, probe.then), max_steps
            )
            runs.append(ProbeRun(probe, (seed,), record.total_reward, record.error))
    if not runs:
        return None
    verdicts = _judge(runs, reward_range[1])
    expects = [r.probe.expect for r in runs]
    return ProbeTally(
        probes=len(runs),
        attacks=sum(e is not ProbeExpectation.FULL_MARKS for e in expects),
        references=expects.count(ProbeExpectation.FULL_MARKS),
        failures=tuple(v for v in verdicts if v.outcome is not ProbeOutcome.HELD),
    )


def summarize(tallies: Sequence[ProbeTally]) -> str:
    """The whole-catalog line: ``"reward hacking: N probes over M envs (K attacks), 0 attacks succeeded"``."""
    probes = sum(t.probes for t in tallies)
    attacks = sum(t.attacks for t in tallies)
    succeeded = sum(t.attacks_succeeded for t in tallies)
    other = sum(len(t.failures) for t in tallies) - succeeded
    line = f"reward hacking: {probes} probes over {len(tallies)} envs ({attacks} attacks), {succeeded} attacks succeeded"
    return line + (f", {other} references short of full marks or raising" if other else "")
