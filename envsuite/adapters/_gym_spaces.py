"""Gymnasium spaces for token and text observations, with shared-memory support for ``AsyncVectorEnv``.

Observations are variable-length (a prompt's token ids, or its text), which gymnasium's own ``Sequence``
and ``Text`` cannot put in shared memory (``Sequence`` refuses; ``Text`` only holds characters from its
charset and silently garbles the rest). Each space here has a ``max_length`` and registers
``create/read/write_to_shared_memory`` handlers (gymnasium's documented extension point for custom
spaces): every env gets a fixed slot of ``max_length + 1`` integers, the first holding the length. So
``AsyncVectorEnv`` and ``gymnasium.make_vec(..., vectorization_mode="async")`` work with their default
``shared_memory=True`` and return the same tuples of observations as ``shared_memory=False``.

The adapter keeps every observation within ``max_length`` (only a final observation can be longer; it is
cut, and ``info`` says so), so a slot always suffices.
"""

from __future__ import annotations

import string
from collections.abc import Iterator, Sequence, Sized
from typing import TYPE_CHECKING, TypeAlias, TypedDict

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory
from numpy.typing import NDArray

if TYPE_CHECKING:
    from ctypes import c_int64, c_uint32
    from multiprocessing.context import BaseContext
    from multiprocessing.sharedctypes import SynchronizedArray
    from types import ModuleType


TokenIds: TypeAlias = NDArray[np.int64]
"""A token observation: a 1-d array of ids."""


class ChatTurn(TypedDict):
    """One message of a chat observation: exactly these two keys."""

    role: str
    """One of :data:`CHAT_ROLES`."""
    content: str


ChatObservation: TypeAlias = tuple[ChatTurn, ...]
"""A conversation, oldest message first."""

SharedSlots: TypeAlias = "SynchronizedArray[c_int64] | SynchronizedArray[c_uint32]"
"""The shared memory of a batch of observations: ``int64`` slots for tokens, ``uint32`` (UTF-32) for text."""


class TokenSequence(spaces.Sequence):
    """Token ids: a 1-d ``int64`` array of at most ``max_length`` ids below ``vocab_size``."""

    def __init__(self, vocab_size: int, max_length: int, seed: int | None = None) -> None:
        super().__init__(spaces.Discrete(vocab_size), stack=True, seed=seed)
        self.vocab_size = vocab_size
        self.max_length = max_length

    def contains(self, x: object) -> bool:
        return bool(super().contains(x)) and isinstance(x, Sized) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"TokenSequence(vocab_size={self.vocab_size}, max_length={self.max_length})"


class PromptText(spaces.Text):
    """Any Unicode string up to ``max_length`` characters (gymnasium's ``Text`` only admits characters
    from a fixed charset). Samples are drawn from printable ASCII plus a few non-ASCII letters."""

    def __init__(self, max_length: int, seed: int | None = None) -> None:
        charset = string.printable + "éüßøλπ中文"
        super().__init__(max_length=max_length, min_length=0, charset=charset, seed=seed)

    def contains(self, x: object) -> bool:
        return (
            isinstance(x, str)
            and len(x) <= self.max_length
            and not any(0xD800 <= ord(c) <= 0xDFFF for c in x)
        )


CHAT_ROLES = ("system", "user", "assistant", "tool")


