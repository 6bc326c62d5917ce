"""Which reasoning-gym datasets reward a junk answer as much as the reference one (the tie rule).

The reward-hacking suite (``envsuite.testing``) refuses an env whose junk answer earns what its
reference answer earns; such reasoning-gym datasets are listed unavailable, with the reason, in
``TIED_DATASETS`` (``envsuite.adapters.reasoning_gym``). This module measures them: for each
dataset and several seeds, the env (made through the catalog, listed-unavailable ones included) is
stepped with the reference answer and with junk answers, each in an ``<answer>`` block. A dataset
ties when, on some seed, a junk answer that is not the reference (compared as text without case, or as
numbers) earns at least what the reference earns. Items without a reference answer (``answer`` is
None: any valid colouring or move sequence is right) cannot tie; the checker tries junk on them
against full marks instead.

Rerun after upgrading reasoning-gym (about 10 s for every dataset here)::

    python -m envsuite.adapters.reasoning_gym._ties [--seeds 5] [NAME ...]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time
from dataclasses import dataclass, field

from envsuite.adapters.reasoning_gym import env_id, load_table, register_reasoning_gym
from envsuite.adapters.reasoning_gym._env import ReasoningGymEnv
from envsuite.catalog._make import RendererConfig, make_env
from envsuite.catalog.registration import spec
from envsuite.core import ActionExtra, as_overflow
from envsuite.renderers import reply_to_tokens

JUNK = ("zzz", "", "0", "1", "yes", "no", "none", "True", "False")
"""Junk answers: the checker's (``zzz``, the empty block, ``0`` or ``1``) and common short guesses."""
MODEL = "tiny-random"


@dataclass
class TieReport:
    """What the reference and the junk answers of one dataset earned."""

    name: str
    references: list[float] = field(default_factory=list)
    """The reference answer's reward on each seed whose item has one."""
    tied: bool = False
    """A junk answer other than the reference earned at least what the reference earned, on some seed."""
    as_high: list[str] = field(default_factory=list)
    """Each junk answer that earned at least the reference: ``"seed 0 'zzz'=1"`` (``(the reference)``
    after one that is the reference itself)."""

    def line(self) -> str:
        low, high = min(self.references, default=float("nan")), max(self.references, default=float("nan"))
        head = f"{self.name}: {'TIED ' if self.tied else ''}reference {low:g}..{high:g}"
        return head + (f"; junk at least as high: {', '.join(self.as_high[:6])}" if self.as_high else "")


async def _reward(name: str, seed: int, answer: str | None) -> tuple[float, str] | None:
    """What ``<answer>answer</answer>`` earns (the reference when None), and the reference; None when
    the prompt overflows or the item has no reference answer."""
    env_spec = dataclasses.replace(spec(env_id(name)), unavailable=None)
    env = make_env(env_spec, seed=seed, renderer=RendererConfig(model_name=MODEL))
    assert isinstance(env, ReasoningGymEnv)
    if as_overflow(await env.initial_observation()) is not None or env.entry.get("answer") is None:
        return None
    reference = env.problem.answer
    tokens = reply_to_tokens(env.renderer, env.answer_reply(reference if answer is None else answer))
    return (await env.step(tokens, extra=ActionExtra(stop_reason="stop"))).reward, reference


def same_answer(junk: str, reference: str) -> bool:
    """Whether ``junk`` says what ``reference`` says (as text without case or spaces, or as numbers)."""
    if junk.strip().casefold() == reference.strip().casefold():
        return True
    try:
        return float(junk) == float(reference)
    except ValueError:
        return False


async def measure(name: str, seeds: int) -> TieReport:
    """The reference and junk answers of dataset ``name`` on seeds ``0..seeds-1``."""
    report = TieReport(name)
    for seed in range(seeds):
        scored = await _reward(name, seed, None)
        if scored is None:
            continue
        reference, answer = scored
        report.references.append(reference)
        for junk in JUNK:
            reward, _ = await _reward(name, seed, junk) or (float("-inf"), "")
            if reward >= reference:
                right = same_answer(junk, answer)
                report.tied |= not right
                report.as_high.append(
                    f"seed {seed} {junk!r}={reward:g}" + (" (the reference)" if right else "")
                )
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("names", nargs="*", help="datasets (default: every one)")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    register_reasoning_gym()
    names = args.names or load_table().names()
    tied: list[str] = []
    for name in names:
        start = time.perf_counter()
        try:
            report = asyncio.run(measure(name, args.seeds))
        except Exception as exc:
            print(f"{name}: failed: {exc!r}"[:300], flush=True)
            continue
        tied += [name] if report.tied else []
        print(f"{report.line()} ({time.perf_counter() - start:.1f} s)", flush=True)
    print(f"{len(tied)} of {len(names)} datasets tie: {tied}")


if __name__ == "__main__":
    main()
