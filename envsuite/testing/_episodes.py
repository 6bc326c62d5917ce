"""Playing scripted episodes for the conformance checker, and the garbage actions it throws at envs."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from envsuite.core import STOP_METRIC_PREFIX, ActionExtra, Env, StepResult, StopReason, as_overflow
from envsuite.renderers import reply_to_tokens
from envsuite.renderers.base import Renderer
from envsuite.rollouts import step_stop_reason

# Replies that make sense for some env in the catalog; every env must take all of them.
PLAUSIBLE_REPLIES = (
    "The answer is \\boxed{42}.",
    "7",
    "Is it an animal?",
    "Guess: dog",
    "[4]",
    "e4",
    "I am not sure.",
)

ActionSource = Callable[[int], list[int]]
"""Given the turn index, the action tokens to send."""


@dataclass
class EpisodeRecord:
    """Everything observable about one episode, for comparing two runs and checking invariants.

    ``steps`` holds what ``step`` returned: envsuite's :class:`StepResult` or tinker-cookbook's (the
    same fields, without ``stop_reason``).
    """

    initial_tokens: list[int] | None
    """None when the env returned the overflow sentinel."""
    steps: list[StepResult] = field(default_factory=list)
    observations_T: list[list[int]] = field(default_factory=list)
    error: str | None = None
    """The exception ``step`` raised, if it did (the rollout driver records that as ``env_error``)."""

    @property
    def done(self) -> bool:
        return self.error is not None or (bool(self.steps) and self.steps[-1].episode_done)

    @property
    def stop_reason(self) -> str | None:
        """Why the episode ended, as the rollout driver would record it."""
        if self.error is not None:
            return StopReason.ENV_ERROR.value
        return step_stop_reason(self.steps[-1]) if self.done and self.steps else None

    @property
    def total_reward(self) -> float:
        return sum(step.reward for step in self.steps)

    def signature(self) -> tuple[object, ...]:
        """What two runs of the same seeded episode must agree on."""
        return (
            tuple(self.initial_tokens) if self.initial_tokens is not None else None,
            tuple(tuple(obs) for obs in self.observations_T),
            tuple(
                (s.reward, s.episode_done, step_stop_reason(s), tuple(sorted(s.logs.items())))
                for s in self.steps
            ),
            self.error,
        )


async def play_episode(env: Env, actions: ActionSource, max_steps: int) -> EpisodeRecord:
    """Run ``env`` with scripted actions until it is done or ``max_steps`` steps were taken.

    An exception from ``step`` ends the episode and is kept in :attr:`EpisodeRecord.error`.
    """
    start = await env.initial_observation()
    if as_overflow(start) is not None:
        return EpisodeRecord(initial_tokens=None)
    ob, _stop = start  # type: ignore[misc]  # not an overflow, so the (observation, stop) pair
    record = EpisodeRecord(initial_tokens=ob.to_ints())
    for turn in range(max_steps):
        action = actions(turn)
        try:
            result = await env.step(action, extra=ActionExtra(stop_reason="stop"))
        except Exception as exc:
            record.error = repr(exc)[:300]
            break
        record.steps.append(result)
        record.observations_T.append(result.next_observation.to_ints())
        if result.episode_done:
            break
    return record


def stop_invariant_violations(record: EpisodeRecord) -> list[str]:
    """Broken stop-reason rules: only the final step has a reason, and at most one ``stop/`` metric.

    envsuite's own results (which have a ``stop_reason`` field) must also name a :class:`StopReason`
    that matches their one metric; tinker-cookbook's results may leave the reason out (their contract
    allows it, see :func:`unreported_stop_reason`).
    """
    problems: list[str] = []
    for i, step in enumerate(record.steps):
        stop_keys = [k for k in step.metrics if k.startswith(STOP_METRIC_PREFIX)]
        field_reason = getattr(step, "stop_reason", None)
        if not step.episode_done:
            if field_reason is not None or stop_keys:
                problems.append(f"non-final step {i} carries a stop reason ({field_reason!r}, {stop_keys})")
        elif len(stop_keys) > 1:
            problems.append(f"final step {i} carries {len(stop_keys)} stop reasons: {stop_keys}")
        elif hasattr(step, "stop_reason"):
            if not isinstance(field_reason, StopReason):
                problems.append(f"final step {i} has no StopReason (got {field_reason!r})")
            elif stop_keys != [STOP_METRIC_PREFIX + field_reason.value]:
                problems.append(
                    f"final step {i} must carry exactly stop/{field_reason.value}, has {stop_keys}"
                )
    return problems


def unreported_stop_reason(record: EpisodeRecord) -> bool:
    """True when the episode ended without saying why (no ``stop/<reason>`` metric; cookbook envs may)."""
    return record.done and record.error is None and record.stop_reason is None


def text_actions(renderer: Renderer, replies: Sequence[str]) -> ActionSource:
    """Cycle through text replies, each as a cleanly stopped turn."""
    encoded = [reply_to_tokens(renderer, reply) for reply in replies]
    return lambda turn: list(encoded[turn % len(encoded)])


@functools.lru_cache(maxsize=8)
def _invalid_utf8_ids(renderer: Renderer) -> tuple[int, ...]:
    """Token ids that decode, alone, to invalid UTF-8 (lone byte tokens of multi-byte characters)."""
    found: list[int] = []
    vocab = renderer.vocab_size
    for token_id in range(min(vocab, 5000)):
        if "\ufffd" in renderer.tokenizer.decode([token_id]):
            found.append(token_id)
            if len(found) >= 8:
                break
    return tuple(found)


def garbage_actions(renderer: Renderer, seed: int) -> dict[str, ActionSource]:
    """Named families of malformed actions every env must survive."""
    vocab = renderer.vocab_size
    rng = random.Random(seed)
    random_ids = [rng.randrange(vocab) for _ in range(48)]
    huge = [rng.randrange(vocab) for _ in range(10_000)]
    bad_utf8 = list(_invalid_utf8_ids(renderer)) or [0xFFFF % vocab]
    # A str no UTF-8 text can hold (gym text mode and `envsuite play` accept any str).
    lone_surrogate = reply_to_tokens(renderer, "hello \ud800 world \udfff")
    return {
        "random_tokens": lambda turn: random_ids[turn % 8 : turn % 8 + 40],
        "empty": lambda turn: [],
        "ten_thousand_tokens": lambda turn: huge,
        "invalid_utf8": lambda turn: bad_utf8,
        "out_of_vocab_ids": lambda turn: [vocab + 7, vocab * 3],
        "lone_surrogate_text": lambda turn: lone_surrogate,
    }
