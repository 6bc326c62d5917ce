"""The decode step's rotary table (``envsuite/engine/sampling/_rotary_table.py``) gives the rotary
module's own values, bit for bit, and the lean decode step gives the same logits with it as without it.

A random Llama with heads of 32 floats (the step uses the table only where a head is a whole number
of torch's 32-float vector chunks; the shared tiny model's heads are 16 floats)."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from envsuite.engine.sampling._kv_batch import prefill
from envsuite.engine.sampling._llama_decode import llama_decoder
from envsuite.engine.sampling._rotary_table import RotaryTable, static_rotary


def _config(head_dim: int, **rope: object) -> LlamaConfig:
    return LlamaConfig(
        hidden_size=4 * head_dim,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=96,
        num_hidden_layers=2,
        vocab_size=300,
        max_position_embeddings=4096,
        **rope,
    )


@pytest.mark.parametrize("head_dim", [32, 64])
def test_the_table_gives_the_modules_values_bit_for_bit(head_dim: int) -> None:
    rotary = LlamaRotaryEmbedding(_config(head_dim))
    assert static_rotary(rotary)
    table = RotaryTable(rotary, head_dim)
    like = torch.empty(0)
    generator = torch.Generator().manual_seed(0)
    for rows, top in [(1, 10), (3, 300), (16, 200), (33, 1000), (100, 3000), (2, 7)]:
        positions = torch.randint(0, top, (rows,), generator=generator)
        cos, sin = table(like, positions)
        expected_cos, expected_sin = rotary(like, positions[:, None])
        assert torch.equal(cos, expected_cos[:, 0]) and torch.equal(sin, expected_sin[:, 0])
    assert table.length == -(-3000 // table.block) * table.block  # doubled past 2999, whole blocks


def test_rotary_types_that_rescale_with_the_length_keep_the_module() -> None:
    config = _config(32, rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    assert not static_rotary(LlamaRotaryEmbedding(config))


def test_the_decode_step_gives_the_same_logits_with_and_without_the_table() -> None:
    torch.manual_seed(5)
    model = LlamaForCausalLM(_config(32)).eval()
    with_table, without = llama_decoder(model, native=True), llama_decoder(model, native=True)
    assert with_table is not None and without is not None and with_table.rotary_table is not None
    without.rotary_table = None
    prompts = [[5, 9, 13, 200], [7, 8], [1, 2, 3, 4, 5, 6, 7]]  # padded: the mask is in play
    with torch.inference_mode():
        batches = [prefill(model, prompts, False).batch for _ in range(2)]
        for step in range(4):
            logits = [
                batch.step(model, decoder)
                for batch, decoder in zip(batches, (with_table, without), strict=True)
            ]
            assert torch.equal(logits[0], logits[1]), f"step {step}"
            for batch in batches:
                batch.pending_B = logits[0].argmax(dim=-1).tolist()
