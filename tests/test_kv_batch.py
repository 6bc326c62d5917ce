"""The running batch's KV cache: rows join and leave without copying the other rows, and decode the same.

Multi-turn episodes return to the running batch turn after turn; each join used to left-pad and
concatenate every layer's whole cache (O(batch x length) per join). These tests pin down that a join
writes only the new rows into spare room of the existing buffers, that a leaving row is replaced by
one moved row, and that after any mix of joins, leaves and steps the batch gives the logits of a
fresh prefill of every row's tokens. The real tiny random Llama, with and without the lean step.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import PreTrainedModel

from envsuite.backends.local import load_sampling_model
from envsuite.engine.sampling import KVBatch, llama_decoder, prefill

MODEL = "tiny-random"


@pytest.fixture(scope="module")
def model() -> PreTrainedModel:
    return load_sampling_model(base_model=MODEL).model.eval()


def _prompts(lengths: list[int], seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(5, 200, (n,), generator=generator).tolist() for n in lengths]


class _Tracked:
    """A batch and, per row, every token it holds plus its pending one (what a fresh prefill needs)."""

    def __init__(self, model: PreTrainedModel, prompts: list[list[int]]) -> None:
        self.model = model
        out = prefill(model, prompts, False)
        self.batch: KVBatch = out.batch
        self.tokens = [list(p) for p in prompts]
        self._set_pending(out.last_logits_B_V)

    def _set_pending(self, logits_B_V: torch.Tensor) -> None:
        pending = logits_B_V.argmax(dim=-1).tolist()
        self.batch.pending_B = pending
        for row, token in zip(self.tokens, pending, strict=True):
            row.append(token)

    def step(self, lean: bool) -> torch.Tensor:
        decoder = llama_decoder(self.model) if lean else None
        assert decoder is not None or not lean
        logits = self.batch.step(self.model, decoder)
        self._set_pending(logits)
        return logits

    def leave(self, keep: list[int]) -> list[int]:
        order = self.batch.select(keep)
        self.tokens = [self.tokens[i] for i in order]
        return order

    def join(self, other: _Tracked) -> None:
        self.batch.extend(other.batch)
        self.tokens += other.tokens


def _key_buffer(batch: KVBatch) -> torch.Tensor:
    layer: Any = batch.cache.layers[0]
    buffer: torch.Tensor = layer.buffers[0]
    return buffer


def _keys(batch: KVBatch) -> torch.Tensor:
    layer: Any = batch.cache.layers[0]
    keys: torch.Tensor = layer.keys.clone()
    return keys


def _fresh_logits(model: PreTrainedModel, tokens: list[list[int]]) -> torch.Tensor:
    """Next-token logits of every row prefilled from scratch, one at a time (no padding at all)."""
    return torch.cat([prefill(model, [row], False).last_logits_B_V for row in tokens])


@torch.inference_mode()
def test_a_row_rejoining_after_another_left_is_written_into_the_existing_buffers(
    model: PreTrainedModel,
) -> None:
    running = _Tracked(model, _prompts([9, 14, 11, 12], seed=0))
    for _ in range(3):
        running.step(lean=True)
    buffer = _key_buffer(running.batch)
    before = _keys(running.batch)
    # Row 1 leaves (its turn ended): the last row takes its place, nothing else moves (the columns
    # only the longest row, row 1, used are dropped from the view).
    assert running.leave([0, 2, 3]) == [0, 3, 2]
    assert _key_buffer(running.batch).data_ptr() == buffer.data_ptr()
    after = _keys(running.batch)
    assert after.shape[2] == before.shape[2] - 2
    torch.testing.assert_close(after, before[[0, 3, 2], :, 2:], rtol=0, atol=0)
    # The episode comes back with its next prompt (shorter than the batch): one new row, in place.
    comeback = _Tracked(model, _prompts([10], seed=1))
    kept = _keys(running.batch)
    running.join(comeback)
    assert _key_buffer(running.batch).data_ptr() == buffer.data_ptr()
    torch.testing.assert_close(_keys(running.batch)[:3], kept, rtol=0, atol=0)
    expected = _fresh_logits(model, running.tokens)
    torch.testing.assert_close(running.step(lean=True), expected, rtol=0, atol=1e-4)


@pytest.mark.parametrize("lean", [True, False])
@torch.inference_mode()
def test_joins_leaves_and_steps_in_any_mix_decode_like_a_fresh_prefill(
    model: PreTrainedModel, lean: bool
) -> None:
    running = _Tracked(model, _prompts([6, 13, 8], seed=2))
    running.step(lean)
    # Longer than the whole batch (needs room on the left), then more rows than the buffers hold.
    running.join(_Tracked(model, _prompts([40], seed=3)))
    running.step(lean)
    running.join(_Tracked(model, _prompts([5, 17, 9], seed=4)))
    for _ in range(2):
        running.step(lean)
    running.leave([1, 2, 5, 6])  # the first row and the long one leave: the left columns go too
    running.step(lean)
    running.join(_Tracked(model, _prompts([7], seed=5)))
    for _ in range(70):  # past the room on the right: the buffers grow while rows keep their places
        running.step(lean)
    running.leave([0, 4])
    running.join(_Tracked(model, _prompts([3, 90], seed=6)))
    expected = _fresh_logits(model, running.tokens)
    torch.testing.assert_close(running.step(lean), expected, rtol=0, atol=1e-4)


@torch.inference_mode()
def test_a_batch_that_shrank_gives_its_buffers_back_and_decodes_the_same(model: PreTrainedModel) -> None:
    running = _Tracked(model, _prompts([7, 120, 9, 11, 8, 10, 12, 6], seed=7))
    running.batch.compact_min_bytes = 0  # the tiny model's KV is far under the default threshold
    running.step(lean=True)
    peak = running.batch.allocated_bytes
    buffer = _key_buffer(running.batch)
    # The long row and five others leave: the buffers would keep 8 rows x 120+ columns for 2 short rows.
    running.leave([0, 2])
    assert _key_buffer(running.batch).data_ptr() != buffer.data_ptr()
    assert running.batch.allocated_bytes < peak // 3
    expected = _fresh_logits(model, running.tokens)
    torch.testing.assert_close(running.step(lean=True), expected, rtol=0, atol=1e-4)
    # A later join grows the compacted buffers again, rows and columns, and still decodes the same.
    running.join(_Tracked(model, _prompts([30, 5, 14], seed=8)))
    for _ in range(3):
        running.step(lean=True)
    expected = _fresh_logits(model, running.tokens)
    torch.testing.assert_close(running.step(lean=True), expected, rtol=0, atol=1e-4)


@torch.inference_mode()
def test_a_batch_that_lost_one_row_of_many_keeps_its_buffers(model: PreTrainedModel) -> None:
    running = _Tracked(model, _prompts([9, 14, 11, 12, 10], seed=9))
    running.batch.compact_min_bytes = 0
    running.step(lean=True)
    buffer = _key_buffer(running.batch)
    running.leave([0, 1, 2, 3])
    assert _key_buffer(running.batch).data_ptr() == buffer.data_ptr()
