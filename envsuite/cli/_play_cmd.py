"""``envsuite play``: one episode in the terminal, showing each message, reward and the final outcome.

The view is the conversation as a person reads it (role, then text), not the chat template's raw tokens;
``--raw`` shows the decoded tokens instead. Everything shown passes through
:func:`envsuite.display.printable`, so model output cannot drive the terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from enum import IntEnum

from rich.console import Console

from envsuite import RendererConfig, make_env
from envsuite.cli._args import Subparsers, parse_env_args
from envsuite.cli._policies import InputClosed, LegalMoves, build_policy
from envsuite.cli._rubric_args import add_rubric_args, score_reply
from envsuite.cli._sampler_args import add_sampler_args, sampler_url
from envsuite.core import (
    ActionExtra,
    Env,
    InitialObservationOverflow,
    Message,
    TokensWithLogprobs,
    stop_reason_from_metrics,
)
from envsuite.display import printable
from envsuite.errors import UsageError
from envsuite.registration import spec
from envsuite.renderers.base import Renderer
from envsuite.rollouts import next_action


def add_parser(sub: Subparsers) -> None:
    """Add ``envsuite play`` to the command's sub-parsers."""
    p = sub.add_parser("play", help="play one episode in the terminal")
    p.add_argument("env_id")
    p.add_argument(
        "--policy",
        default="random",
        help="random (random legal moves in games, random tokens elsewhere) | human | a model name or "
        "checkpoint dir (e.g. smollm2-135m-instruct)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--model", default=None, help="tokenizer/renderer model for random and human policies")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env keyword argument")
    p.add_argument("--raw", action="store_true", help="show the decoded tokens (chat template and all)")
    p.add_argument("--backend", default="local", help="local (PyTorch here) or tinker (the Tinker API)")
    p.add_argument("--base-url", default=None, help="tinker backend: service URL, e.g. an `envsuite serve`")
    add_sampler_args(p)
    p.add_argument(
        "--constrain-actions",
        action="store_true",
        help="sample each action under the env's action constraint (legal moves, well-formed tool calls; "
        "local backend)",
    )
    add_rubric_args(p)


def _legal_moves(env: Env) -> LegalMoves | None:
    from envsuite.games.multiagent import SeatEnv

    return env.legal_moves if isinstance(env, SeatEnv) else None


class _View:
    """Prints what is new since the last call: messages (default) or decoded tokens (``--raw``)."""

    def __init__(self, console: Console, env: Env, renderer: Renderer, raw: bool) -> None:
        self.console, self.env, self.renderer, self.raw = console, env, renderer, raw
        self._shown_messages = 0
        self._shown_tokens: list[int] = []

    def show_new(self, tokens: list[int], title: str) -> None:
        messages = self.env.conversation()
        if self.raw or not messages:
            self._show_tokens(tokens, title)
            return
        for message in messages[self._shown_messages :]:
            self._show_message(message)
        self._shown_messages = len(messages)

    def _show_message(self, message: Message) -> None:
        self.console.rule(printable(message["role"]))
        self.console.print(printable(message["content"]), markup=False, highlight=False)

    def _show_tokens(self, tokens: list[int], title: str) -> None:
        seen = self._shown_tokens
        # Show only what is new when the observation extends the last one (the usual multi-turn case).
        new = tokens[len(seen) :] if tokens[: len(seen)] == seen else tokens
        self.console.rule(title)
        text = self.renderer.tokenizer.decode(new, skip_special_tokens=not self.raw)
        self.console.print(printable(str(text)), markup=False, highlight=False)
        self._shown_tokens = list(tokens)


