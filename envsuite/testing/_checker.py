"""The conformance checker: does a catalog env keep the contracts of ``envsuite.core``?

Each check is a small async function returning a :class:`CheckResult`; an exception inside a check is
itself a failure (with the error in the detail), so one broken behaviour never hides the others.
"""

from __future__ import annotations

import asyncio
import enum
import pickle
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import tinker

from envsuite.adapters.cookbook import COOKBOOK_TAG
from envsuite.catalog._make import (
    CatalogDatasetBuilder,
    RendererConfig,
    make_dataset_builder,
    make_env,
    make_group_builder,
)
from envsuite.catalog.registration import EnvSpec, spec
from envsuite.core import Env, EnvGroupBuilder, StopReason, as_overflow
from envsuite.testing._episodes import (
    PLAUSIBLE_REPLIES,
    EpisodeRecord,
    garbage_actions,
    play_episode,
    stop_invariant_violations,
    text_actions,
    unreported_stop_reason,
)
from envsuite.testing._reward_probes import ProbeTally, run_reward_probes
from envsuite.testing._tool_checks import declared_tools, play_tool_case, tool_cases

VARIETY_SEEDS = 8
"""Seeds the variety check plays (``quick``: :data:`QUICK_VARIETY_SEEDS`)."""
QUICK_VARIETY_SEEDS = 3
ENV_ERROR_WARN_RATE = 0.25
"""Share of the checker's episodes ending in ``env_error`` from which it warns (all of them fail)."""
_STEP_FIELDS = ("reward", "episode_done", "next_observation", "next_stop_condition", "metrics", "logs")

SELF_PLAY_TAG = "selfplay"
"""Specs with this tag build groups whose members play different seats of the same games (self-play):
the group check asks them to replay exactly from one seed instead of playing identical episodes."""


