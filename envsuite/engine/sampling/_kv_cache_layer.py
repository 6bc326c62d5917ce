"""The KV-cache layer of the sampling engine: keys and values kept in buffers with spare rows and columns.

``DynamicLayer`` appends a token by concatenating it to the whole cache, which copies every cached
position at every decode step: O(length) per token, O(length^2) per sequence. And a running batch
whose rows come and go (continuous batching, multi-turn episodes returning turn after turn) would
copy every row's cache each time one row joins or leaves: O(batch x length) per join.

:class:`GrowableLayer` keeps ``keys``/``values`` as the views ``buffer[:rows, :, start:end]`` of
buffers with room on every side:

* appending a position writes column ``end`` (room on the right);
* a joining row (right-aligned like every row) is written into a spare row, ending at column ``end``
  (room below, and on the left for a row longer than the batch);
* a leaving row is overwritten by one of the last rows (:meth:`GrowableLayer.move_rows`), and
  columns no row uses any more are dropped by moving ``start`` (no copy).

Only when a buffer is out of the room a write needs is it reallocated, with a quarter as much again
as room (:meth:`GrowableLayer.room`), so copies of the whole cache are amortised (a quarter rather
than a half: the buffers of a running batch are most of a sampling process's memory at its peak,
docs/benchmarks.md). Every buffer position outside a row's real columns holds a finite number (zeros
or an old row's keys), which the attention mask weights by exactly zero.
When something replaces ``keys``/``values`` wholesale (transformers' own cache methods) the layer
adopts them as its buffers at the next operation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer


class GrowableLayer(DynamicLayer):
    """A full-attention KV-cache layer over buffers with spare rows and columns (see module docstring)."""

    MIN_ROOM = 64
    """Spare positions at least, per (re)allocation."""
    ROOM_DIVISOR = 4
    """A (re)allocation adds ``1 / ROOM_DIVISOR`` of what it holds as spare rows or columns."""

    @classmethod
    def room(cls, positions: int) -> int:
        """Spare columns a (re)allocation holding ``positions`` columns adds."""
        return max(cls.MIN_ROOM, positions // cls.ROOM_DIVISOR)

    def __init__(self) -> None:
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None
        self._views_stale = False
        """``advance`` moved ``end``: ``keys``/``values`` are rebuilt when next read (a step's 30 layers
        would otherwise slice 60 views nobody reads)."""
        self._replaced = False
        """Something other than this layer assigned ``keys`` or ``values`` (``_adopt`` then checks them)."""
        super().__init__()
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None
        self._rows = 0
        self._start = 0
        self._end = 0

    # ------------------------------------------------------------------ the views transformers reads

    @property
    def keys(self) -> torch.Tensor | None:
        """The live keys ``(rows, heads, length, head_dim)``: a view of the key buffer."""
        if self._views_stale:
            self._set_views()
        return self._keys

    @keys.setter
    def keys(self, value: torch.Tensor | None) -> None:
        self._keys, self._views_stale, self._replaced = value, False, True

    @property
    def values(self) -> torch.Tensor | None:
        """The live values, like :attr:`keys`."""
        if self._views_stale:
            self._set_views()
        return self._values

    @values.setter
    def values(self, value: torch.Tensor | None) -> None:
        self._values, self._views_stale, self._replaced = value, False, True

    @property
    def holds_cache(self) -> bool:
        """Whether keys and values are set (checked without rebuilding views ``advance`` left stale)."""
        return self._keys is not None and self._values is not None

    # ------------------------------------------------------------------ what transformers calls

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``key_states``/``value_states`` ``(rows, heads, new, head_dim)`` after every row's last position."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self._adopt()
        added = key_states.shape[-2]
        if self._key_buffer is None:
            self._rows = key_states.shape[0]
            self._relayout(key_states, value_states, rows=key_states.shape[0], left=0, right=added)
        elif self._end + added > self._key_buffer.shape[2]:
            self._relayout(key_states, value_states, rows=self._rows, left=0, right=added)
        keys, values = self._buffers()
        keys[: self._rows, :, self._end : self._end + added] = key_states
        values[: self._rows, :, self._end : self._end + added] = value_states
        self._end += added
        return self._set_views()

    # ------------------------------------------------------------------ what a captured step calls

    def free_buffers(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The key and value buffers with column ``end`` free in every row (reallocated first if out of
        room, as :meth:`update` does), for a caller that writes one new position itself
        (:func:`free_columns`) and then calls :meth:`advance`. Rows ``[0, rows)`` are the cache's, its
        live columns ``[start, end)``. None while the layer holds no buffers yet."""
        self._adopt()
        keys, values = self._key_buffer, self._value_buffer
        if keys is None or values is None:
            return None
        if self._end + 1 > keys.shape[2]:
            self._relayout(keys, values, rows=self._rows, left=0, right=1)
            keys, values = self._buffers()
        return keys, values

    def advance(self) -> None:
        """Count column ``end`` (written by the caller of :meth:`free_buffers`) as live."""
        self._end += 1
        self._views_stale = True

    @property
    def rows(self) -> int:
        """Rows the cache holds (the first rows of the buffers)."""
        return self._rows

    # ------------------------------------------------------------------ what the running batch calls

    def assign(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Hold exactly ``keys``/``values`` ``(rows, heads, length, head_dim)`` (no copy, no room yet)."""
        if not self.is_initialized:
            self.lazy_initialization(keys, values)
        self._key_buffer, self._value_buffer = keys, values
        self._rows, self._start, self._end = keys.shape[0], 0, keys.shape[2]
        self._set_views()

    def select_rows(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (repeats allowed), buffers and room included: one copy of the kept rows."""
        self._adopt()
        keys, values = self._buffers()
        self._key_buffer = keys.index_select(0, index)
        self._value_buffer = values.index_select(0, index)
        self._rows = int(index.shape[0])
        self._set_views()

    def move_rows(self, target: list[int], source: list[int], rows: int) -> None:
        """Copy rows ``source`` over rows ``target`` (their live columns), then keep the first ``rows``."""
        self._adopt()
        if target:
            keys, values = self._buffers()
            t = torch.tensor(target, dtype=torch.long, device=keys.device)
            s = torch.tensor(source, dtype=torch.long, device=keys.device)
            live = slice(self._start, self._end)
            keys[:, :, live].index_copy_(0, t, keys[:, :, live].index_select(0, s))
            values[:, :, live].index_copy_(0, t, values[:, :, live].index_select(0, s))
        self._rows = rows
        self._set_views()

    def drop_left(self, columns: int) -> None:
        """Forget the first ``columns`` live positions of every row (padding in all of them): no copy."""
        self._adopt()
        self._start += columns
        self._set_views()

    def join(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Add rows ``keys``/``values`` ``(new_rows, heads, length, head_dim)``, right-aligned with the others.

        Only the new rows are written, into spare rows of the buffers; the buffers are reallocated (the
        whole cache copied once, with room to spare) only when there are too few spare rows or the new
        rows are longer than the columns left of ``end``.
        """
        self._adopt()
        length, new_rows = keys.shape[2], keys.shape[0]
        buffer = self._key_buffer
        assert buffer is not None, "join into an empty layer: assign instead"
        live = self._end - self._start
        rows_needed = self._rows + new_rows
        if length > self._end:
            grow = self.room(live)
            rows = max(rows_needed, buffer.shape[0])
            self._relayout(keys, values, rows=rows, left=length - live + grow, right=0)
        elif rows_needed > buffer.shape[0]:
            rows = max(rows_needed, buffer.shape[0] + buffer.shape[0] // self.ROOM_DIVISOR)
            self._relayout(keys, values, rows=rows, left=self._start, right=0)
        mine_k, mine_v = self._buffers()
        mine_k[self._rows : rows_needed, :, self._end - length : self._end] = keys
        mine_v[self._rows : rows_needed, :, self._end - length : self._end] = values
        self._rows = rows_needed
        self._start = min(self._start, self._end - length)
        self._set_views()

    def compact(self) -> None:
        """Reallocate the buffers to the live rows and columns plus the usual room (one copy of the live
        cache), so that a batch which shrank gives back what its peak took."""
        self._adopt()
        keys, values = self._buffers()
        self._relayout(keys, values, rows=self._rows, left=0, right=0)
        self._set_views()

    @property
    def allocated_bytes(self) -> int:
        """Bytes of the key and value buffers (live positions, room and stale rows alike)."""
        if self._key_buffer is None or self._value_buffer is None:
            return 0
        return self._key_buffer.nbytes + self._value_buffer.nbytes

    @property
    def buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The key and value buffers behind ``keys``/``values`` (for tests of where writes land)."""
        self._adopt()
        return self._buffers()

    # ------------------------------------------------------------------ internals

    def _buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        assert self._key_buffer is not None and self._value_buffer is not None
        return self._key_buffer, self._value_buffer

    def _set_views(self) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self._buffers()
        self._keys = keys[: self._rows, :, self._start : self._end]
        self._values = values[: self._rows, :, self._start : self._end]
        self._views_stale = self._replaced = False
        return self._keys, self._values

    def _adopt(self) -> None:
        """Take ``keys``/``values`` as the buffers when something other than this layer replaced them."""
        if not self._replaced:  # the views are this layer's own (or stale ones it will rebuild)
            return
        keys, values = self.keys, self.values
        if keys is None or values is None or keys.dim() != 4:
            return
        if self._key_buffer is not None and self._view_of_buffers(keys, values):
            return
        self.assign(keys, values)

    def _view_of_buffers(self, keys: torch.Tensor, values: torch.Tensor) -> bool:
        key_buffer, value_buffer = self._buffers()
        return (
            keys.shape[0] == self._rows
            and keys.shape[2] == self._end - self._start
            and keys.data_ptr() == key_buffer[:, :, self._start :].data_ptr()
            and values.data_ptr() == value_buffer[:, :, self._start :].data_ptr()
        )

    def _relayout(
        self, key_like: torch.Tensor, value_like: torch.Tensor, rows: int, left: int, right: int
    ) -> None:
        """New buffers of ``rows`` rows: ``left`` free columns, the live ones, then at least ``right`` free."""
        live = self._end - self._start
        capacity = left + live + right + self.room(left + live + right)
        heads, dim = key_like.shape[1], key_like.shape[3]
        keys = key_like.new_zeros((rows, heads, capacity, dim))
        values = value_like.new_zeros((rows, value_like.shape[1], capacity, value_like.shape[3]))
        if self._key_buffer is not None and live and self._rows:
            old_keys, old_values = self._buffers()
            keys[: self._rows, :, left : left + live] = old_keys[: self._rows, :, self._start : self._end]
            values[: self._rows, :, left : left + live] = old_values[: self._rows, :, self._start : self._end]
        self._key_buffer, self._value_buffer = keys, values
        self._start, self._end = left, left + live


@dataclass(frozen=True, slots=True)
class FreeColumns:
    """Every layer's buffers with column ``end`` free (:func:`free_columns`), in the layers' order."""

    key_buffers: list[torch.Tensor]
    value_buffers: list[torch.Tensor]
    start: int
    """The first live column of every layer."""
    end: int
    """The free column the caller writes in every layer."""


def free_columns(layers: Sequence[object], rows: int) -> FreeColumns | None:
    """:meth:`GrowableLayer.free_buffers` of every layer, for a step that writes one position in each
    (``_captured_step``) and then calls :func:`advance_all`: None (nothing written) where a layer is not
    a :class:`GrowableLayer` of ``rows`` rows holding buffers with unit stride in the head dimension, or
    where the layers' live columns differ (a batch's layers always agree).

    The buffers and the two columns, with no result object per layer: the decode step runs this every
    step, on the interpreter's caches the step's weights have just flushed."""
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    start = end = -1
    for layer in layers:
        if not isinstance(layer, GrowableLayer) or layer.rows != rows:
            return None
        buffers = layer.free_buffers()
        if buffers is None:
            return None
        key, value = buffers
        if start < 0:
            start, end = layer._start, layer._end
        elif layer._start != start or layer._end != end:
            return None
        if key.stride(3) != 1 or value.stride(3) != 1:
            return None
        keys.append(key)
        values.append(value)
    return FreeColumns(keys, values, start, end) if keys else None


def advance_all(layers: Sequence[GrowableLayer]) -> None:
    """:meth:`GrowableLayer.advance` of every layer."""
    for layer in layers:
        layer.advance()


def new_cache(model: PreTrainedModel) -> DynamicCache:
    """A cache for ``model`` whose full-attention layers use :class:`GrowableLayer`."""
    cache = DynamicCache(config=model.config)
    cache.layers = [GrowableLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