class ChatMessages(spaces.Sequence):
    """A conversation: a tuple of ``{"role": ..., "content": ...}`` messages, at most ``max_messages`` of
    them, each role one of :data:`CHAT_ROLES` and each content at most ``max_chars`` characters.

    The observation of the adapter's chat mode: what a chat-completions API takes as ``messages``.
    gymnasium keeps no fixed-size slot for a sequence of dicts, so vector envs in chat mode pass
    observations by pickling (``shared_memory=False``).
    """

    def __init__(self, max_messages: int, max_chars: int, seed: int | None = None) -> None:
        self.content_space = PromptText(max_chars)
        role = spaces.Text(max_length=9, min_length=4, charset="acdeilmnorstuy")
        super().__init__(spaces.Dict({"role": role, "content": self.content_space}), stack=False, seed=seed)
        self.max_messages = max_messages
        self.max_chars = max_chars

    def contains(self, x: object) -> bool:
        return (
            isinstance(x, tuple)
            and len(x) <= self.max_messages
            and all(
                isinstance(m, dict)
                and set(m) == {"role", "content"}
                and m["role"] in CHAT_ROLES
                and self.content_space.contains(m["content"])
                for m in x
            )
        )

    def sample(self, mask: object = None, probability: object = None) -> ChatObservation:
        """A random conversation of valid roles (gymnasium's Text would draw roles letter by letter)."""
        if mask is not None or probability is not None:
            raise NotImplementedError("ChatMessages.sample takes no mask")
        length = int(self.np_random.integers(0, min(self.max_messages, 8) + 1))
        return tuple(
            {
                "role": CHAT_ROLES[int(self.np_random.integers(len(CHAT_ROLES)))],
                "content": self.content_space.sample(),
            }
            for _ in range(length)
        )

    def __repr__(self) -> str:
        return f"ChatMessages(max_messages={self.max_messages}, max_chars={self.max_chars})"


VariableSpace = TokenSequence | PromptText


class SharedObservations(Sequence[TokenIds | str]):
    """The batch of observations in shared memory, decoded on access (``deepcopy`` gives a tuple)."""

    def __init__(self, space: VariableSpace, memory: SharedSlots, n: int) -> None:
        self._space, self._memory, self._n = space, memory, n

    def _slot(self, index: int) -> np.ndarray:
        width = self._space.max_length + 1
        buffer = np.frombuffer(memoryview(self._memory.get_obj()), dtype=_dtype(self._space))
        return buffer[index * width : (index + 1) * width]

    def __getitem__(self, index: int) -> TokenIds | str:  # type: ignore[override]
        if not -self._n <= index < self._n:
            raise IndexError(index)
        slot = self._slot(index % self._n)
        values = slot[1 : 1 + int(slot[0])]
        if isinstance(self._space, TokenSequence):
            return values.astype(np.int64)
        return values.astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[TokenIds | str]:
        return (self[i] for i in range(self._n))

    def __deepcopy__(self, memo: dict[int, object]) -> tuple[TokenIds | str, ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return repr(tuple(self))


def _dtype(space: VariableSpace) -> type[np.int64] | type[np.uint32]:
    return np.int64 if isinstance(space, TokenSequence) else np.uint32


@create_shared_memory.register(TokenSequence)
@create_shared_memory.register(PromptText)
def _create(space: VariableSpace, n: int = 1, ctx: ModuleType | BaseContext | None = None) -> SharedSlots:
    import multiprocessing

    # gymnasium passes the multiprocessing module or a context; both have Array.
    context = ctx if ctx is not None else multiprocessing
    slots: SharedSlots = context.Array(np.dtype(_dtype(space)).char, n * (space.max_length + 1))
    return slots


@read_from_shared_memory.register(TokenSequence)
@read_from_shared_memory.register(PromptText)
def _read(space: VariableSpace, shared_memory: SharedSlots, n: int = 1) -> SharedObservations:
    return SharedObservations(space, shared_memory, n)


@write_to_shared_memory.register(TokenSequence)
@write_to_shared_memory.register(PromptText)
def _write(space: VariableSpace, index: int, value: TokenIds | str, shared_memory: SharedSlots) -> None:
    if isinstance(space, TokenSequence):
        values = np.asarray(value, dtype=np.int64).reshape(-1)
    else:
        values = np.frombuffer(str(value).encode("utf-32-le", "surrogatepass"), dtype="<u4")
    if len(values) > space.max_length:
        raise ValueError(f"observation of length {len(values)} does not fit {space} (the adapter cuts them)")
    width = space.max_length + 1
    buffer = np.frombuffer(memoryview(shared_memory.get_obj()), dtype=_dtype(space))
    slot = buffer[index * width : (index + 1) * width]
    slot[0] = len(values)
    slot[1 : 1 + len(values)] = values
