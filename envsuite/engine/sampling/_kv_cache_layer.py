"""The KV-cache layer of the sampling engine: keys and values that grow in place, one token at a time."""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer


class GrowableLayer(DynamicLayer):
    """A full-attention KV-cache layer that appends in place.

    ``DynamicLayer`` appends a token by concatenating it to the whole cache, which copies every cached
    position at every decode step: O(length) per token, O(length^2) per sequence. This layer keeps
    ``keys``/``values`` as leading views of buffers with spare room along the sequence axis and writes
    new positions into the room; a buffer is reallocated (with half its length again as room) only
    when it is full. When the engine replaces ``keys``/``values`` wholesale (rows joining, trimming)
    the next append notices that they are no longer views of the buffers and rebuffers once.
    """

    MIN_ROOM = 64
    """Spare positions at least, per (re)allocation."""

    def __init__(self) -> None:
        super().__init__()
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start = self.get_seq_length()
        end = start + key_states.shape[-2]
        if not self._backed(end):
            self._rebuffer(start, end, key_states, value_states)
        assert self._key_buffer is not None and self._value_buffer is not None
        self._key_buffer[:, :, start:end] = key_states
        self._value_buffer[:, :, start:end] = value_states
        self.keys = self._key_buffer[:, :, :end]
        self.values = self._value_buffer[:, :, :end]
        return self.keys, self.values

    def select_rows(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (repeats allowed), buffers and room included: one copy, no rebuffer."""
        length = self.get_seq_length()
        if self._key_buffer is None or self._value_buffer is None or not self._backed(length):
            assert self.keys is not None and self.values is not None
            self.keys = self.keys.index_select(0, index)
            self.values = self.values.index_select(0, index)
            return
        self._key_buffer = self._key_buffer.index_select(0, index)
        self._value_buffer = self._value_buffer.index_select(0, index)
        self.keys = self._key_buffer[:, :, :length]
        self.values = self._value_buffer[:, :, :length]

    def _backed(self, end: int) -> bool:
        """``keys``/``values`` are still leading views of the buffers, and the buffers hold ``end``."""
        keys, buffer = self.keys, self._key_buffer
        return (
            buffer is not None
            and self._value_buffer is not None
            and keys is not None
            and keys.dim() == 4
            and end <= buffer.shape[2]
            and keys.shape[0] == buffer.shape[0]
            and keys.data_ptr() == buffer.data_ptr()
            and self.values is not None
            and self.values.data_ptr() == self._value_buffer.data_ptr()
        )

    def _rebuffer(self, start: int, end: int, key_like: torch.Tensor, value_like: torch.Tensor) -> None:
        capacity = end + max(self.MIN_ROOM, end // 2)
        batch = key_like.shape[0]
        keys = key_like.new_empty((batch, key_like.shape[1], capacity, key_like.shape[3]))
        values = value_like.new_empty((batch, value_like.shape[1], capacity, value_like.shape[3]))
        if start:
            assert self.keys is not None and self.values is not None
            keys[:, :, :start] = self.keys
            values[:, :, :start] = self.values
        self._key_buffer, self._value_buffer = keys, values


def new_cache(model: PreTrainedModel) -> DynamicCache:
    """A cache for ``model`` whose full-attention layers append in place (:class:`GrowableLayer`)."""
    cache = DynamicCache(config=model.config)
    cache.layers = [GrowableLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
