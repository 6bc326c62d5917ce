"""Constraints compiled to grammars, and each constrained row's grammar state (llguidance underneath).

A :class:`GrammarCompiler` belongs to one engine (one tokenizer and vocabulary width). It compiles a
:class:`~envsuite.constraints.Constraint` once per (tokenizer, constraint): the compiled grammars and the
tokenizer's llguidance form are cached process-wide, so the sampling clients a training run makes at
every step share them. A compiled grammar is a template matcher; every constrained row gets its own copy
(:class:`RowGrammar`), which tracks the tokens sampled so far. :func:`token_masks` gives the tokens each
constrained row of a batch may take next, computed for all of them in one call that runs outside the GIL.

Why llguidance rather than xgrammar (measured, docs/benchmarks.md "Constrained decoding"): it compiled
the schemas of ten real tool definitions 10-17 times faster (a request's schema is compiled on its
critical path), it refuses schema keywords a grammar cannot enforce where xgrammar ignored them (a
``uniqueItems`` array came out with duplicates), its Lark grammars embed JSON Schemas (a tool call's
arguments inside the model family's call markup), and it is an 8 MB wheel with no dependencies (xgrammar
pulls triton, about 1 GB). Per-token masks took about as long with either (7-8 microseconds, median),
far below a decode step.

End tokens: a row's stop tokens (``SamplingParams.stop`` ids, the end-of-sequence tokens by default) are
never content. They are allowed exactly where the grammar accepts the text so far, and sampling one ends
the row with a complete document. Where the grammar admits nothing more and the row has no stop token,
the row ends there (nothing left to sample). The tokenizer's own end-of-sequence token is allowed only
as one of the row's stop tokens.
"""

from __future__ import annotations

import hashlib
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from copy import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from envsuite.constraints import JSON_LAYOUT, Constraint, ConstraintError, ConstraintKind, ConstraintOutcome

if TYPE_CHECKING:
    from llguidance import LLExecutor, LLMatcher, LLTokenizer
    from llguidance._lib import JsonCompileOptions
    from transformers import PreTrainedTokenizerBase

MAX_CACHED_GRAMMARS = 512
"""Compiled grammars kept process-wide (least recently used first out)."""
_INSTALL_HINT = "constrained sampling needs llguidance: pip install 'envsuite[constrained]'"

_lock = threading.Lock()
_tokenizers: dict[str, LLTokenizer] = {}
"""llguidance tokenizers by fingerprint (the tokenizer's serialized form and the vocabulary width)."""
_fingerprints: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_compiled: OrderedDict[tuple[str, Constraint], CompiledGrammar] = OrderedDict()
_executor: list[LLExecutor] = []


@dataclass(frozen=True)
class CompiledGrammar:
    """A constraint compiled for one tokenizer: a template matcher that rows copy."""

    constraint: Constraint
    template: LLMatcher
    tokenizer_eos: frozenset[int]
    """The tokenizer's end-of-sequence tokens, which llguidance allows where the grammar accepts."""
    compile_s: float
    """Seconds the compilation took."""

    def row(self, end_tokens: frozenset[int]) -> RowGrammar:
        """A fresh state for one row that ends at ``end_tokens`` (its stop tokens)."""
        return RowGrammar(self.template.deep_copy(), end_tokens, end_tokens | self.tokenizer_eos)


