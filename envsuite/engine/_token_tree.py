"""Token trees: sequences that start with the same tokens, laid out so the shared tokens appear once.

Used by training (``forward_backward`` over datums that share a prompt) and by the sampling engine's
prefill (prompts that share a system prompt). A row holds every distinct token of a run of sequences
once, in the order of the sequences (sorted, so sequences with long common prefixes are neighbours),
and each sequence is a path through the row::

    row:        [ system + problem A | reply a1 | reply a2 | problem B | reply b1 | reply b2 ]
    sequence a2:  ^^^^^^^^^^^^^^^^^^^^            ^^^^^^^^
    sequence b1:  ^^^^^^ (system)                            ^^^^^^^^^^^^^^^^^^^^^

Each token attends exactly to the tokens on its own path up to itself (:attr:`TreeLayout.mask_RWW`)
and carries its position in its own sequence as position id, so every hidden state (and KV-cache
entry) is the one the sequence gets alone, up to float rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

MIN_SHARED_PREFIX = 16
"""A sequence joins the previous sequence's row only when they share at least this many leading tokens."""
TREE_ROW_TOKENS = 1024
"""A shared row grows past the longest sequence only up to this many tokens: attention over a row costs
its length squared, so long replies behind a short shared prompt are better left in their own rows."""


@dataclass(frozen=True)
class TreeRow:
    """Sequences laid out as one row, in this order; each shares ``shared[k]`` leading tokens with the one before."""

    members: list[int]
    shared: list[int]


@dataclass(frozen=True)
class TreeLayout:
    """``R`` rows of width ``W`` holding a list of sequences (indexed ``_S``)."""

    input_ids_RW: torch.Tensor
    """Token ids; columns past a row's end hold ``pad_id``."""
    position_ids_RW: torch.Tensor
    """Each token's position in its own sequence (0 on padding)."""
    used_R: list[int]
    """Columns holding real tokens, per row."""
    row_S: list[int]
    """The row of each sequence."""
    columns_S: list[list[int]]
    """Per sequence, the column of each of its tokens (its path through its row)."""
    mask_RWW: torch.Tensor | None
    """True where a token (row axis) may attend to a token (column axis): the tokens on its own path
    up to itself; padding sees only itself. None when no row holds more than one sequence (plain
    causal attention with right padding is then exact)."""

    @property
    def shared(self) -> bool:
        return self.mask_RWW is not None

    @property
    def width(self) -> int:
        return int(self.input_ids_RW.shape[1])

    def flat_index(self, s: int) -> torch.Tensor:
        """Sequence ``s``'s tokens as indices into the ``(R * W)`` flattened row axis."""
        return torch.tensor(self.columns_S[s], dtype=torch.long) + self.row_S[s] * self.width


def tree_layout(tokens_S: Sequence[Sequence[int]], pad_id: int) -> TreeLayout:
    """Lay ``tokens_S`` out as token-tree rows (see the module docstring)."""
    rows = plan_rows(tokens_S)
    ids_R: list[list[int]] = []
    pos_R: list[list[int]] = []
    columns_S: list[list[int]] = [[] for _ in tokens_S]
    row_S = [0] * len(tokens_S)
    for r, row in enumerate(rows):
        ids: list[int] = []
        pos: list[int] = []
        path: list[int] = []
        for member, shared in zip(row.members, row.shared, strict=True):
            own = tokens_S[member]
            path = path[:shared] + list(range(len(ids), len(ids) + len(own) - shared))
            ids += own[shared:]
            pos += range(shared, len(own))
            columns_S[member], row_S[member] = path, r
        ids_R.append(ids)
        pos_R.append(pos)
    width = max(len(ids) for ids in ids_R)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    for r, (ids, pos) in enumerate(zip(ids_R, pos_R, strict=True)):
        input_ids[r, : len(ids)] = torch.tensor(ids)
        positions[r, : len(pos)] = torch.tensor(pos)
    used_R = [len(ids) for ids in ids_R]
    mask = _path_mask(rows, columns_S, used_R, width) if any(len(r.members) > 1 for r in rows) else None
    return TreeLayout(input_ids, positions, used_R, row_S, columns_S, mask)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def plan_rows(tokens_S: Sequence[Sequence[int]]) -> list[TreeRow]:
    """The rows :func:`tree_layout` fills: sequences in sorted order, each sharing with its predecessor
    (in sorted order a sequence's longest common prefix with any earlier one is the one with its direct
    predecessor, so this finds every shared token)."""
    cap = max(max(len(t) for t in tokens_S), TREE_ROW_TOKENS)
    rows: list[TreeRow] = []
    width = 0
    previous: Sequence[int] = ()
    for s in sorted(range(len(tokens_S)), key=lambda s: list(tokens_S[s])):
        own = tokens_S[s]
        shared = _common_prefix(previous, own)
        if rows and shared >= MIN_SHARED_PREFIX and width + len(own) - shared <= cap:
            rows[-1].members.append(s)
            rows[-1].shared.append(shared)
            width += len(own) - shared
        else:
            rows.append(TreeRow([s], [0]))
            width = len(own)
        previous = own
    return rows


def _path_mask(
    rows: list[TreeRow], columns_S: list[list[int]], used_R: list[int], width: int
) -> torch.Tensor:
    mask = torch.zeros((len(rows), width, width), dtype=torch.bool)
    for r, row in enumerate(rows):
        for member in row.members:
            path = torch.tensor(columns_S[member], dtype=torch.long)
            causal = torch.ones((len(path), len(path)), dtype=torch.bool).tril()
            mask[r, path[:, None], path[None, :]] |= causal
        # A padding column attending nowhere would make NaNs (softmax over nothing); let it see itself.
        pad = torch.arange(used_R[r], width)
        mask[r, pad, pad] = True
    return mask
