"""Next-token choice for a batch of rows with their own sampling settings, and stop detection.

Each row carries its own ``torch.Generator``: a row's random draws never depend on which other rows
share the batch, and nothing touches torch's global RNG. Sampling is inverse-CDF: one uniform draw per
row from its generator, then batched ``searchsorted`` over the cumulative weights, found block by block
of the vocabulary (:func:`_inverse_cdf`). With ``native`` (the engine's native kernels are loaded), the
rows that need no truncation and no top logprobs (:attr:`RowSampling.plain`) take the same steps in one
call, ``torch.ops.envsuite.sample_rows`` (``envsuite/engine/kernels/_native_sampling.cpp``): the same
draw from the same generator, the same distribution; a token can differ from torch's way only where the
draw falls within float rounding of a boundary between two tokens.

Reported logprobs (documented in docs/backend_sampling.md): for ``temperature > 0`` the logprob of the
chosen token under the distribution it was sampled from (logits / temperature, then top-k and top-p
truncation, renormalized), as the hosted Tinker sampler reports it. With ``temperature == 1``,
``top_k == -1`` and ``top_p == 1`` that is exactly the model's own log-softmax, which is what a
training forward pass computes. Greedy rows (``temperature == 0``) report the model's own logprob
(temperature-1 log-softmax), since the greedy distribution is degenerate. A row that asks for its
``top_logprobs`` most likely tokens gets them under that same distribution, most likely first, so the
chosen token's logprob is the one listed for it; tokens the truncation removed (probability 0) are
left out, so such a list can be shorter than asked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from envsuite.engine.sampling._grammar import TokenMasks


@dataclass(frozen=True)
class RowSampling:
    """How one row picks its next token."""

    temperature: float
    top_k: int
    top_p: float
    generator: torch.Generator | None
    """None exactly for greedy rows (temperature 0)."""
    top_logprobs: int = 0
    """How many of the most likely tokens to report with their logprobs (0: none)."""

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def untruncated(self) -> bool:
        """No top-k or top-p truncation."""
        return self.top_k <= 0 and self.top_p >= 1.0

    @property
    def plain(self) -> bool:
        """No truncation (top-k, top-p) and no top logprobs to report: what ``sample_rows`` covers."""
        return (self.greedy or self.untruncated) and self.top_logprobs == 0


@dataclass(frozen=True)
class TokenChoice:
    """The tokens chosen for a batch of rows (``_B``) and their logprobs."""

    tokens_B: list[int]
    logprobs_B: list[float]
    top_B: list[list[tuple[int, float]]] | None = None
    """Per row, its ``top_logprobs`` most likely ``(token, logprob)`` pairs (empty for rows that asked
    for none); None when no row asked."""
    constrained_B: list[float | None] | None = None
    """Per row, the chosen token's logprob under the masked distribution it was drawn from (None for
    free rows); None when no row was constrained. ``logprobs_B`` holds the unmasked one."""


def row_seed(seed: int, sample_index: int) -> int:
    """The generator seed of sample ``sample_index`` of a request seeded with ``seed`` (63-bit)."""
    digest = hashlib.blake2b(repr((seed, sample_index)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def make_generator(seed: int) -> torch.Generator:
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


def choose_tokens(
    logits_B_V: torch.Tensor,
    rows: Sequence[RowSampling],
    native: bool = False,
    masks: TokenMasks | None = None,
) -> TokenChoice:
    """Pick one token per row of ``logits_B_V`` (float32, on any device) following each row's settings;
    with ``native`` (the caller loaded envsuite's native kernels), plain rows on the CPU in one call.
    The rows ``masks`` names pick among their allowed tokens only (:func:`_choose_masked`); the others
    are chosen exactly as without them."""
    logits_B_V = logits_B_V.float()
    native = native and logits_B_V.device.type == "cpu"
    if masks is None and native and all(row.plain for row in rows):  # the usual batch: one call
        tokens, logprobs = _sample_plain(logits_B_V, rows)
        return TokenChoice(tokens_B=tokens.tolist(), logprobs_B=logprobs.tolist())
    n_rows = logits_B_V.shape[0]
    top_B: list[list[tuple[int, float]]] = [[] for _ in rows]
    tokens_B = torch.empty(n_rows, dtype=torch.long, device=logits_B_V.device)
    logprobs_B = torch.empty(n_rows, dtype=torch.float32, device=logits_B_V.device)
    masked = set(masks.rows) if masks is not None else set()
    free = [i for i in range(n_rows) if i not in masked]
    plain_idx = [i for i in free if native and rows[i].plain]
    greedy_idx = [i for i in free if rows[i].greedy and not (native and rows[i].plain)]
    sample_idx = [i for i in free if not rows[i].greedy and not (native and rows[i].plain)]

    def rows_of(indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.tensor(indices, device=logits_B_V.device)
        return index, logits_B_V.index_select(0, index) if len(indices) < n_rows else logits_B_V

    if plain_idx:
        index, logits = rows_of(plain_idx)
        tokens_B[index], logprobs_B[index] = _sample_plain(logits, [rows[i] for i in plain_idx])
    if greedy_idx:
        index, logits = rows_of(greedy_idx)
        chosen = logits.argmax(dim=-1)
        tokens_B[index] = chosen
        logprobs_B[index] = _gather_logprobs(logits, chosen)
        _top_of(top_B, greedy_idx, rows, logits, torch.logsumexp(logits, dim=-1))
    if sample_idx:
        index, logits = rows_of(sample_idx)
        sampled = _sample_rows(logits, [rows[i] for i in sample_idx])
        tokens_B[index] = sampled.tokens_B
        logprobs_B[index] = sampled.logprobs_B
        _top_of(top_B, sample_idx, rows, sampled.scaled_B_V, sampled.log_norm_B)
    constrained_B: list[float | None] | None = None
    if masks is not None:
        index, logits = rows_of(masks.rows)
        masked_rows = [rows[i] for i in masks.rows]
        chosen_masked = None
        if native and all(row.plain for row in masked_rows):
            chosen_masked = _choose_masked_native(logits, masked_rows, masks.bits_C_W)
        if chosen_masked is None:
            chosen_masked = _choose_masked(logits, masked_rows, masks.bias(), native)
            scaled_C_V, log_norm_C = chosen_masked.scaled_C_V, chosen_masked.log_norm_C
            assert scaled_C_V is not None and log_norm_C is not None  # torch's way keeps them
            _top_of(top_B, masks.rows, rows, scaled_C_V, log_norm_C)
        tokens_B[index] = chosen_masked.tokens_C
        logprobs_B[index] = chosen_masked.logprobs_C
        constrained_B = [None] * n_rows
        for position, i in enumerate(masks.rows):
            constrained_B[i] = float(chosen_masked.constrained_C[position])
    return TokenChoice(
        tokens_B=tokens_B.tolist(),
        logprobs_B=logprobs_B.tolist(),
        top_B=top_B if any(row.top_logprobs > 0 for row in rows) else None,
        constrained_B=constrained_B,
    )


@dataclass(frozen=True)
class _MaskedChoice:
    """Constrained rows' tokens, their logprobs without and under the mask, and the unmasked distribution."""

    tokens_C: torch.Tensor
    logprobs_C: torch.Tensor
    """Under the row's distribution without the mask: ``logits / temperature`` (1 for greedy rows),
    log-softmax over the whole vocabulary, no truncation."""
    constrained_C: torch.Tensor
    """Under the distribution the token was drawn from: the mask, then temperature, top-k and top-p
    within the allowed tokens, renormalized (greedy rows: temperature 1, no truncation)."""
    scaled_C_V: torch.Tensor | None
    """The scaled rows and their log-normalizers, for top logprobs (None from the native kernel, which
    takes only rows that report none)."""
    log_norm_C: torch.Tensor | None


def _choose_masked(
    logits_C_V: torch.Tensor, rows: Sequence[RowSampling], bias_C_V: torch.Tensor, native: bool
) -> _MaskedChoice:
    """Constrained rows: the logits plus each row's mask bias (-inf outside its allowed set), then the same choice as a
    free row's on them (each sampled row one draw from its generator). With ``native``, untruncated rows
    choose through ``sample_rows`` and the normalizers of the unmasked distributions come from it too
    (a greedy call reports the top token's logprob, ``max - log_norm``); the others take torch's way.

    The mask comes before truncation, so top-k and top-p pick among allowed tokens (truncating first
    could leave none). Both logprobs are reported; which one training uses, and why, is in
    docs/backend_sampling.md ("Constrained sampling").
    """
    device = logits_C_V.device
    temperatures = [1.0 if row.greedy else row.temperature for row in rows]
    scaled_C_V = logits_C_V
    if any(t != 1.0 for t in temperatures):
        scaled_C_V = logits_C_V / torch.tensor(temperatures, device=device)[:, None]
    bias_C_V = bias_C_V.to(device)
    masked_C_V = logits_C_V + bias_C_V
    tokens_C = torch.empty(len(rows), dtype=torch.long, device=device)
    constrained_C = torch.empty(len(rows), dtype=torch.float32, device=device)
    fast = [i for i, row in enumerate(rows) if native and (row.greedy or row.untruncated)]
    redo: list[int] = []
    if fast:
        index = torch.tensor(fast, device=device)
        picked = masked_C_V.index_select(0, index) if len(fast) < len(rows) else masked_C_V
        tokens_C[index], constrained_C[index] = _sample_plain(picked, [rows[i] for i in fast])
        # The native exp has a floor (e^-87.3), so a masked token keeps a weight near 1e-38: a draw could
        # land on one with a probability near 1e-33. Such a row is drawn again through torch.
        landed = bias_C_V[index, tokens_C[index]] == 0
        redo = [fast[k] for k in (~landed).nonzero().flatten().tolist()]
    slow = sorted((set(range(len(rows))) - set(fast)) | set(redo))
    _choose_masked_torch(masked_C_V, rows, slow, tokens_C, constrained_C)
    if native:
        top, top_logprobs = _sample_plain(scaled_C_V, [replace(row, temperature=0.0) for row in rows])
        log_norm_C = scaled_C_V.gather(1, top[:, None]).squeeze(1) - top_logprobs
    else:
        log_norm_C = torch.logsumexp(scaled_C_V, dim=-1)
    logprobs_C = scaled_C_V.gather(1, tokens_C[:, None]).squeeze(1) - log_norm_C
    return _MaskedChoice(tokens_C, logprobs_C, constrained_C, scaled_C_V, log_norm_C)


def _choose_masked_native(
    logits_C_V: torch.Tensor, rows: Sequence[RowSampling], bits_C_W: torch.Tensor
) -> _MaskedChoice | None:
    """Plain constrained rows in one native call (``sample_masked_rows``: the mask read from its bits in
    the same passes that sum the row, no bias tensor): tokens, both logprobs. None where a row's allowed
    tokens all lie so far below its best token that their weights may round off (the kernel flags it):
    the caller then takes :func:`_choose_masked`'s way for the batch. Each sampled row has drawn once."""
    temperatures = [max(row.temperature, 0.0) for row in rows]
    draws = [1.0 if row.greedy else _draw(row) for row in rows]
    tokens_C, logprobs_C, constrained_C, fallback_C = torch.ops.envsuite.sample_masked_rows(
        logits_C_V,
        torch.tensor(temperatures, dtype=torch.float32),
        torch.tensor(draws, dtype=torch.float32),
        bits_C_W,
    )
    if bool(fallback_C.any()):
        return None
    return _MaskedChoice(tokens_C, logprobs_C, constrained_C, None, None)


def _choose_masked_torch(
    masked_C_V: torch.Tensor,
    rows: Sequence[RowSampling],
    indices: list[int],
    tokens_C: torch.Tensor,
    constrained_C: torch.Tensor,
) -> None:
    """Constrained rows ``indices`` through torch's operations, into ``tokens_C`` and ``constrained_C``."""
    device = masked_C_V.device
    greedy = [i for i in indices if rows[i].greedy]
    sampled = [i for i in indices if not rows[i].greedy]
    if greedy:
        index = torch.tensor(greedy, device=device)
        picked = masked_C_V.index_select(0, index)
        chosen = picked.argmax(dim=-1)
        tokens_C[index] = chosen
        constrained_C[index] = _gather_logprobs(picked, chosen)
    if sampled:
        index = torch.tensor(sampled, device=device)
        drawn = _sample_rows(masked_C_V.index_select(0, index), [rows[i] for i in sampled])
        tokens_C[index] = drawn.tokens_B
        constrained_C[index] = drawn.logprobs_B


def _sample_plain(logits_R_V: torch.Tensor, rows: Sequence[RowSampling]) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens and logprobs of plain rows through ``sample_rows``: each sampled row's one draw, as
    :func:`_sample_rows` takes it (greedy rows draw nothing)."""
    temperatures = [max(row.temperature, 0.0) for row in rows]
    draws = [1.0 if row.greedy else _draw(row) for row in rows]
    tokens_R, logprobs_R = torch.ops.envsuite.sample_rows(
        logits_R_V, torch.tensor(temperatures, dtype=torch.float32), torch.tensor(draws, dtype=torch.float32)
    )
    return tokens_R, logprobs_R


def _draw(row: RowSampling) -> float:
    """One draw in (0, 1] from the row's own generator; a draw of exactly 0 could land on a leading
    zero-probability token, 1 - U(0, 1] cannot."""
    return 1.0 - float(torch.rand((), generator=row.generator).item())


def _top_of(
    top_B: list[list[tuple[int, float]]],
    indices: list[int],
    rows: Sequence[RowSampling],
    scaled_R_V: torch.Tensor,
    log_norm_R: torch.Tensor,
) -> None:
    """Fill ``top_B`` for the rows among ``indices`` that ask: the largest entries of each row's
    log-distribution ``scaled - log_norm`` (``scaled_R_V`` holds the rows of ``indices``, in order)."""
    for position, row_index in enumerate(indices):
        k = rows[row_index].top_logprobs
        if k <= 0:
            continue
        best = torch.topk(scaled_R_V[position], min(k, scaled_R_V.shape[1]))
        norm = float(log_norm_R[position])
        top_B[row_index] = [
            (int(token), float(value) - norm)
            for token, value in zip(best.indices.tolist(), best.values.tolist(), strict=True)
            if value != float("-inf")
        ]


def _gather_logprobs(logits_B_V: torch.Tensor, tokens_B: torch.Tensor) -> torch.Tensor:
    # logsumexp over the row avoids materializing a second (B, V) log-softmax tensor.
    picked = logits_B_V.gather(1, tokens_B[:, None]).squeeze(1)
    return picked - torch.logsumexp(logits_B_V, dim=-1)


@dataclass(frozen=True)
class _SampledRows:
    """Sampled rows' tokens and logprobs, and the distribution they came from (``scaled - log_norm``)."""

    tokens_B: torch.Tensor
    logprobs_B: torch.Tensor
    scaled_B_V: torch.Tensor
    """Logits after temperature and truncation (removed tokens at -inf)."""
    log_norm_B: torch.Tensor


def _sample_rows(logits_B_V: torch.Tensor, rows: Sequence[RowSampling]) -> _SampledRows:
    device = logits_B_V.device
    temperatures = torch.tensor([row.temperature for row in rows], dtype=torch.float32, device=device)
    scaled_B_V = logits_B_V if bool((temperatures == 1.0).all()) else logits_B_V / temperatures[:, None]
    if any(row.top_k > 0 for row in rows):
        scaled_B_V = _apply_top_k(scaled_B_V, [row.top_k for row in rows])
    if any(row.top_p < 1.0 for row in rows):
        scaled_B_V = _apply_top_p(scaled_B_V, [row.top_p for row in rows])
    # Unnormalized probabilities relative to each row's largest logit; the log normalizer is
    # max + log(sum), as logsumexp computes it.
    max_B = scaled_B_V.amax(dim=-1, keepdim=True)
    weights_B_V = (scaled_B_V - max_B).exp_()
    uniform_B = torch.tensor([_draw(row) for row in rows], dtype=torch.float32, device=device)
    chosen_B, total_B = _inverse_cdf(weights_B_V, uniform_B)
    # Rounding in the cumulative sums can put the target just past the last token with mass (onto a
    # masked one after it); step back to that token. Rare, so done row by row.
    masked = weights_B_V.gather(1, chosen_B[:, None]).squeeze(1) <= 0
    for row in masked.nonzero().flatten().tolist():
        live = (weights_B_V[row, : int(chosen_B[row]) + 1] > 0).nonzero()
        chosen_B[row] = live[-1, 0] if len(live) else (weights_B_V[row] > 0).nonzero()[0, 0]
    log_norm_B = max_B.squeeze(1) + total_B.log()
    logprobs_B = scaled_B_V.gather(1, chosen_B[:, None]).squeeze(1) - log_norm_B
    return _SampledRows(chosen_B, logprobs_B, scaled_B_V, log_norm_B)


_BLOCK_SIZES = (256, 128, 64)
"""Vocabulary block widths for :func:`_inverse_cdf`, tried in order (the first that divides it)."""


def _inverse_cdf(weights_B_V: torch.Tensor, uniform_B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's token whose cumulative weight first reaches ``uniform * total``, and the totals.

    A full cumulative sum over a 49k vocabulary is a serial scan per row and was the largest part of a
    64-row sampling step; summing blocks of the vocabulary (vectorized), scanning the block sums, and
    then scanning only the chosen block gives the same token up to float rounding in the sums.
    """
    rows, vocab = weights_B_V.shape
    block = next((size for size in _BLOCK_SIZES if vocab % size == 0 and vocab > size), None)
    if block is None:  # no block width divides the vocabulary: one scan over the whole row
        cdf_B_V = weights_B_V.cumsum(dim=-1)
        total_B = cdf_B_V[:, -1]
        chosen = torch.searchsorted(cdf_B_V, (uniform_B * total_B)[:, None]).squeeze(1)
        return chosen.clamp_(max=vocab - 1), total_B
    blocks_B_K_C = weights_B_V.view(rows, vocab // block, block)
    block_cdf_B_K = blocks_B_K_C.sum(dim=-1).cumsum(dim=-1)
    total_B = block_cdf_B_K[:, -1]
    target_B = uniform_B * total_B
    block_B = torch.searchsorted(block_cdf_B_K, target_B[:, None]).squeeze(1).clamp_(max=vocab // block - 1)
    before_B = torch.where(
        block_B > 0, block_cdf_B_K.gather(1, (block_B - 1).clamp(min=0)[:, None]).squeeze(1), 0.0
    )
    row_index = torch.arange(rows, device=weights_B_V.device)
    inner_cdf_B_C = blocks_B_K_C[row_index, block_B].cumsum(dim=-1)
    inner_B = torch.searchsorted(inner_cdf_B_C, (target_B - before_B)[:, None]).squeeze(1)
    return block_B * block + inner_B.clamp_(max=block - 1), total_B


def _apply_top_k(scaled_B_V: torch.Tensor, top_k_B: list[int]) -> torch.Tensor:
    vocab = scaled_B_V.shape[1]
    ks = [min(k, vocab) if k > 0 else vocab for k in top_k_B]
    kth_values = torch.topk(scaled_B_V, max(ks), dim=-1).values
    index = torch.tensor([k - 1 for k in ks], device=scaled_B_V.device)
    threshold_B = kth_values.gather(1, index[:, None])
    unlimited = torch.tensor([k <= 0 for k in top_k_B], device=scaled_B_V.device)
    keep = (scaled_B_V >= threshold_B) | unlimited[:, None]
    return scaled_B_V.masked_fill(~keep, float("-inf"))


def _apply_top_p(scaled_B_V: torch.Tensor, top_p_B: list[float]) -> torch.Tensor:
    sorted_B_V, order_B_V = scaled_B_V.sort(dim=-1, descending=True)
    probs_B_V = torch.softmax(sorted_B_V, dim=-1)
    mass_before_B_V = probs_B_V.cumsum(dim=-1) - probs_B_V
    top_p = torch.tensor(top_p_B, dtype=probs_B_V.dtype, device=scaled_B_V.device)
    # A token stays while the mass of the tokens ranked above it is below top_p, so the top token
    # always stays and the kept set is the smallest prefix reaching top_p. A row without a nucleus
    # (top_p 1) keeps every token: the rounding of its cumulative sum can reach 1 before its tail, and
    # its tokens must not depend on whether a row with a nucleus shares its batch.
    drop_sorted = (mass_before_B_V >= top_p[:, None]) & (top_p[:, None] < 1.0)
    drop = torch.zeros_like(drop_sorted).scatter(1, order_B_V, drop_sorted)
    return scaled_B_V.masked_fill(drop, float("-inf"))


class StopMatcher:
    """Decides whether a row's generated tokens end in one of its stop conditions."""

    def __init__(self, stop_token_ids: frozenset[int], stop_strings: tuple[str, ...], decode_window: int):
        self.stop_token_ids = stop_token_ids
        self.stop_strings = stop_strings
        self._decode_window = decode_window

    @classmethod
    def build(cls, stop_token_ids: frozenset[int], stop_strings: tuple[str, ...]) -> StopMatcher:
        # A stop string spans at most one token per character, plus a few tokens that may each hold
        # only part of a multi-byte character.
        longest = max((len(s) for s in stop_strings), default=0)
        return cls(stop_token_ids, stop_strings, decode_window=longest + 4)

    def is_stop(self, generated_T: list[int], decode: Callable[[list[int]], str]) -> bool:
        """True when the last token is a stop token or completes a stop string."""
        if generated_T and generated_T[-1] in self.stop_token_ids:
            return True
        if not self.stop_strings or not generated_T:
            return False
        tail = decode(generated_T[-self._decode_window :])
        return any(s in tail for s in self.stop_strings)