class GrammarCompiler:
    """Compiles constraints for one tokenizer and logits width; safe from any thread."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, vocab_size: int) -> None:
        self._tokenizer = tokenizer
        self.vocab_size = vocab_size

    def compile(self, constraint: Constraint) -> CompiledGrammar:
        """The compiled grammar of ``constraint`` (cached); :class:`ConstraintError` if it is refused."""
        if not isinstance(constraint, Constraint):
            raise ConstraintError(f"a constraint is an envsuite Constraint, got {type(constraint).__name__}")
        tokenizer, fingerprint = self._llg_tokenizer()
        key = (fingerprint, constraint)
        with _lock:
            hit = _compiled.get(key)
            if hit is not None:
                _compiled.move_to_end(key)
                return hit
        compiled = _compile(tokenizer, constraint)
        with _lock:
            _compiled[key] = compiled
            while len(_compiled) > MAX_CACHED_GRAMMARS:
                _compiled.popitem(last=False)
        return compiled

    def _llg_tokenizer(self) -> tuple[LLTokenizer, str]:
        try:
            import llguidance
        except ImportError:
            raise ConstraintError(_INSTALL_HINT) from None
        with _lock:
            fingerprint = _fingerprints.get(self._tokenizer)
            if fingerprint is not None and fingerprint in _tokenizers:
                return _tokenizers[fingerprint], fingerprint
        serialized = _serialized(self._tokenizer)
        digest = hashlib.sha256(serialized.encode()).hexdigest()
        fingerprint = f"{digest}:{self.vocab_size}"
        with _lock:
            _fingerprints[self._tokenizer] = fingerprint
            if fingerprint not in _tokenizers:
                eos = self._tokenizer.eos_token_id
                _tokenizers[fingerprint] = llguidance.LLTokenizer(
                    serialized, n_vocab=self.vocab_size, eos_token=eos if isinstance(eos, int) else None
                )
            return _tokenizers[fingerprint], fingerprint


def _serialized(tokenizer: PreTrainedTokenizerBase) -> str:
    """The tokenizer's Rust form as JSON (what llguidance reads), without padding or truncation."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ConstraintError(
            f"constrained sampling needs a fast (Rust) tokenizer; {type(tokenizer).__name__} is not one"
        )
    backend = copy(backend)
    backend.no_padding()
    backend.no_truncation()
    return str(backend.to_str())


def _grammar_text(constraint: Constraint) -> str:
    from llguidance import LLMatcher, grammar_from

    kind = constraint.kind
    if kind is ConstraintKind.JSON_SCHEMA:
        return LLMatcher.grammar_from_json_schema(
            constraint.spec, defaults=cast("JsonCompileOptions", JSON_LAYOUT)
        )
    if kind is ConstraintKind.REGEX:
        return LLMatcher.grammar_from_regex(constraint.spec)
    if kind is ConstraintKind.CHOICE:
        return grammar_from("choice", constraint.spec)
    try:
        return grammar_from("grammar", constraint.spec)
    except ValueError as exc:
        raise ConstraintError(f"the grammar is not valid Lark or GBNF: {exc}") from None


def _compile(tokenizer: LLTokenizer, constraint: Constraint) -> CompiledGrammar:
    from llguidance import LLMatcher

    started = time.perf_counter()
    try:
        text = _grammar_text(constraint)
    except ValueError as exc:
        raise ConstraintError(f"{constraint.kind.value} constraint refused: {exc}") from None
    error = LLMatcher.validate_grammar(text, tokenizer)
    if error:
        raise ConstraintError(f"{constraint.kind.value} constraint refused: {error.strip()}")
    template = LLMatcher(tokenizer, text, log_level=0)
    if template.is_error():
        raise ConstraintError(f"{constraint.kind.value} constraint refused: {template.get_error()}")
    eos = frozenset(int(t) for t in tokenizer.eos_tokens)
    return CompiledGrammar(constraint, template, eos, time.perf_counter() - started)


@dataclass
class RowGrammar:
    """One constrained row's grammar state: its matcher over the tokens sampled so far, and its end tokens."""

    matcher: LLMatcher
    end_tokens: frozenset[int]
    """The row's stop tokens: allowed only where the grammar accepts, never consumed as content."""
    never_content: frozenset[int]
    """The end tokens and the tokenizer's end-of-sequence ones: cleared from the grammar's mask."""
    ended: bool = False
    """The row sampled an end token, or the grammar admits nothing more and the row has no end token."""
    failed: bool = False
    """No token could continue the text (not expected from a grammar llguidance accepted)."""

    @property
    def accepting(self) -> bool:
        """The text so far (less an end token) is a complete document."""
        return not self.failed and self.matcher.is_accepting()

    @property
    def outcome(self) -> ConstraintOutcome:
        return ConstraintOutcome.COMPLETE if self.accepting else ConstraintOutcome.INCOMPLETE

    def advance(self, token: int) -> None:
        """Take the token the row sampled (one its mask allowed)."""
        if token in self.end_tokens:
            self.ended = True
        elif not self.matcher.consume_token(token):
            self.dead_end()
        elif not self.end_tokens and self.matcher.is_stopped():
            self.ended = True

    def dead_end(self) -> None:
        """No token can continue the text: the row ends, incomplete."""
        self.failed = self.ended = True