class CheckOutcome(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    WARNED = "warned"
    """Suspicious but allowed; a failure under ``strict``."""
    SKIPPED = "skipped"


@dataclass(frozen=True)
class CheckResult:
    name: str
    outcome: CheckOutcome
    detail: str = ""
    fix: str = ""
    """How to make the check pass (shown with failures)."""
    probes: ProbeTally | None = None
    """What the reward-hacking check tried (None for every other check)."""


@dataclass
class ConformanceReport:
    """The outcome of :func:`check_env` for one env."""

    env_id: str
    strict: bool
    results: list[CheckResult] = field(default_factory=list)

    @property
    def failures(self) -> list[CheckResult]:
        bad = {CheckOutcome.FAILED} | ({CheckOutcome.WARNED} if self.strict else set())
        return [r for r in self.results if r.outcome in bad]

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def probe_tally(self) -> ProbeTally | None:
        """What the reward-hacking suite tried on this env (None when it did not run)."""
        return next((r.probes for r in self.results if r.probes is not None), None)

    def render(self) -> str:
        """A plain-text report: one line per check, with details and fixes for the ones that failed."""
        lines = [f"conformance of {self.env_id}{' (strict)' if self.strict else ''}:"]
        for r in self.results:
            lines.append(f"  [{r.outcome.value.upper():7s}] {r.name}" + (f": {r.detail}" if r.detail else ""))
            if r.outcome in (CheckOutcome.FAILED, CheckOutcome.WARNED) and r.fix:
                lines.append(f"             fix: {r.fix}")
        verdict = "PASS" if self.passed else f"FAIL ({len(self.failures)} problem(s))"
        lines.append(f"  => {verdict}")
        return "\n".join(lines)


@dataclass(frozen=True)
class _Setup:
    env_spec: EnvSpec
    renderer: RendererConfig
    env_kwargs: dict[str, object]
    seeds: tuple[int, ...]
    max_steps: int
    variety_seeds: int = VARIETY_SEEDS

    # The make_* calls below name every option of their own, so that only env kwargs travel in **.

    def env(self, seed: int, *, max_context_tokens: int | None = None) -> Env:
        return make_env(
            self.env_spec.id,
            seed=seed,
            split="train",
            model=None,
            renderer=self.renderer,
            max_context_tokens=max_context_tokens,
            **self.env_kwargs,
        )

    def group(self, group_size: int) -> EnvGroupBuilder:
        return make_group_builder(
            self.env_spec.id,
            group_size=group_size,
            seed=self.seeds[0],
            split="train",
            model=None,
            renderer=self.renderer,
            max_context_tokens=None,  # the spec's context (its context_tokens), else the default
            **self.env_kwargs,
        )

    def dataset(self) -> CatalogDatasetBuilder:
        """Two train batches of two groups of two, and two test groups."""
        return make_dataset_builder(
            self.env_spec.id,
            batch_size=2,
            group_size=2,
            seed=0,
            n_batches=2,
            n_test_groups=2,
            model=None,
            renderer=self.renderer,
            max_context_tokens=None,  # the spec's context (its context_tokens), else the default
            **self.env_kwargs,
        )


Check = Callable[[_Setup, str], Awaitable[CheckResult]]


def _passed(name: str, detail: str = "") -> CheckResult:
    return CheckResult(name, CheckOutcome.PASSED, detail)


def _failed(name: str, detail: str, fix: str) -> CheckResult:
    return CheckResult(name, CheckOutcome.FAILED, detail, fix)


async def _check_contract_types(s: _Setup, name: str) -> CheckResult:
    env = s.env(s.seeds[0])
    start = await env.initial_observation()
    if as_overflow(start) is not None:
        return _failed(name, "default prompt overflows", "raise max_context_tokens or shorten the prompt")
    if not (isinstance(start, tuple) and len(start) == 2 and isinstance(start[0], tinker.ModelInput)):
        return _failed(
            name, f"initial_observation returned {type(start).__name__}", "return (ModelInput, stop)"
        )
    stop = start[1]
    if (
        not isinstance(stop, list)
        or len({type(x) for x in stop}) > 1
        or not all(isinstance(x, str | int) for x in stop)
    ):
        return _failed(name, f"stop condition {stop!r}", "return a list of str or a list of int token ids")
    result = await env.step(text_actions(s.renderer.build(), PLAUSIBLE_REPLIES)(0))
    # envsuite's StepResult or tinker-cookbook's: the same fields (theirs without stop_reason).
    missing = [f for f in _STEP_FIELDS if not hasattr(result, f)]
    if missing or not isinstance(result.next_observation, tinker.ModelInput):
        detail = f"step returned {type(result).__name__} (missing {missing or 'a ModelInput observation'})"
        return _failed(name, detail, "return envsuite.StepResult")
    if not isinstance(result.reward, int | float) or not isinstance(result.metrics, dict):
        return _failed(name, "reward must be a number and metrics a dict", "see envsuite.core.StepResult")
    return _passed(name)


async def _check_determinism(s: _Setup, name: str) -> CheckResult:
    actions = text_actions(s.renderer.build(), PLAUSIBLE_REPLIES)
    for seed in s.seeds:
        first = await play_episode(s.env(seed), actions, s.max_steps)
        second = await play_episode(s.env(seed), actions, s.max_steps)
        if first.signature() != second.signature():
            return _failed(
                name,
                f"seed {seed}: two runs with the same actions differ",
                "derive all randomness from ctx.seed with an env-owned RNG (never global random)",
            )
    return _passed(name, f"seeds {list(s.seeds)}")


async def _check_seed_variety(s: _Setup, name: str) -> CheckResult:
    # Hidden state (a secret word) may leave the prompt unchanged, so compare whole played episodes,
    # whose final logs reveal it.
    actions = text_actions(s.renderer.build(), PLAUSIBLE_REPLIES)
    n = s.variety_seeds
    episodes = {(await play_episode(s.env(seed), actions, s.max_steps)).signature() for seed in range(n)}
    if len(episodes) < 2:
        return CheckResult(
            name, CheckOutcome.WARNED, f"{n} seeds played one episode", "let the seed pick the episode"
        )
    return _passed(name, f"{len(episodes)} distinct episodes from {n} seeds")


async def _play_group(s: _Setup) -> tuple[EnvGroupBuilder, list[EpisodeRecord]] | CheckResult:
    builder = s.group(3)
    envs = await builder.make_envs()
    if len(envs) != 3:
        return _failed(
            "group shares one episode",
            f"group_size=3 made {len(envs)} envs",
            "make_envs must return group_size envs",
        )
    actions = text_actions(s.renderer.build(), PLAUSIBLE_REPLIES)
    # Members are played concurrently, as rollout drivers do: self-play seats wait for each other.
    records = await asyncio.gather(*(play_episode(env, actions, s.max_steps) for env in envs))
    return builder, list(records)


async def _check_group_shares_episode(s: _Setup, name: str) -> CheckResult:
    played = await _play_group(s)
    if isinstance(played, CheckResult):
        return played
    builder, records = played
    if SELF_PLAY_TAG in s.env_spec.tags:
        # Self-play members play different seats of one seed's games: they differ by design, so the
        # group must instead replay exactly from the same seed.
        again = await _play_group(s)
        if isinstance(again, CheckResult) or sorted(map(repr, (r.signature() for r in again[1]))) != sorted(
            map(repr, (r.signature() for r in records))
        ):
            return _failed(name, "a self-play group played differently from the same seed", "seed every game")
        detail = "self-play: the seats of one seed's games replay exactly"
    elif len({r.signature() for r in records}) != 1:
        return _failed(
            name, "members of one group played different episodes", "build every member from the same seed"
        )
    else:
        detail = ""
    await builder.cleanup()
    await builder.cleanup()  # idempotent
    return _passed(name, detail)


async def _first_prompt(s: _Setup, builder: EnvGroupBuilder) -> object:
    """Member 0's first observation; in a self-play group, that of the seat whose turn comes first (a
    seat that does not open the game waits for the others' moves, which nobody plays here)."""
    envs = await builder.make_envs()
    if SELF_PLAY_TAG not in s.env_spec.tags:
        return await envs[0].initial_observation()
    waits = [asyncio.ensure_future(env.initial_observation()) for env in envs]
    try:
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        return min(done, key=waits.index).result()
    finally:
        for wait in waits:
            wait.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
        await builder.cleanup()


async def _check_pickle(s: _Setup, name: str) -> CheckResult:
    builder = s.group(2)
    dataset_builder = s.dataset()
    clone = pickle.loads(pickle.dumps(builder))
    pickle.loads(pickle.dumps(dataset_builder))
    if _tokens(await _first_prompt(s, builder)) != _tokens(await _first_prompt(s, clone)):
        return _failed(name, "an unpickled builder makes a different episode", "keep builders plain data")
    train, test = await dataset_builder()
    batch = train.get_batch(0)
    if len(batch) != 2 or test is None:
        return _failed(
            name, "dataset builder gave a wrong batch", "get_batch must return batch_size builders"
        )
    pickle.loads(pickle.dumps(batch[0]))
    return _passed(name, "group builder, dataset builder and its groups")


async def _check_garbage(s: _Setup, name: str) -> CheckResult:
    renderer = s.renderer.build()
    problems: list[str] = []
    raised: list[str] = []
    for kind, actions in garbage_actions(renderer, s.seeds[0]).items():
        record = await play_episode(s.env(s.seeds[0]), actions, s.max_steps)
        if record.error is not None:
            raised.append(f"{kind}: raised {record.error}")
            continue
        problems += _episode_problems(s, kind, record)
    fix = "parse defensively: return a parse-error stop, never raise"
    if problems or (raised and COOKBOOK_TAG not in s.env_spec.tags):
        return _failed(name, "; ".join([*raised, *problems][:4]), fix)
    if raised:
        # tinker-cookbook's contract lets step raise; envsuite's rollouts record it as env_error.
        detail = "; ".join(raised[:4]) + " (env_error in a rollout; tinker-cookbook's contract allows it)"
        return CheckResult(name, CheckOutcome.WARNED, detail, fix)
    return _passed(name, "random, empty, 10k tokens, invalid UTF-8, out-of-vocab ids, lone-surrogate text")


def _episode_problems(s: _Setup, kind: str, record: EpisodeRecord) -> list[str]:
    problems = [f"{kind}: {p}" for p in stop_invariant_violations(record)]
    if not record.done:
        problems.append(f"{kind}: episode not over after {s.max_steps} steps")
    low, high = s.env_spec.reward_range
    if not low - 1e-9 <= record.total_reward <= high + 1e-9:
        problems.append(
            f"{kind}: return {record.total_reward} outside reward_range {s.env_spec.reward_range}"
        )
    return problems


async def _check_plausible_episode(s: _Setup, name: str) -> CheckResult:
    record = await play_episode(
        s.env(s.seeds[-1]), text_actions(s.renderer.build(), PLAUSIBLE_REPLIES), s.max_steps
    )
    problems = _episode_problems(s, "plausible replies", record)
    if record.error is not None:
        problems.append(f"step raised {record.error}")
    if problems:
        return _failed(name, "; ".join(problems), "end episodes with StepResult.final(...)")
    if unreported_stop_reason(record):
        return CheckResult(
            name,
            CheckOutcome.WARNED,
            f"{len(record.steps)} step(s), no stop/<reason> metric (allowed for tinker-cookbook envs)",
            "record why the episode ended: metrics['stop/<reason>'] = 1.0 on the final step",
        )
    return _passed(name, f"{len(record.steps)} step(s), stop/{record.stop_reason}")


async def _check_env_errors(s: _Setup, name: str) -> CheckResult:
    """Episodes the rollout driver would end with ``env_error`` (the env raised or reported it)."""
    actions = text_actions(s.renderer.build(), PLAUSIBLE_REPLIES)
    records = [await play_episode(s.env(seed), actions, s.max_steps) for seed in s.seeds]
    errors = [r for r in records if r.stop_reason == StopReason.ENV_ERROR]
    rate = len(errors) / len(records)
    detail = f"{len(errors)} of {len(records)} episodes ended in env_error"
    if errors:
        first = errors[0].error or errors[0].steps[-1].logs.get("error", "")
        detail += f" (first: {str(first)[:160]})"
    fix = "the env fails on ordinary replies: run one episode by hand (envsuite play) and read the error"
    if errors and len(errors) == len(records):
        return _failed(name, detail, fix)
    if rate >= ENV_ERROR_WARN_RATE:
        return CheckResult(name, CheckOutcome.WARNED, detail, fix)
    return _passed(name, detail)


async def _check_tool_calls(s: _Setup, name: str) -> CheckResult:
    """Well-formed and broken calls to the env's declared tools (``envsuite.testing._tool_checks``)."""
    probe = s.env(s.seeds[0])
    if as_overflow(await probe.initial_observation()) is not None:
        return CheckResult(name, CheckOutcome.SKIPPED, "the default prompt overflows")
    specs = declared_tools(probe)
    if not specs:
        return CheckResult(name, CheckOutcome.SKIPPED, "the env declares no tools")
    renderer = s.renderer.build()
    cases = tool_cases(specs)
    problems = [p for case in cases if (p := await play_tool_case(lambda: s.env(s.seeds[0]), renderer, case))]
    if problems:
        fix = "answer every call with a tool message (envsuite.tools.run_tool_call never raises)"
        return _failed(name, "; ".join(problems[:3]), fix)
    return _passed(name, f"{len(specs)} tool(s); {len(cases)} calls, broken ones answered with errors")


async def _check_overflow(s: _Setup, name: str) -> CheckResult:
    env = s.env(s.seeds[0], max_context_tokens=4)
    start = await env.initial_observation()
    if as_overflow(start) is None:
        return _failed(
            name, "a 4-token budget did not overflow", "return InitialObservationOverflow when too long"
        )
    return _passed(name)


async def _check_reward_hacking(s: _Setup, name: str) -> CheckResult:
    """The reward-hacking suite (``envsuite.testing._reward_probes``) on the checker's seeds."""
    tally = await run_reward_probes(
        s.env, s.renderer.build(), seeds=s.seeds, reward_range=s.env_spec.reward_range, max_steps=s.max_steps
    )
    if tally is None:
        return CheckResult(name, CheckOutcome.SKIPPED, "the default prompt overflows")
    counts = f"{tally.probes} probes ({tally.references} reference, {tally.attacks} attacks)"
    if tally.failures:
        fix = (
            "grade the answer, not the format: a junk or empty reply must earn less than the reference, "
            "and the reference full marks; an env whose scorer ties them must not be offered (unavailable)"
        )
        return CheckResult(name, CheckOutcome.FAILED, tally.describe_failures(), fix, probes=tally)
    held = f"{tally.attacks_succeeded} attacks succeeded" + (
        "" if tally.references else "; no reference answer"
    )
    return CheckResult(name, CheckOutcome.PASSED, f"{counts}, {held}", probes=tally)


CHECKS: tuple[tuple[str, Check], ...] = (
    ("contract types", _check_contract_types),
    ("seeded determinism", _check_determinism),
    ("seeds vary episodes", _check_seed_variety),
    ("group shares one episode", _check_group_shares_episode),
    ("builders pickle", _check_pickle),
    ("garbage actions", _check_garbage),
    ("final transition has a stop reason", _check_plausible_episode),
    ("episodes end without env errors", _check_env_errors),
    ("tool calls are answered", _check_tool_calls),
    ("prompt overflow sentinel", _check_overflow),
    ("reward hacking", _check_reward_hacking),
)
"""Every check, by the name it reports under."""


def _tokens(start: object) -> list[int] | None:
    if isinstance(start, tuple):
        return list(start[0].to_ints())
    return None


async def check_env_async(
    env_id: str,
    *,
    model: str = "tiny-random",
    seeds: tuple[int, ...] = (0, 1),
    strict: bool = False,
    quick: bool = False,
    **env_kwargs: object,
) -> ConformanceReport:
    """Async form of :func:`check_env`."""
    report = ConformanceReport(env_id=env_id, strict=strict)
    try:
        env_spec = spec(env_id)
        env_spec.resolve_kwargs(env_kwargs)
    except Exception as exc:
        report.results.append(_failed("spec", str(exc), "register the env and pass only accepted kwargs"))
        return report
    if env_spec.unavailable:
        report.results.append(
            CheckResult("spec", CheckOutcome.SKIPPED, f"unavailable: {env_spec.unavailable}")
        )
        return report
    report.results.append(_passed("spec", f"{env_spec.id} -> {env_spec.entry_point}"))
    setup = _Setup(
        env_spec=env_spec,
        renderer=RendererConfig(model_name=model),
        env_kwargs=dict(env_kwargs),
        seeds=seeds[:1] if quick else seeds,
        max_steps=2 * (env_spec.max_turns or 1) + 5,
        variety_seeds=QUICK_VARIETY_SEEDS if quick else VARIETY_SEEDS,
    )
    for name, check in CHECKS:
        try:
            result = await check(setup, name)
        except Exception as exc:
            tail = traceback.format_exception_only(exc)[-1].strip()
            result = _failed(name, f"raised {tail}", "the env must not raise here; see the error")
        report.results.append(result)
    return report


def check_env(
    env_id: str,
    *,
    model: str = "tiny-random",
    seeds: tuple[int, ...] = (0, 1),
    strict: bool = False,
    quick: bool = False,
    **env_kwargs: object,
) -> ConformanceReport:
    """Run every conformance check on catalog env ``env_id`` and return the report.

    Checks: contract types; seeded determinism (same seed and actions give the same observations and
    rewards); seeds vary episodes (a warning unless ``strict``); every member of a group plays the same
    episode; builders pickle; garbage actions (random ids, empty, 10k tokens, invalid UTF-8,
    out-of-vocab ids, text with lone surrogates) end in a defined outcome within the turn budget, never
    an exception; the final transition carries exactly one stop reason; returns stay inside the spec's
    ``reward_range``; episodes do not end in ``env_error`` (all of them: a failure; a quarter or more: a
    warning); calls to the tools an env declares, well-formed and broken (unreadable, unknown tool, wrong
    argument type, unexpected argument), are answered by tool messages and extend the observation (skipped
    for envs without tools); an over-long prompt gives the overflow sentinel; the reward-hacking suite
    (``envsuite.testing._reward_probes``): the env's reference answer earns full marks, its junk and the
    generic empty and format-only replies less, attacks on its grader nothing (the report's
    :attr:`~ConformanceReport.probe_tally` says what was tried). ``model`` picks the
    tokenizer (the tiny test model shares SmolLM2's). ``quick`` runs every check on fewer episodes (the first of
    ``seeds``, and 3 seeds instead of 8 for variety): for catalogs of many envs of one class, where episodes
    are costly to make.
    """
    return asyncio.run(
        check_env_async(env_id, model=model, seeds=seeds, strict=strict, quick=quick, **env_kwargs)
    )
