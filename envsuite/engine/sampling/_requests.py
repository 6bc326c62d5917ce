"""What the sampling engine takes and gives: its limits, requests, results and errors (the contract of
``_engine``). All small, frozen and picklable."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from envsuite.constraints import Constraint, ConstraintOutcome
from envsuite.engine.kernels import ROW_BUCKETS
from envsuite.engine.sampling._token_choice import StopMatcher


class FinishReason(enum.StrEnum):
    """Why a sampled sequence ended (the values are Tinker's ``stop_reason`` strings)."""

    STOP = "stop"
    """A stop token or stop string was sampled (it is the last token of the sequence)."""
    LENGTH = "length"
    """``max_tokens`` (or the model context) was reached."""


class PromptTooLongError(ValueError):
    """The prompt leaves no room for a new token within the model context."""


class EngineClosedError(RuntimeError):
    """The engine was closed before the request finished."""


@dataclass(frozen=True)
class EngineConfig:
    """Limits of one sampling engine. Small and picklable; the engine is built from it."""

    max_batch_size: int = 64
    """Rows (samples) decoded together at most; further requests wait for free rows."""
    max_prefill_tokens: int = 16384
    """Padded prompt tokens per prefill pass at most (bounds activation memory)."""
    max_context: int | None = None
    """Prompt plus sampled tokens at most; None uses the model's ``max_position_embeddings``."""
    default_max_tokens: int = 1024
    """Token budget of requests whose ``SamplingParams.max_tokens`` is None."""
    idle_shutdown_s: float = 2.0
    """The engine thread exits after this long without work (it restarts on the next request)."""
    lean_decode: bool = True
    """Decode Llama-family models with the lean step (``_llama_decode``) instead of ``model(...)``."""
    onednn_products: bool = True
    """Run the model's matrix products through the kernels measured fastest on this machine
    (``product_path``) instead of ``F.linear`` on the model as loaded. The engine owns its frozen model:
    its linear layers become products on the layouts and kernels chosen (``lay_out_frozen_linears``),
    the same values up to float rounding. False keeps the model as loaded, with ``F.linear`` (the
    reference the tests compare against)."""
    reorder_weights: bool = True
    """Let a product hold its weight in another layout than the plain one (oneDNN's reordered blocks,
    envsuite's panels), in the plain one's place: memory stays the same. Weights the model shares with a
    training run stay plain; an LM head tied to the input embedding stays plain or takes the panels,
    which the embedding then reads its rows from. False: plain weights only (``F.linear``, oneDNN and
    envsuite's rows kernel on them)."""
    native_kernels: bool = True
    """Let the products use envsuite's native CPU kernels (``envsuite/engine/kernels/_native*.cpp``),
    built for this CPU with the host's C++ compiler on first use (once per machine, 5-60 s, then cached),
    and the lean step run its RMS norms and one-token attention through them, and the rows without
    truncation or top logprobs pick their tokens through them (with ``onednn_products``); where none can
    be built, torch's kernels serve alone."""
    captured_step: bool = True
    """Run a decode step's decoder layers as one native call (``torch.ops.envsuite.decode_layers``:
    the lean step's kernels in the same order, without Python between them; the same logits) where the
    native kernels are on and cover the model; False runs them operation by operation (the reference the
    tests compare against)."""
    product_path: str | None = None
    """None: each product shape runs the kernels measured fastest on this machine, per row count (a
    calibration of seconds to tens of seconds the first time, cached per CPU and library versions:
    ``kernel_cache``; ``envsuite doctor`` shows it).
    A path's name (``envsuite.engine.kernels.ProductPath``: ``f-linear``, ``onednn``,
    ``onednn-reordered``, ``rows``, ``panels``) runs that one everywhere (benchmarks, tests); it must be
    usable here and allowed by the flags above."""
    product_paths: tuple[str, ...] | None = None
    """The paths the calibration chooses among, by name (None: every usable one; ``F.linear`` where
    none of them is usable here). ``("f-linear", "onednn", "onednn-reordered")`` keeps the products on
    torch's kernels while the step's norms and attention still run the native ones."""
    kernel_cache: str | None = None
    """Where calibrations are cached; None: ``$ENVSUITE_KERNEL_CACHE``, else ``~/.cache/envsuite/kernels``."""
    prefix_cache_bytes: int = 1 << 30
    """KV of finished sequences kept for later prompts that extend them (multi-turn episodes), at most
    this many bytes (least recently used first out); 0 turns the prefix cache off."""
    min_prefix_reuse: int = 16
    """A cached prefix shorter than this many tokens is prefilled again (not worth a separate pass)."""
    max_fed_tail_tokens: int = 64
    """A request whose prompt extends a cached prefix by at most this many tokens, arriving while a batch
    is decoding, joins that batch holding only the cached prefix, and the next decode step feeds its
    tail in the same pass as the other rows' tokens (lean decode step only); longer tails, requests
    arriving at an idle engine and models without the lean step get a prefill pass of their own. A
    returning multi-turn episode so adds a few rows to one decode step instead of stalling the batch
    for a forward pass (docs/benchmarks.md). 0 prefills every tail."""
    max_kv_bytes: int | None = 256 << 20
    """KV cache of the running batch at most this many bytes when a request joins it: the batch is
    left-padded, so its KV is its row count times its longest row (times the model's bytes per
    position). A request that would take it over waits (and the requests behind it, first come first
    served) until rows leave; a request alone in an empty batch always runs. Rows grow by their sampled
    tokens after joining, so the batch can pass the budget by up to ``max_tokens`` positions per row.
    None turns the budget off."""


@dataclass(frozen=True)
class EngineRequest:
    """One sampling (or, with ``max_tokens == 0``, prompt-scoring) request, already validated."""

    prompt_T: tuple[int, ...]
    num_samples: int
    max_tokens: int
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    seed: int | None = None
    stop: StopMatcher = field(default_factory=lambda: StopMatcher.build(frozenset(), ()))
    prompt_logprobs: bool = False
    top_logprobs: int = 0
    """Also report, per sampled token, this many most likely tokens and their logprobs (0: none)."""
    constraint: Constraint | None = None
    """Every sample belongs to this language (``envsuite.constraints``; the engine's ``GrammarCompiler``
    compiles it when the request is submitted). None: free sampling."""


@dataclass(frozen=True)
class GeneratedSequence:
    tokens: list[int]
    logprobs: list[float]
    finish: FinishReason
    top_logprobs: list[list[tuple[int, float]]] | None = None
    """Per sampled token, the request's ``top_logprobs`` most likely ``(token, logprob)`` pairs, most
    likely first (see ``_token_choice`` for the distribution); None when the request asked for none."""
    constrained_logprobs: list[float] | None = None
    """Constrained requests: per sampled token, its logprob under the masked, renormalized distribution it
    was drawn from (``logprobs`` holds the one without the mask, which training compares against)."""
    constraint_outcome: ConstraintOutcome | None = None
    """Constrained requests: whether the tokens (less a final stop token) are a complete document."""


@dataclass(frozen=True)
class SampledToken:
    """One token as the engine samples it, for a request's ``on_token`` callback (streaming)."""

    sample_index: int
    """Which of the request's ``num_samples`` rows sampled it."""
    token: int
    logprob: float
    top: list[tuple[int, float]]
    """The most likely tokens at this position (empty unless the request asked for ``top_logprobs``)."""
    constrained_logprob: float | None = None
    """Constrained requests: the token's logprob under the masked distribution it was drawn from."""


@dataclass(frozen=True)
class EngineResult:
    sequences: list[GeneratedSequence]
    prompt_logprobs: list[float | None] | None
    prompt_cache_hit_tokens: int = 0
    """Prompt tokens served from the prefix cache instead of prefilled (counted once per request)."""


@dataclass(frozen=True)
class KVStats:
    """What the running batch's KV cache took, since the engine was made."""

    peak_admitted_bytes: int
    """Largest KV of the batch right after an admission (rows times longest row)."""
    peak_allocated_bytes: int
    """Largest size of the batch's buffers (live positions plus room), sampled after each admission."""
    budget_waits: int
    """Admissions that stopped short because the next request would have taken the KV over budget."""


@dataclass(frozen=True)
class DecodeStepPlan:
    """How an engine runs a decode step, as built for its model and this machine (``envsuite doctor``)."""

    lean: bool
    """The lean step (``_llama_decode``) instead of transformers' forward (Llama-family models)."""
    native_kernels: bool
    """Its norms, rotary embeddings, attention and SiLU through envsuite's native kernels."""
    captured: bool
    """Its whole layer stack as one native call (``decode_layers``; else operation by operation)."""
    native_sampling: bool
    """Rows without truncation or top logprobs pick their tokens in one native call (``sample_rows``)."""
    team_rows: tuple[int, ...] = ()
    """The row buckets (``ROW_BUCKETS``: up to that many rows) whose captured step runs as one team of
    threads, one parallel region for the whole step (every product on envsuite's panels there)."""

    def describe(self) -> str:
        """One line per part, saying what runs it."""
        if not self.lean:
            step = "transformers' forward (no lean step for this model or configuration)"
        elif self.captured and self.team_rows:
            step = (
                "the lean step, its layers and LM head as one native call (decode_layers), one parallel "
                f"region per step at {_row_counts(self.team_rows)} rows"
            )
        elif self.captured:
            step = "the lean step, its layers and LM head as one native call (decode_layers)"
        elif self.native_kernels:
            step = "the lean step, layer by layer through envsuite's native kernels"
        else:
            step = "the lean step, layer by layer through torch's kernels"
        sampling = (
            "one native call for rows without top-k, top-p or top logprobs (sample_rows); torch for the others"
            if self.native_sampling
            else "torch's operations (choose_tokens)"
        )
        return f"decode step: {step}\nnext-token choice: {sampling}"


def _row_counts(buckets: tuple[int, ...]) -> str:
    """Row buckets as row counts: ``1-256`` when they run from the first bucket on, else each one."""
    if buckets == ROW_BUCKETS[: len(buckets)]:
        return f"1-{buckets[-1]}"
    return ", ".join(f"up to {rows}" for rows in buckets)