_BYTE_BIAS = torch.tensor(
    [[0.0 if byte >> bit & 1 else float("-inf") for bit in range(8)] for byte in range(256)]
)
"""Row ``b``: the additive logit bias of the 8 tokens whose mask bits are byte ``b`` (0 allowed, -inf not)."""


@dataclass(frozen=True)
class TokenMasks:
    """The tokens each constrained row of a batch may take next, as llguidance's packed bits."""

    rows: list[int]
    """The constrained rows' indices in the batch, in order."""
    bits_C_W: torch.Tensor
    """int32, one row per entry of ``rows``: bit ``j`` of word ``w`` allows token ``32 w + j``. Every
    row allows at least one token."""
    vocab_size: int
    dead: list[int]
    """Batch indices of constrained rows no token can continue: their rows allow every token, so the
    sampler stays well-defined, and the engine ends them without taking the token."""

    def bias(self) -> torch.Tensor:
        """(C, V) float32: 0 for allowed tokens, -inf for the others (added to the logits). Built by
        looking up each byte of the bits: one pass, as fast for any pattern (``torch.where`` on a bool
        mask took 6 times as long on scattered bits)."""
        bytes_flat = self.bits_C_W.view(torch.uint8).flatten().int()
        bias = _BYTE_BIAS.index_select(0, bytes_flat).view(len(self.rows), -1)
        return bias[:, : self.vocab_size]

    def allowed(self) -> torch.Tensor:
        """(C, V) bool: the allowed tokens."""
        return self.bias() == 0


def token_masks(grammars: Sequence[RowGrammar | None], vocab_size: int) -> TokenMasks | None:
    """The next-token masks of the constrained rows among ``grammars`` (a batch's rows; None: free)."""
    rows = [i for i, grammar in enumerate(grammars) if grammar is not None]
    if not rows:
        return None
    from llguidance.torch import fill_next_token_bitmask, fill_next_token_bitmask_par

    states = [grammar for grammar in grammars if grammar is not None]
    bits_C_W = torch.empty((len(rows), (vocab_size + 31) // 32), dtype=torch.int32)  # llguidance fills it
    if len(states) == 1:  # one row: no hand-off to the executor's threads
        fill_next_token_bitmask(states[0].matcher, bits_C_W, 0)
    else:
        matchers = [(state.matcher, position) for position, state in enumerate(states)]
        fill_next_token_bitmask_par(_shared_executor(), matchers, bits_C_W)
    words = bits_C_W.numpy().view(np.uint32)
    for position, state in enumerate(states):
        _set_bits(words[position], state.never_content, vocab_size, False)
        if state.end_tokens and state.accepting:
            _set_bits(words[position], state.end_tokens, vocab_size, True)
    dead_positions = np.flatnonzero(~words.any(axis=1)).tolist()
    words[dead_positions] = np.uint32(0xFFFFFFFF)
    return TokenMasks(rows, bits_C_W, vocab_size, [rows[p] for p in dead_positions])


def _set_bits(words: np.ndarray, tokens: frozenset[int], vocab_size: int, on: bool) -> None:
    """Set (``on``) or clear the bits of ``tokens`` in one row's mask words, in place (a few tokens a row:
    plain integer operations beat numpy's indexed ones here)."""
    for token in tokens:
        if token < vocab_size:
            word, bit = token >> 5, 1 << (token & 31)
            words[word] = int(words[word]) | bit if on else int(words[word]) & ~bit & 0xFFFFFFFF


def _shared_executor() -> LLExecutor:
    from llguidance import LLExecutor

    with _lock:
        if not _executor:
            _executor.append(LLExecutor())
        return _executor[0]