async def _play(args: argparse.Namespace, console: Console) -> float:
    _stop_at_the_first_interrupt(asyncio.get_running_loop())
    env_spec = spec(args.env_id)
    if args.policy.startswith("tinker://") and not args.model:
        raise UsageError("--policy tinker://...: pass --model BASE too (its tokenizer and chat format)")
    model = args.model or (args.policy if args.policy not in ("random", "human") else None)
    renderer = RendererConfig(model_name=model) if model else RendererConfig()
    env = make_env(env_spec.id, seed=args.seed, renderer=renderer, **parse_env_args(args.env_arg))
    policy = build_policy(
        args.policy,
        renderer=renderer,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        seed=args.seed,
        legal_moves=_legal_moves(env),
        backend=args.backend,
        base_url=args.base_url,
    )
    start = await env.initial_observation()
    if isinstance(start, InitialObservationOverflow):
        console.print(
            f"the prompt does not fit: {start.logs.get('initial_observation_overflow', start.logs)}"
        )
        return 0.0
    view = _View(console, env, renderer.build(), args.raw)
    ob, stop = start
    total = 0.0
    for turn in range(1, 10_000):
        view.show_new(ob.to_ints(), f"observation (turn {turn})")
        asked = ob.to_ints()
        action: TokensWithLogprobs = await next_action(
            policy, env, ob, stop, constrain_actions=args.constrain_actions
        )
        result = await env.step(action.tokens, extra=ActionExtra(stop_reason=action.stop_reason))
        view.show_new(ob.to_ints() + list(action.tokens), "action")
        total += result.reward
        metrics = {k: round(float(v), 3) for k, v in result.metrics.items()}
        console.print(
            f"[bold]reward[/] {result.reward:+.3f}   metrics {printable(str(metrics))}", markup=True
        )
        ob, stop = result.next_observation, result.next_stop_condition
        if result.episode_done:
            view.show_new(ob.to_ints(), "final observation")
            reason = stop_reason_from_metrics(result.metrics) or "?"
            console.rule(f"episode over: stop/{reason}, return {total:+.3f}")
            if args.rubric:
                await _show_rubric(args, console, view.renderer, asked, list(action.tokens))
            break
    return total


async def _show_rubric(
    args: argparse.Namespace, console: Console, renderer: Renderer, prompt: list[int], reply: list[int]
) -> None:
    """``--rubric``: the final reply's rubric score, criterion by criterion."""
    text = renderer.parse_response(reply).message["content"]
    rubric, score = await score_reply(args, renderer.tokenizer.decode(prompt, skip_special_tokens=True), text)
    console.print(printable(f"rubric {rubric.identity()}: reward {score.reward:.3f}"))
    for c in score.criteria:
        verdict = f" verdict={c.verdict.value}" if c.verdict else ""
        console.print(printable(f"  {c.name}: {c.score:.3f}{verdict}{' (gated)' if c.gated else ''}"))


class PlayExit(IntEnum):
    """``envsuite play``'s exit codes (a bad id or setting is 2, as every command's usage error)."""

    FINISHED = 0
    """The episode ran to its end."""
    INPUT_CLOSED = 3
    """``--policy human``: the input ended (Ctrl-D, or the end of piped moves) before the episode did."""
    INTERRUPTED = 130
    """Ctrl-C (SIGINT): stopped at once, even while waiting for a person's reply."""


def _raise_interrupt() -> None:
    raise KeyboardInterrupt


def _stop_at_the_first_interrupt(loop: asyncio.AbstractEventLoop) -> None:
    """Make the first Ctrl-C raise ``KeyboardInterrupt`` out of the loop, whichever thread takes it.

    asyncio.run's own handler only cancels the main task at the first Ctrl-C, and a signal the kernel
    hands to another thread (torch's) wakes nobody while the loop waits for stdin. A loop signal handler
    sets the signal wakeup fd, so the waiting loop wakes and raises. Loops run outside the main thread
    cannot take signals; their caller keeps its own handling.
    """
    with contextlib.suppress(RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGINT, _raise_interrupt)


def run(args: argparse.Namespace) -> int:
    """Play one episode, showing each turn; exit codes are :class:`PlayExit`'s (``envsuite main`` turns
    the ``KeyboardInterrupt`` of Ctrl-C into one line and 130)."""
    try:
        with sampler_url(args, args.policy) as base_url:
            if base_url is not None:
                args.base_url = base_url
            asyncio.run(_play(args, Console()))
    except InputClosed as exc:
        print(f"envsuite play: {exc}: stopped unfinished", file=sys.stderr)
        return PlayExit.INPUT_CLOSED
    return PlayExit.FINISHED
