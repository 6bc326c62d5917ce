"""Top-k logprobs in the SDK's shape, shared by the backends that sample (local engine, vLLM)."""

from __future__ import annotations

import numpy as np
from tinker.types.topk_logprobs import MASK_LOGPROB, TopkLogprobs


def topk_matrices(top_T: list[list[tuple[int, float]]]) -> TopkLogprobs:
    """Per-position top-k lists (token id, logprob; most likely first) as the SDK's dense matrices, short
    rows padded with its sentinel, so both backends answer ``topk_sample_logprobs`` alike."""
    k = max((len(row) for row in top_T), default=0)
    token_ids = np.zeros((len(top_T), k), dtype=np.int32)
    logprobs = np.full((len(top_T), k), MASK_LOGPROB, dtype=np.float32)
    for position, row in enumerate(top_T):
        for rank, (token, logprob) in enumerate(row):
            token_ids[position, rank], logprobs[position, rank] = token, logprob
    return TopkLogprobs(token_ids=token_ids, logprobs=logprobs)
