"""The trained model's log-probability of every target token of a :class:`TokenBatch`, in bounded memory.

The unembedding is the memory hog of a training pass: ``positions x vocab`` fp32 logits (49,152 columns
for SmolLM2, 197 KB per position), and autograd keeps both the logits and their log-softmax until the
backward pass, so a batch of 5,000 distinct positions (a few multi-turn episodes) would hold 2 GB for
the head alone. Here the head runs in chunks of :data:`LOGIT_ROWS` positions, and under autograd each
chunk is checkpointed (``torch.utils.checkpoint``): only the chunk's picked logprobs are kept, and the
backward pass recomputes the chunk's logits. Recomputing runs the same operations on the same inputs,
so logprobs and gradients are those of the plain computation (tested); the cost is one more head
matmul per chunk in the backward pass.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from envsuite.engine.training._batch import TokenBatch

LOGIT_ROWS = 256
"""Positions per unembedding chunk: about 50 MB of fp32 logits for a 49k vocabulary."""


def target_logprobs(lm: Any, batch: TokenBatch, *, checkpoint_head: bool = True) -> torch.Tensor:
    """log p(target) at every datum position, datum after datum (``batch.hidden_index_N`` order).

    ``lm`` is a causal LM (``get_decoder()`` and ``get_output_embeddings()``). The unembedding runs once
    per distinct hidden state (a shared prefix column serves every datum whose path crosses it).
    ``checkpoint_head=False`` keeps every chunk's logits for the backward pass (the reference path).
    """
    hidden = lm.get_decoder()(
        input_ids=batch.input_ids_RW,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids_RW,
        use_cache=False,
    ).last_hidden_state
    hidden_flat = hidden.reshape(-1, hidden.shape[-1])
    states_M, state_of_N = torch.unique(batch.hidden_index_N, return_inverse=True)
    head: torch.nn.Module = lm.get_output_embeddings()
    recompute = checkpoint_head and torch.is_grad_enabled()
    values, where = [], []
    for start in range(0, states_M.shape[0], LOGIT_ROWS):
        rows = states_M[start : start + LOGIT_ROWS]
        in_chunk = ((state_of_N >= start) & (state_of_N < start + LOGIT_ROWS)).nonzero().squeeze(1)
        local, targets = state_of_N[in_chunk] - start, batch.targets_N[in_chunk]
        if recompute:
            picked = checkpoint(_chunk_logprobs, head, hidden_flat, rows, local, targets, use_reentrant=False)
        else:
            picked = _chunk_logprobs(head, hidden_flat, rows, local, targets)
        assert isinstance(picked, torch.Tensor)
        values.append(picked)
        where.append(in_chunk)
    picked_all = torch.cat(values)
    return picked_all.new_zeros(batch.num_tokens).scatter(0, torch.cat(where), picked_all)


def _chunk_logprobs(
    head: torch.nn.Module,
    hidden_flat: torch.Tensor,
    rows: torch.Tensor,
    local: torch.Tensor,
    targets: torch.Tensor,
) -> torch.Tensor:
    logprobs = torch.log_softmax(head(hidden_flat.index_select(0, rows)), dim=-1)
    return logprobs[local, targets]
