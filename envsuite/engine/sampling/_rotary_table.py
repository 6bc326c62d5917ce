"""Rotary embeddings of a decode step read from a table of positions, in place of the model's rotary module.

transformers' rotary module computes a step's cosines and sines from its positions in about ten small
operations (the products with the inverse frequencies, a concatenation, cos, sin, the scaling, a dtype
cast): 0.08-0.14 ms of a decode step at 1-16 rows on the AMD EPYC box, measured around the call in the step.
:class:`RotaryTable` calls the same module once per block of positions and keeps its outputs; a step
then takes its rows with one ``index_select`` each.

The values are the module's own, bit for bit: each element is the same function of its position (an
elementwise product, then ``cos``/``sin`` and the scaling). torch's elementwise kernels run whole
chunks of two vectors through the vectorized function and the rest through the scalar one (``cos``:
SLEEF against libm, which may differ in the last bit), so the table is used only where a head is a
whole number of chunks (:data:`VECTOR_CHUNK`; 64-float heads, SmolLM2's, are two): then a step's rows and
the table's blocks both go through the vectorized kernels only (tested). A block stays under the size
above which torch shares an elementwise operation out among threads, whose shares need not end on a
chunk (so does a step of fewer than 32768 / head_dim rows). Only rotary types whose
inverse frequencies never change qualify: transformers' dynamic types rescale them with the longest
sequence seen (:func:`static_rotary`).
"""

from __future__ import annotations

import torch

_STATIC_ROPE_TYPES = frozenset({"default", "linear", "llama3"})

VECTOR_CHUNK = 32
"""Floats per chunk of torch's vectorized elementwise loops with AVX-512 (two 16-float vectors; 16 with
AVX2): a head size that is a multiple of it is one of every narrower chunk too."""


def static_rotary(rotary: torch.nn.Module) -> bool:
    """Whether ``rotary`` (a transformers rotary embedding module) maps a position to fixed values."""
    return getattr(rotary, "rope_type", None) in _STATIC_ROPE_TYPES


SERIAL_FLOATS = 16384
"""Floats per call of the module: under torch's grain for sharing an elementwise operation among threads
(``at::internal::GRAIN_SIZE``, 32768)."""


class RotaryTable:
    """The cosines and sines ``rotary`` gives positions ``[0, length)`` for heads of ``head_dim`` floats,
    grown by blocks on demand."""

    def __init__(self, rotary: torch.nn.Module, head_dim: int) -> None:
        self.rotary = rotary
        self.block = max(1, SERIAL_FLOATS // head_dim)
        """Positions computed per call of the module (256 for 64-float heads)."""
        self._like = torch.empty(0)
        """The dtype and device of the hidden states the table serves (a new one starts a new table)."""
        self._cos: torch.Tensor | None = None
        self._sin: torch.Tensor | None = None

    @property
    def length(self) -> int:
        """Positions the table holds."""
        return 0 if self._cos is None else int(self._cos.shape[0])

    def __call__(self, like: torch.Tensor, positions_B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)``, each ``(B, head_dim)`` in ``like``'s dtype and device, for positions
        ``positions_B`` (int64, ``(B,)``): what ``rotary(like, positions_B[:, None])`` gives, squeezed."""
        if like.dtype != self._like.dtype or like.device != self._like.device:
            self._like, self._cos, self._sin = like.new_empty(0), None, None
        if self._cos is not None and self._sin is not None:
            try:  # (no max of the positions first: a step's positions are almost always in the table)
                return self._cos.index_select(0, positions_B), self._sin.index_select(0, positions_B)
            except IndexError:
                pass
        self._grow(int(positions_B.max()) + 1)
        assert self._cos is not None and self._sin is not None
        return self._cos.index_select(0, positions_B), self._sin.index_select(0, positions_B)

    def _grow(self, needed: int) -> None:
        length = max(needed, 2 * self.length)
        length = -(-length // self.block) * self.block
        cos_blocks, sin_blocks = (
            [] if self._cos is None else [self._cos],
            [] if self._sin is None else [self._sin],
        )
        with torch.no_grad():
            for start in range(self.length, length, self.block):
                positions = torch.arange(start, start + self.block, device=self._like.device)[None, :]
                cos, sin = self.rotary(self._like, positions)
                cos_blocks.append(cos[0])
                sin_blocks.append(sin[0])
        self._cos, self._sin = torch.cat(cos_blocks), torch.cat(sin_blocks)
