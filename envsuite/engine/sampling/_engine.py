"""The sampling engine: one background thread that owns a model and batches every request it is given.

Requests come from any thread or event loop through :meth:`SamplingEngine.submit` and are answered
through ``concurrent.futures.Future`` objects. The engine thread loops over three moves:

1. **collect** new requests (blocking only while nothing is running);
2. **admit** waiting requests into the running batch: their prompts are prefilled together in one
   left-padded forward pass, each distinct prompt once however many samples and requests ask for it
   (its KV-cache row is copied per sample), and the first tokens are sampled from the prefill logits;
   a prompt that extends a cached conversation by a short tail joins a running batch without a pass
   of its own (the next decode step feeds its tail, ``EngineConfig.max_fed_tail_tokens``);
3. **decode** one token for every running row in one forward pass over the shared KV cache.

A request with a constraint (``EngineRequest.constraint``) has it compiled when submitted (on the
caller's thread, cached); each of its rows keeps a grammar state, and every step picks its token among
those its grammar allows (``_grammar``, ``choose_tokens``) while the batch's free rows sample as they
would without it.

Rows leave the batch as soon as they stop, and new requests join between two decode steps
(continuous batching), first come first served, while the batch's rows, its padded KV cache
(``EngineConfig.max_kv_bytes``) and the prefill budget allow. A request whose future was cancelled
loses its rows at the next step. A request that cannot run (prompt over the context, bad token ids)
fails alone; a forward pass that raises fails the requests in that pass, and the thread goes on
serving the others. The thread exits after a short idle period and restarts on the next request, so
an unused engine holds no thread; at interpreter exit every engine still running is closed (its
requests fail) before the runtime is torn down.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import queue
import random
import threading
import weakref
from collections import deque
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from envsuite.core import tokens_outside_vocabulary
from envsuite.engine._memory import release_free_memory
from envsuite.engine.kernels import (
    KernelPlan,
    ReorderReport,
    lay_out_frozen_linears,
    native_kernels,
    onednn_fits,
)
from envsuite.engine.sampling._grammar import CompiledGrammar, GrammarCompiler, token_masks
from envsuite.engine.sampling._jobs import ClearPrefixCache, DropVariant, Job, Row
from envsuite.engine.sampling._kv_batch import (
    KVBatch,
    PrefillOutput,
    batch_from_prefixes,
    kv_bytes_per_position,
    prefill,
    prefill_after_prefix,
)
from envsuite.engine.sampling._llama_decode import llama_decoder
from envsuite.engine.sampling._prefix_cache import PrefixCache, PrefixCacheStats, PrefixMatch
from envsuite.engine.sampling._requests import (
    DecodeStepPlan,
    EngineClosedError,
    EngineConfig,
    EngineRequest,
    EngineResult,
    FinishReason,
    KVStats,
    PromptTooLongError,
    SampledToken,
)
from envsuite.engine.sampling._step_choice import StepChoice
from envsuite.engine.sampling._step_timing import apply_modes, engine_plan
from envsuite.engine.sampling._token_choice import (
    RowSampling,
    choose_tokens,
    make_generator,
    row_seed,
)
from envsuite.engine.sampling._variants import Variant, Variants
from envsuite.engine.weights import LoraFactors

logger = logging.getLogger(__name__)


R = TypeVar("R")


class SamplingEngine:
    """Batches sampling requests for one model on a background thread (see module docstring)."""

    def __init__(
        self,
        model: PreTrainedModel,
        decode: Callable[[list[int]], str],
        config: EngineConfig | None = None,
        shared_weights: Collection[int] = (),
        tokenizer: PreTrainedTokenizerBase | None = None,
    ) -> None:
        """``tokenizer`` (the one ``decode`` uses) lets requests carry a constraint; without it they fail."""
        self.model = model.eval()
        self.config = config or EngineConfig()
        self.reorder_report: ReorderReport | None = None
        """What the engine did to the model's linear layers (None: nothing, ``onednn_products`` off)."""
        self.kernel_plan: KernelPlan | None = None
        """The kernels chosen for the model's products, and why (None: ``F.linear`` on the model as loaded)."""
        self.step_choice: StepChoice | None = None
        """How the decode step runs per row bucket, chosen by timing it (None: the fixed default)."""
        weight = model.get_input_embeddings().weight
        assert isinstance(weight, torch.Tensor)
        # Read before the layout: a tied embedding may then read its rows from the LM head's panels.
        self.vocab_size = int(weight.shape[0])
        if self.config.onednn_products and onednn_fits(weight):
            # The engine owns its model (see the client): its layers take the chosen layouts in place.
            # and, for the default step, its ways timed per row bucket (``_step_timing``)
            self.kernel_plan, self.step_choice = engine_plan(model, self.config, shared_weights)
            self.reorder_report = lay_out_frozen_linears(model, self.kernel_plan, shared_weights)
        # Decode steps skip transformers' per-call machinery where a lean step exists (same logits).
        # A first-use plan (the kernels still being built in the background) steps through torch's.
        native_step = (
            self.kernel_plan is not None and self.config.native_kernels and self.kernel_plan.native_loaded
        )
        self._decoder = (
            llama_decoder(model, native=native_step, captured=self.config.captured_step)
            if self.config.lean_decode
            else None
        )
        if self._decoder is not None and self.step_choice is not None:
            apply_modes(self._decoder, self.step_choice.modes)
        self.decode_step_plan = DecodeStepPlan(
            lean=self._decoder is not None,
            native_kernels=self._decoder is not None and self._decoder.native,
            captured=self._decoder is not None and self._decoder.captured is not None,
            native_sampling=native_step and native_kernels().available,
            team_rows=()
            if self._decoder is None or self._decoder.captured is None
            else self._decoder.captured.team_rows,
        )
        """How a decode step runs here (``envsuite doctor`` prints it; ``_advance`` follows its sampler)."""
        self.max_context = self.config.max_context or int(
            getattr(model.config, "max_position_embeddings", None) or 2048
        )
        self._decode = decode
        self.grammars = None if tokenizer is None else GrammarCompiler(tokenizer, self.vocab_size)
        """Compiles requests' constraints (None: this engine takes no constrained request)."""
        self._queue: queue.SimpleQueue[Job[Any] | ClearPrefixCache | DropVariant | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        # Seeds for unseeded requests come from this engine's own RNG, never the global one.
        self._seed_rng = random.Random()
        self._waiting: deque[Job[Any]] = deque()
        self._batch: KVBatch | None = None
        self._rows: list[Row] = []
        self._prefix = PrefixCache(self.config.prefix_cache_bytes)
        self._kv_per_position = kv_bytes_per_position(model)
        # Peaks and counts behind kv_stats(); written by the engine thread only.
        self._peak_admitted_bytes = self._peak_allocated_bytes = self._budget_waits = 0
        self.variants = Variants(
            Variant(self.model, self._decoder, self._prefix, self.kernel_plan, self.reorder_report)
        )
        """The weights served: the model (variant 0) and LoRA adapters of it (``add_variant``)."""
        _LIVE_ENGINES.add(self)

    # ------------------------------------------------------------------ public, any thread

    def submit(
        self,
        request: EngineRequest,
        convert: Callable[[EngineResult], R],
        on_token: Callable[[SampledToken], None] | None = None,
        variant: int = 0,
    ) -> concurrent.futures.Future[R]:
        """Queue ``request``; the future resolves to ``convert(result)`` or raises the request's error.

        ``on_token`` (streaming) is called on the engine thread with each token as it is sampled, before
        the future resolves; it must return quickly (hand the token to another thread or loop). If it
        raises, the request fails with that error and the others go on. ``variant`` names the weights
        that serve it (:meth:`add_variant`; 0, the default: the engine's own model).
        """
        future: concurrent.futures.Future[R] = concurrent.futures.Future()
        error = self._check(request)
        if error is None and variant not in self.variants.by_id:
            error = EngineClosedError(f"the engine serves no variant {variant} (it was removed)")
        grammar: CompiledGrammar | None = None
        if error is None and request.constraint is not None:
            # Compiled here, on the caller's thread (cached), so a new schema never stalls the batch.
            try:
                grammar = self._compile(request)
            except ValueError as exc:
                error = exc
        if error is not None:
            future.set_exception(error)
            return future
        with self._lock:
            if self._closed:
                future.set_exception(EngineClosedError("the sampling engine is closed"))
                return future
            self._queue.put(
                Job(request, future, convert, on_token=on_token, grammar=grammar, variant=variant)
            )
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="envsuite-sampling-engine", daemon=True
                )
                self._thread.start()
        return future

    def add_variant(
        self, model: PreTrainedModel, lora: LoraFactors, shared_weights: Collection[int] = ()
    ) -> int:
        """Serve ``model`` too, a LoRA adapter of this engine's model merged into it (``lora``: its factors,
        on this engine's model's base weights); returns the variant id requests name in :meth:`submit`.

        ``model`` is laid out as an engine of its own would lay it out (on this thread). Rows of
        different variants decode in one step (``_variants``); a step whose rows share one variant runs
        on its merged weights. Raises ``ValueError`` for a model the multi-adapter step does not cover.
        """
        solo = SamplingEngine(model, self._decode, self.config, shared_weights)
        _LIVE_ENGINES.discard(solo)
        variant = Variant(
            solo.model, solo._decoder, solo._prefix, solo.kernel_plan, solo.reorder_report, lora
        )
        with self._lock:
            if self._closed:
                raise EngineClosedError("the sampling engine is closed")
            return self.variants.add(variant)

    def remove_variant(self, variant: int) -> None:
        """Stop serving ``variant``: its queued and running requests fail with :class:`EngineClosedError`."""
        error = EngineClosedError(f"variant {variant} of the sampling engine was removed")
        with self._lock:
            if self._thread is None:
                self.variants.remove(variant)  # no engine thread, and none starts while the lock is held
                return
            self._queue.put(DropVariant(variant, error))

    def close(self) -> None:
        """Fail queued and running requests with :class:`EngineClosedError` and stop the thread."""
        with self._lock:
            self._closed = True
            thread = self._thread
            self._queue.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self.variants.clear_prefixes()

    def clear_prefix_cache(self, timeout_s: float = 30.0) -> None:
        """Drop every cached prefix (their KV is freed); rows running now keep theirs and are cached when
        they finish. For callers that know the conversations so far will not come back (a benchmark
        moving on to its next env). Safe from any thread: the engine thread does it between steps, and
        this returns once it has (or after ``timeout_s``)."""
        with self._lock:
            if self._thread is None:
                self.variants.clear_prefixes()  # no engine thread, and none starts while the lock is held
                return
            done = threading.Event()
            self._queue.put(ClearPrefixCache(done))
        done.wait(timeout_s)

    def prefix_cache_stats(self, variant: int = 0) -> PrefixCacheStats:
        """What ``variant``'s prefix cache served and holds (read from any thread; the counters may lag
        a step)."""
        return self.variants.prefix_stats(variant)

    def kv_stats(self) -> KVStats:
        """What the running batch's KV took (read from any thread; the counters may lag a step)."""
        return KVStats(self._peak_admitted_bytes, self._peak_allocated_bytes, self._budget_waits)

    def _compile(self, request: EngineRequest) -> CompiledGrammar:
        assert request.constraint is not None
        if self.grammars is None:
            raise ValueError("this sampling engine was built without a tokenizer: it takes no constraint")
        return self.grammars.compile(request.constraint)

    # ------------------------------------------------------------------ engine thread

    def _check(self, request: EngineRequest) -> Exception | None:
        prompt = request.prompt_T
        if not prompt:
            return ValueError("the prompt is empty: sampling needs at least one prompt token")
        if len(prompt) >= self.max_context:
            return PromptTooLongError(
                f"the prompt has {len(prompt)} tokens but the model context is {self.max_context} tokens "
                "(prompt plus at least one new token must fit)"
            )
        outside = tokens_outside_vocabulary(prompt, self.vocab_size)
        if outside is not None:
            return ValueError(f"prompt: {outside}")
        if not 0 <= request.top_logprobs <= self.vocab_size:
            return ValueError(f"top_logprobs must be in [0, {self.vocab_size}], got {request.top_logprobs}")
        return None

    def _run(self) -> None:
        with torch.inference_mode():
            while self._collect():
                try:
                    self._admit()
                    if self._batch is not None:
                        self._decode_step()
                        if self._batch is None:
                            # The batch's KV cache and activations were just freed: return them to
                            # the OS now rather than let the heap keep them (see engine._memory).
                            release_free_memory()
                except Exception as exc:  # keep serving: fail only the requests in flight
                    logger.exception("sampling engine step failed")
                    self._fail_running(exc)

    def _collect(self) -> bool:
        """Move queued jobs to the waiting list; False when the engine must stop."""
        idle = self._batch is None and not self._waiting
        while True:
            try:
                job = (
                    self._queue.get(timeout=self.config.idle_shutdown_s) if idle else self._queue.get_nowait()
                )
            except queue.Empty:
                if not idle:
                    return True
                with self._lock:
                    if self._queue.empty():
                        self._thread = None
                        return False
                continue
            if job is None:
                self._shutdown()
                return False
            if isinstance(job, DropVariant):
                self._drop_variant(job)
                continue
            if isinstance(job, ClearPrefixCache):
                self.variants.clear_prefixes()
                release_free_memory()
                job.done.set()
                continue
            self._waiting.append(job)
            idle = False

    def _shutdown(self) -> None:
        error = EngineClosedError("the sampling engine was closed")
        self._fail_running(error)
        while self._waiting:
            self._waiting.popleft().fail(error)
        while not self._queue.empty():
            job = self._queue.get_nowait()
            if isinstance(job, Job):
                job.fail(error)
            elif isinstance(job, ClearPrefixCache):
                job.done.set()
            elif isinstance(job, DropVariant):
                self.variants.remove(job.variant)

    def _drop_variant(self, drop: DropVariant) -> None:
        for job in self._waiting:
            if job.variant == drop.variant:
                job.fail(drop.error)
        self._waiting = deque(job for job in self._waiting if job.variant != drop.variant)
        keep = [i for i, row in enumerate(self._rows) if row.job.variant != drop.variant]
        for row in self._rows:
            if row.job.variant == drop.variant:
                row.job.fail(drop.error)
        if self._batch is not None and len(keep) < len(self._rows):
            self._rows = [self._rows[i] for i in self._batch.select(keep)]
            if not self._rows:
                self._batch = None
        self.variants.remove(drop.variant)

    def _fail_running(self, error: BaseException) -> None:
        for row in self._rows:
            row.job.fail(error)
        self._rows, self._batch = [], None

    def _next_group(self) -> list[Job[Any]]:
        group: list[Job[Any]] = []
        free_rows = self.config.max_batch_size - len(self._rows)
        longest = 0
        length_now = self._batch.length if self._batch is not None else 0
        while self._waiting:
            job = self._waiting[0]
            if job.future.done():
                self._waiting.popleft()
                continue
            request = job.request
            rows = request.num_samples if request.max_tokens > 0 else 0
            longest_after = max(longest, len(request.prompt_T))
            if not group:
                # The first request waits only for free rows; one prompt may exceed the prefill budget.
                if rows > free_rows and self._rows:
                    break
            elif (
                rows > free_rows
                or longest_after * (len(group) + 1) > self.config.max_prefill_tokens
                # Full-sequence logits are large, so a request wanting prompt logprobs is prefilled alone.
                or request.prompt_logprobs
                or group[0].request.prompt_logprobs
            ):
                break
            rows_after = self.config.max_batch_size - free_rows + rows  # running, admitted, this one
            over = rows > 0 and self._over_kv_budget(rows_after, max(length_now, longest_after))
            if over and (group or self._rows):  # a request alone in an empty batch always runs
                self._budget_waits += 1
                break
            group.append(self._waiting.popleft())
            free_rows -= rows
            longest = longest_after
        return group

    def _over_kv_budget(self, rows: int, length: int) -> bool:
        budget, per_position = self.config.max_kv_bytes, self._kv_per_position
        return budget is not None and per_position is not None and rows * length * per_position > budget

    def _admit(self) -> None:
        for jobs in Variants.by_variant(self._next_group()):
            self._admit_variant(jobs)

    def _admit_variant(self, group: list[Job[Any]]) -> None:
        matches = self._prefix_matches(group)
        fed: list[Job[Any]] = []
        prefilled: list[Job[Any]] = []
        for job in group:
            (fed if self._feeds(job, matches) else prefilled).append(job)
        for jobs, admit in ((fed, self._join_fed), (prefilled, self._admit_group)):
            if not jobs:
                continue
            try:
                admit(jobs, matches)
            except Exception as exc:
                logger.exception("admitting %d requests failed", len(jobs))
                for job in jobs:
                    job.fail(exc)

    def _prefix_matches(self, group: list[Job[Any]]) -> dict[tuple[int, ...], PrefixMatch]:
        """Each distinct prompt's longest cached prefix (none when the cache is off or a prompt wants
        prompt logprobs, which need the whole prompt prefilled)."""
        prefix = self.variants.prefix(group[0].variant)
        if prefix.max_bytes <= 0 or group[0].request.prompt_logprobs:
            return {}
        matches: dict[tuple[int, ...], PrefixMatch] = {}
        for job in group:
            prompt = job.request.prompt_T
            if prompt not in matches:
                # At least one prompt token is fed, so its next-token logits come out of the model.
                matches[prompt] = prefix.match(prompt, len(prompt) - 1)
        return matches

    def _feeds(self, job: Job[Any], matches: dict[tuple[int, ...], PrefixMatch]) -> bool:
        """Whether ``job`` joins the running batch with its cached prefix and feeds its prompt's short
        tail in the next decode step (``EngineConfig.max_fed_tail_tokens``) instead of a prefill."""
        request = job.request
        match = matches.get(request.prompt_T)
        return (
            self._batch is not None
            and self._decoder is not None
            and match is not None
            and request.max_tokens > 0
            and match.length >= self.config.min_prefix_reuse
            and len(request.prompt_T) - match.length <= self.config.max_fed_tail_tokens
        )

    def _join_fed(self, jobs: list[Job[Any]], matches: dict[tuple[int, ...], PrefixMatch]) -> None:
        """Join ``jobs``' rows to the running batch holding only their prompts' cached prefixes.

        The next decode step feeds each row's tail (the prompt past its prefix) in the same pass as
        the other rows' tokens: the tail's rows of the layer products ride along with the batch's, and
        the row samples its first token from that step's logits. A short tail so costs a few more rows
        in one step rather than a forward pass of its own while the batch waits (docs/benchmarks.md,
        multi-turn rollouts).
        """
        assert self._batch is not None
        rows: list[Row] = []
        row_matches: list[PrefixMatch] = []
        tails: list[tuple[int, ...]] = []
        for job in jobs:
            prompt = job.request.prompt_T
            match = matches[prompt]
            job.cached_prompt_tokens = match.length
            job.open_rows = job.request.num_samples
            for index in range(job.request.num_samples):
                rows.append(self._make_row(job, index))
                row_matches.append(match)
                tails.append(prompt[match.length :])
        self._batch.extend(batch_from_prefixes(self.model, row_matches, tails))
        self._rows.extend(rows)
        self._note_kv_peaks()

    def _note_kv_peaks(self) -> None:
        assert self._batch is not None
        self._peak_admitted_bytes = max(self._peak_admitted_bytes, self._batch.live_bytes)
        self._peak_allocated_bytes = max(self._peak_allocated_bytes, self._batch.allocated_bytes)

    def _admit_group(self, group: list[Job[Any]], matches: dict[tuple[int, ...], PrefixMatch]) -> None:
        # Identical prompts (the members of a GRPO group) are prefilled once and share that KV row.
        unique: dict[tuple[int, ...], int] = {}
        slot_of_job = [unique.setdefault(job.request.prompt_T, len(unique)) for job in group]
        model = self.variants.by_id[group[0].variant].model
        out = self._prefill(model, list(unique), group[0].request.prompt_logprobs, matches)
        counts = [job.request.num_samples if job.request.max_tokens > 0 else 0 for job in group]
        new_rows: list[Row] = []
        row_slots: list[int] = []
        for job, slot, count in zip(group, slot_of_job, counts, strict=True):
            if out.prompt_logprobs_B is not None:
                job.prompt_logprobs = out.prompt_logprobs_B[slot]
            match = matches.get(job.request.prompt_T)
            if match is not None and match.length >= self.config.min_prefix_reuse:
                job.cached_prompt_tokens = match.length  # _prefill started this prompt from its prefix
            job.open_rows = count
            new_rows.extend(self._make_row(job, i) for i in range(count))
            row_slots.extend([slot] * count)
            if count == 0:
                job.finish()
        if not new_rows:
            return
        slots = torch.tensor(row_slots, dtype=torch.long, device=out.last_logits_B_V.device)
        logits = out.last_logits_B_V.index_select(0, slots)
        batch = out.batch
        batch.take_rows(row_slots)
        keep = self._advance(new_rows, logits, batch)
        new_rows = [new_rows[i] for i in batch.select(keep)]
        if not new_rows:
            return
        if self._batch is None:
            # Buffers within the KV budget stay as room for later joins (compacting them would only
            # be undone by the next join's growth); larger ones are compacted once the batch shrinks.
            batch.compact_min_bytes = max(batch.compact_min_bytes, self.config.max_kv_bytes or 0)
            self._batch = batch
        else:
            self._batch.extend(batch)
        self._rows.extend(new_rows)
        self._note_kv_peaks()

    def _prefill(
        self,
        model: PreTrainedModel,
        prompts: list[tuple[int, ...]],
        want_prompt_logprobs: bool,
        known: dict[tuple[int, ...], PrefixMatch],
    ) -> PrefillOutput:
        """Prefill ``prompts`` (one row each, in order) on ``model``, reusing their cached prefixes (``known``)."""
        if want_prompt_logprobs or not known:
            return prefill(model, prompts, want_prompt_logprobs)
        matches = [known[prompt] for prompt in prompts]
        hits = [i for i, match in enumerate(matches) if match.length >= self.config.min_prefix_reuse]
        if not hits:
            return prefill(model, prompts, False)
        hit_set = set(hits)
        misses = [i for i in range(len(prompts)) if i not in hit_set]
        out = prefill_after_prefix(model, [prompts[i] for i in hits], [matches[i] for i in hits])
        if not misses:
            return out
        rest = prefill(model, [prompts[i] for i in misses], False)
        # Back to the prompts' order: the hits' rows come first in the joined batch, then the misses'.
        order = hits + misses
        where = [order.index(i) for i in range(len(prompts))]
        batch = out.batch
        batch.extend(rest.batch)
        batch.take_rows(where)
        logits = torch.cat([out.last_logits_B_V, rest.last_logits_B_V])
        index = torch.tensor(where, dtype=torch.long, device=logits.device)
        return PrefillOutput(batch, logits.index_select(0, index), None)

    def _remember(self, batch: KVBatch, index: int, row: Row) -> None:
        """Keep a finished row's KV (prompt + every token fed) for prompts that extend it."""
        prefix = self.variants.prefix(row.job.variant)
        if prefix.max_bytes <= 0:
            return
        tokens = row.job.request.prompt_T + tuple(row.tokens[:-1])
        # The row's last sampled token was never fed: its cache holds exactly the tokens before it.
        if batch.row_length(index) != len(tokens):
            return
        prefix.insert(tokens, lambda start, end: batch.row_kv(index, start, end))

    def _make_row(self, job: Job[Any], index: int) -> Row:
        request = job.request
        generator = None
        if request.temperature > 0:
            base = request.seed if request.seed is not None else self._seed_rng.getrandbits(63)
            generator = make_generator(row_seed(base, index))
        sampling = RowSampling(
            request.temperature, request.top_k, request.top_p, generator, request.top_logprobs
        )
        grammar = None if job.grammar is None else job.grammar.row(request.stop.stop_token_ids)
        return Row(job, index, sampling, grammar=grammar)

    def _decode_step(self) -> None:
        assert self._batch is not None
        live = [i for i, row in enumerate(self._rows) if not row.job.future.done()]
        if len(live) < len(self._rows):
            self._rows = [self._rows[i] for i in self._batch.select(live)]
        if not self._rows:
            self._batch = None
            return
        model, decoder = self.variants.step_weights(self._rows, self._batch)
        logits = self._batch.step(model, decoder)
        keep = self._advance(self._rows, logits, self._batch)
        self._rows = [self._rows[i] for i in self._batch.select(keep)]
        if not self._rows:
            self._batch = None

    def _advance(self, rows: Sequence[Row], logits_B_V: torch.Tensor, batch: KVBatch) -> list[int]:
        """Append one sampled token to each row; finish rows that stopped; return the rows to keep."""
        masks = token_masks([row.grammar for row in rows], logits_B_V.shape[-1])
        choice = choose_tokens(
            logits_B_V, [row.sampling for row in rows], self.decode_step_plan.native_sampling, masks
        )
        dead = set(masks.dead) if masks is not None else set()
        keep: list[int] = []
        for i, row in enumerate(rows):
            token, logprob = choice.tokens_B[i], choice.logprobs_B[i]
            constrained = choice.constrained_B[i] if choice.constrained_B is not None else None
            top = choice.top_B[i] if choice.top_B is not None else []
            if i in dead:  # no token continues its document: it ends here, incomplete
                assert row.grammar is not None
                row.grammar.dead_end()
            else:
                row.take(token, logprob, constrained, top)
                batch.pending_B[i] = token
            try:
                if row.job.on_token is not None and i not in dead:
                    row.job.on_token(SampledToken(row.index, token, logprob, top, constrained))
                finish = self._finish_reason(row)
            except Exception as exc:
                row.job.fail(exc)
                continue
            if finish is None:
                if not row.job.future.done():
                    keep.append(i)
                continue
            self._remember(batch, i, row)
            row.job.sequences[row.index] = row.sequence(finish)
            row.job.open_rows -= 1
            if row.job.open_rows == 0 and not row.job.future.done():
                row.job.finish()
        return keep

    def _finish_reason(self, row: Row) -> FinishReason | None:
        request = row.job.request
        grammar = row.grammar
        if grammar is not None and grammar.ended:
            return FinishReason.LENGTH if grammar.failed else FinishReason.STOP
        # A constrained row ends at a stop string only where its text is a complete document.
        if (grammar is None or grammar.accepting) and request.stop.is_stop(row.tokens, self._decode):
            return FinishReason.STOP
        if len(row.tokens) >= request.max_tokens:
            return FinishReason.LENGTH
        if len(request.prompt_T) + len(row.tokens) >= self.max_context:
            return FinishReason.LENGTH
        return None


_LIVE_ENGINES: weakref.WeakSet[SamplingEngine] = weakref.WeakSet()


@atexit.register
def _close_live_engines() -> None:
    """Stop every engine thread before the interpreter tears down: a daemon thread still inside a torch
    op while the process exits aborts it ("terminate called without an active exception", exit 134)."""
    for engine in list(_LIVE_ENGINES):
        engine.close()
