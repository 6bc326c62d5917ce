"""Policies the CLI can play with: random legal moves (or tokens), a person at the keyboard, or a model."""

from __future__ import annotations

import asyncio
import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from envsuite import RendererConfig
from envsuite.core import Observation, StopCondition, TokenCompleter, TokensWithLogprobs
from envsuite.renderers import reply_to_tokens
from envsuite.renderers.base import Renderer

LegalMoves = Callable[[], list[str] | None]
"""The current seat's legal moves (None when the env does not know them)."""


class InputClosed(Exception):
    """The person's input ended (end of file: Ctrl-D, or the end of piped input) before the episode did."""


@dataclass
class HumanTokenCompleter(TokenCompleter):
    """Reads the reply from the terminal (or piped lines); the text becomes a cleanly stopped turn.
    Raises :class:`InputClosed` at the end of the input.

    stdin is read from its file descriptor once the event loop sees it readable, never by a blocking
    ``input()``: a worker thread blocked there cannot be stopped (asyncio.run waits for it after Ctrl-C
    until a line comes), and a main thread blocked there misses a SIGINT the kernel hands to another
    thread (torch's and the tokenizer's threads take signals too). The loop wakes for both (``play``
    installs its SIGINT handler on the loop).
    """

    renderer: Renderer
    _pending: bytearray = field(default_factory=bytearray, init=False, repr=False)
    """Read but not yet used: the lines after the current one (piped input comes in chunks)."""

    async def __call__(
        self, model_input: Observation, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        print("your reply> ", end="", flush=True)
        text = await self._read_line()
        return TokensWithLogprobs(tokens=reply_to_tokens(self.renderer, text, stop), maybe_logprobs=None)

    async def _read_line(self) -> str:
        line = await self._next_line()
        if line is None:
            print()  # end the prompt's line
            raise InputClosed("the input ended (end of file) before the episode did")
        return line.rstrip("\r\n")

    async def _next_line(self) -> str | None:
        """The next line with its end, or None at the end of the input."""
        stdin = sys.stdin
        if stdin is None:  # started with stdin closed
            return None
        try:
            fd = stdin.fileno()
        except (OSError, ValueError):  # an in-memory stream (a test's, a host program's): never blocks
            return stdin.readline() or None
        while b"\n" not in self._pending:
            chunk = await _read_when_ready(fd)
            if not chunk:
                break
            self._pending += chunk
        if not self._pending:
            return None
        line, _, rest = bytes(self._pending).partition(b"\n")
        self._pending = bytearray(rest)
        return line.decode(errors="replace")


async def _read_when_ready(fd: int) -> bytes:
    """``os.read(fd)`` once the running loop sees ``fd`` readable (b"" at the end of the input). A file
    the loop cannot watch (a regular file: epoll refuses it, and its reads never block) is read at once."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    try:
        loop.add_reader(fd, wake)
    except (OSError, ValueError, NotImplementedError):
        return os.read(fd, 65536)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
    return os.read(fd, 65536)


@dataclass
class RandomMoveCompleter(TokenCompleter):
    """Replies with a uniformly random legal move when the env knows them, else with random tokens.

    The move is written as the game states it (``[4]`` in tic-tac-toe, ``e2e4`` in chess) and sent as a
    cleanly stopped turn, so every move it makes is legal.
    """

    renderer: Renderer
    legal_moves: LegalMoves
    fallback: TokenCompleter
    seed: int = 0
    last_move: str | None = None
    """The move of the last reply (None when the reply was random tokens)."""
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    async def __call__(
        self, model_input: Observation, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        moves = self.legal_moves()
        if not moves:
            self.last_move = None
            return await self.fallback(model_input, stop, max_tokens=max_tokens)
        self.last_move = self._rng.choice(moves)
        return TokensWithLogprobs(
            tokens=reply_to_tokens(self.renderer, self.last_move, stop), maybe_logprobs=None
        )


def build_policy(
    name: str,
    *,
    renderer: RendererConfig,
    max_tokens: int,
    temperature: float,
    seed: int,
    legal_moves: LegalMoves | None = None,
    backend: str = "local",
    base_url: str | None = None,
) -> TokenCompleter:
    """``random`` (legal moves when ``legal_moves`` knows them, else random tokens), ``human``, or a model
    name / checkpoint sampled through ``backend`` (``tinker`` with ``base_url``: an ``envsuite serve``)."""
    if name == "human":
        return HumanTokenCompleter(renderer.build())
    from envsuite.completers import RandomTokenCompleter, SamplingTokenCompleter

    if name == "random":
        vocab_size = renderer.build().vocab_size
        tokens = RandomTokenCompleter(vocab_size=vocab_size, max_tokens=min(max_tokens, 32), seed=seed)
        if legal_moves is None:
            return tokens
        return RandomMoveCompleter(renderer.build(), legal_moves, tokens, seed)
    from envsuite.backends import sampling_client_for

    sampler = sampling_client_for(name, backend, base_url)
    return SamplingTokenCompleter(sampler, max_tokens=max_tokens, temperature=temperature)
