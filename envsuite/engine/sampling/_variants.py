"""The weights a sampling engine serves: its own model, and LoRA adapters of it (its *variants*).

An engine is built on one model (variant 0). ``SamplingEngine.add_variant`` adds weights of the same
architecture that are LoRA adapters of that model: each comes as its merged model (the adapter folded
into the weights, laid out and given its own lean decoder exactly as an engine of its own would be) and
its factors (``LoraFactors``). Every request names its variant. Each variant keeps its own prefix cache
(a prompt's keys and values depend on the weights), and prompts are prefilled on their own variant's
merged weights (a prefill is already a wide product: stacking other adapters' prompts into it would save
nothing). A decode step whose rows all belong to one variant runs that variant's decoder (the merged,
single-adapter fast path, as before); one whose rows belong to several runs
:class:`~envsuite.engine.sampling._adapters.MixedDecoder` on variant 0's weights, each row with its own
adapter's low-rank terms.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from transformers import PreTrainedModel

from envsuite.engine.kernels import KernelPlan, ReorderReport
from envsuite.engine.sampling._adapters import AdapterDeltas, MixedDecoder, MixedStepCounts
from envsuite.engine.sampling._jobs import Job, Row
from envsuite.engine.sampling._kv_batch import KVBatch, StepDecoder
from envsuite.engine.sampling._llama_decode import LlamaDecoder
from envsuite.engine.sampling._prefix_cache import PrefixCache, PrefixCacheStats
from envsuite.engine.weights import LoraFactors

_KEPT_DELTAS = 4
"""How many sets of adapters' laid-out terms an engine keeps (the sets of variants recent mixed steps ran)."""


@dataclass
class Variant:
    """One set of weights an engine serves: the model, its lean decoder, its adapter and prefix cache."""

    model: PreTrainedModel
    decoder: LlamaDecoder | None
    prefix: PrefixCache
    kernel_plan: KernelPlan | None = None
    reorder_report: ReorderReport | None = None
    lora: LoraFactors | None = None
    """The adapter these weights merge into variant 0's (None: variant 0 itself)."""


class Variants:
    """An engine's variants by id (0: the engine's own model), and its mixed steps' decoders.

    The mapping is replaced, never changed in place, so the engine thread reads it without a lock while
    another thread adds a variant; removal happens on the engine thread (``DropVariant``) or while it
    is not running.
    """

    def __init__(self, primary: Variant) -> None:
        self.by_id: dict[int, Variant] = {0: primary}
        self._ids = itertools.count(1)
        self._mixed: dict[tuple[int, ...], MixedDecoder] = {}
        self.mixed_steps = 0
        """Decode steps run so far with rows of two or more variants in one step."""
        self.mixed_counts = MixedStepCounts()
        """How many of them ran as one native call."""

    def add(self, variant: Variant) -> int:
        """Register ``variant`` (the caller holds the engine's lock); returns its id."""
        if variant.lora is None:
            raise ValueError("an added variant is a LoRA adapter of the engine's model: pass its factors")
        if self.by_id[0].decoder is None or variant.decoder is None:
            raise ValueError("multi-adapter sampling needs the lean decoder (a Llama-family model)")
        index = next(self._ids)
        self.by_id = {**self.by_id, index: variant}
        return index

    def remove(self, index: int) -> None:
        """Forget variant ``index`` (its prefix cache is freed)."""
        variant = self.by_id.get(index)
        if variant is None or index == 0:
            return
        variant.prefix.clear()
        self.by_id = {key: value for key, value in self.by_id.items() if key != index}
        self._mixed = {key: mixed for key, mixed in self._mixed.items() if index not in key}

    def prefix(self, index: int) -> PrefixCache:
        return self.by_id[index].prefix

    def clear_prefixes(self) -> None:
        for variant in self.by_id.values():
            variant.prefix.clear()

    def prefix_stats(self, index: int) -> PrefixCacheStats:
        variant = self.by_id.get(index)
        if variant is None:
            return PrefixCacheStats(0, 0, 0, 0, 0, 0)
        return variant.prefix.stats()

    @staticmethod
    def by_variant(jobs: Sequence[Job[Any]]) -> list[list[Job[Any]]]:
        """``jobs`` split by variant (each part in arrival order; parts in order of first arrival)."""
        parts: dict[int, list[Job[Any]]] = {}
        for job in jobs:
            parts.setdefault(job.variant, []).append(job)
        return list(parts.values())

    def step_weights(self, rows: Sequence[Row], batch: KVBatch) -> tuple[PreTrainedModel, StepDecoder | None]:
        """The model and decoder a decode step of ``rows`` (the batch's rows, in order) runs on."""
        first = rows[0].job.variant
        if all(row.job.variant == first for row in rows):
            variant = self.by_id[first]
            return variant.model, variant.decoder
        base = self.by_id[0]
        assert base.decoder is not None  # checked when the variants were added
        key = tuple(sorted({row.job.variant for row in rows} - {0}))
        mixed = self._mixed.pop(key, None)
        if mixed is None:
            adapters = {index: self.by_id[index].lora for index in key}
            mixed = MixedDecoder(
                base.decoder,
                AdapterDeltas(base.model, {i: lora for i, lora in adapters.items() if lora is not None}),
                self.mixed_counts,
            )
        self._mixed[key] = mixed  # the most recent last
        while len(self._mixed) > _KEPT_DELTAS:
            del self._mixed[next(iter(self._mixed))]
        self.mixed_steps += 1
        # The batch's rows, then one row per prompt-tail token the step feeds (in the rows' order).
        row_variants = [row.job.variant for row in rows]
        row_variants += [row.job.variant for row, tail in zip(rows, batch.tail_B, strict=True) for _ in tail]
        return base.model, mixed.for_rows(row_variants)
