"""The prefix cache: KV of finished sequences kept by token prefix, so a later prompt prefills only its new tail.

Multi-turn rollouts send, turn after turn, the previous prompt + the sampled reply + a few new tokens
(the extension property). Without this cache every turn prefills the whole conversation again, so an
episode of ``T`` turns prefills O(T^2) tokens. With it, a finished row's keys and values are kept and
the next turn's prompt finds them by its leading tokens: only the new tokens are prefilled, O(T) per
episode.

Structure: a radix tree over token ids (as radix/prefix caches do). Each edge holds a run of tokens and
the KV of exactly those positions, ``(layers, 2, kv_heads, tokens, head_dim)``, so sequences that share
leading tokens (a system prompt, the prompt of a GRPO group) store them once, and the KV of a prompt's
longest cached prefix is the concatenation of the edges along its path. A position's keys and values
depend only on the tokens up to it, so any path through the tree is valid for any prompt that starts
with those tokens.

Bounds: the tree keeps at most ``max_bytes`` of KV; past that it drops least-recently-used leaves (a
parent whose children are all gone becomes a leaf in turn). Everything runs on the engine thread.

Staleness: keys and values are a function of the weights, so a cache belongs to one engine, whose
model is frozen; a new sampling client (new weights) starts with an empty cache.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

KVSource = Callable[[int, int], torch.Tensor]
"""``(start, end) -> (layers, 2, kv_heads, end - start, head_dim)``: the KV of positions ``[start, end)``."""


@dataclass(frozen=True)
class PrefixMatch:
    """The cached KV of a prompt's longest cached prefix."""

    length: int
    """Leading prompt tokens covered (0: nothing cached)."""
    blocks: list[torch.Tensor]
    """KV blocks along the path, ``(layers, 2, kv_heads, n_i, head_dim)`` with ``sum(n_i) == length``."""


@dataclass(frozen=True)
class PrefixCacheStats:
    """Counters since the cache was made."""

    lookups: int
    hit_tokens: int
    """Prompt tokens served from the cache instead of being prefilled."""
    inserted_tokens: int
    evicted_tokens: int
    cached_tokens: int
    cached_bytes: int


@dataclass(eq=False)
class _Node:
    """An edge of the tree (its tokens and their KV) and the node it leads to (its children by first
    token). Nodes hold no parent pointer: the tree is free of reference cycles, so a dropped cache
    frees its KV at once rather than at Python's next cyclic garbage collection."""

    tokens: tuple[int, ...]
    kv: torch.Tensor | None
    children: dict[int, _Node] = field(default_factory=dict)
    last_used: int = 0

    @property
    def nbytes(self) -> int:
        return 0 if self.kv is None else self.kv.numel() * self.kv.element_size()


class PrefixCache:
    """A byte-bounded radix tree of KV blocks keyed by token prefix (see module docstring)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._root = _Node((), None)
        self._clock = itertools.count(1)
        self._bytes = 0
        self._tokens = 0
        self._lookups = 0
        self._hit_tokens = 0
        self._inserted = 0
        self._evicted = 0

    def stats(self) -> PrefixCacheStats:
        return PrefixCacheStats(
            self._lookups, self._hit_tokens, self._inserted, self._evicted, self._tokens, self._bytes
        )

    def match(self, prompt: Sequence[int], limit: int) -> PrefixMatch:
        """The KV of the longest cached prefix of ``prompt``, at most ``limit`` tokens long."""
        self._lookups += 1
        blocks: list[torch.Tensor] = []
        node, pos, tick = self._root, 0, next(self._clock)
        while pos < limit:
            child = node.children.get(prompt[pos])
            if child is None:
                break
            assert child.kv is not None
            common = min(_common_prefix(child.tokens, prompt, pos), limit - pos)
            child.last_used = tick
            blocks.append(child.kv if common == len(child.tokens) else child.kv[:, :, :, :common])
            pos += common
            if common < len(child.tokens):
                break
            node = child
        self._hit_tokens += pos
        return PrefixMatch(pos, blocks)

    def insert(self, tokens: Sequence[int], kv_source: KVSource) -> None:
        """Cache ``tokens``: positions already in the tree are kept, the rest come from ``kv_source``."""
        if self.max_bytes <= 0 or not tokens:
            return
        node, pos, tick = self._root, 0, next(self._clock)
        while pos < len(tokens):
            child = node.children.get(tokens[pos])
            if child is None:
                break
            common = _common_prefix(child.tokens, tokens, pos)
            if common < len(child.tokens):
                child = self._split(node, child, common)
            child.last_used = tick
            pos += common
            node = child
        if pos < len(tokens):
            kv = kv_source(pos, len(tokens)).contiguous()
            leaf = _Node(tuple(tokens[pos:]), kv, last_used=tick)
            node.children[tokens[pos]] = leaf
            self._bytes += leaf.nbytes
            self._tokens += len(leaf.tokens)
            self._inserted += len(leaf.tokens)
        self._evict()

    def clear(self) -> None:
        self._root = _Node((), None)
        self._bytes = self._tokens = 0

    def _split(self, parent: _Node, child: _Node, at: int) -> _Node:
        """Cut ``child``'s edge after ``at`` tokens; return the new node holding the first part."""
        assert child.kv is not None and 0 < at < len(child.tokens)
        head = _Node(child.tokens[:at], child.kv[:, :, :, :at].clone(), last_used=child.last_used)
        parent.children[child.tokens[0]] = head
        child.tokens, child.kv = child.tokens[at:], child.kv[:, :, :, at:].clone()
        head.children[child.tokens[0]] = child
        return head

    def _evict(self) -> None:
        if self._bytes <= self.max_bytes:
            return
        parent_of = self._parents()
        leaves = [node for node in parent_of if not node.children]
        while self._bytes > self.max_bytes and leaves:
            oldest = min(leaves, key=lambda node: node.last_used)
            leaves.remove(oldest)
            parent = parent_of[oldest]
            del parent.children[oldest.tokens[0]]
            self._bytes -= oldest.nbytes
            self._tokens -= len(oldest.tokens)
            self._evicted += len(oldest.tokens)
            if parent is not self._root and not parent.children:
                leaves.append(parent)

    def _parents(self) -> dict[_Node, _Node]:
        """Every node of the tree (root excluded) with its parent."""
        parent_of: dict[_Node, _Node] = {}
        stack = [self._root]
        while stack:
            node = stack.pop()
            for child in node.children.values():
                parent_of[child] = node
                stack.append(child)
        return parent_of


def _common_prefix(edge: tuple[int, ...], tokens: Sequence[int], start: int) -> int:
    """How many leading tokens of ``edge`` equal ``tokens[start:]``."""
    n = min(len(edge), len(tokens) - start)
    if tuple(tokens[start : start + n]) == edge[:n]:
        return n
    for i in range(n):
        if edge[i] != tokens[start + i]:
            return i
    return n
