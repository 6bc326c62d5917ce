"""One sampling engine per base model for a session's LoRA sampling clients (multi-adapter sampling).

Every LoRA snapshot or checkpoint a local session samples from (``save_weights_and_get_sampling_client``,
a training client's ``create_sampling_client``) becomes a variant of one engine built on that base model
(``SamplingEngine.add_variant``), whatever training client it came from. Sampling clients of different
adapters (two policies, one per role) so share that engine, and whenever their requests are in flight
together their rows decode in the same steps: the base products once for every row, plus each row's
own adapter's low-rank terms. While only one adapter's rows run (one policy, the common case) a step
runs on that adapter's merged weights, as a client with an engine of its own does.

The engine's base model is laid out once, from the first adapter's base weights (a copy: one more set
of the adapted layers' weights in memory while any of the session's LoRA clients lives). It goes when
its last client does. A client's variant is removed when the client is closed or dropped.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

from envsuite.engine.sampling import SamplingEngine
from envsuite.engine.weights import SamplingModel, unmerged_model

if TYPE_CHECKING:
    from collections.abc import Callable


class SharedBases:
    """A session's multi-adapter engines by base model (each lives while a client of it does)."""

    def __init__(self, device: str | None) -> None:
        self.device = device
        self._engines: weakref.WeakValueDictionary[str, SamplingEngine] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def variant_of(
        self, loaded: SamplingModel, decode: Callable[[list[int]], str]
    ) -> tuple[SamplingEngine, int] | None:
        """The engine for ``loaded``'s base model and ``loaded`` added to it as a variant; None where
        ``loaded`` is not a LoRA adapter the multi-adapter step covers (the caller then gives it an
        engine of its own)."""
        if loaded.lora is None:
            return None
        try:
            with self._lock:
                engine = self._engines.get(loaded.base_model)
                if engine is None:
                    base = unmerged_model(loaded.model, loaded.lora)
                    engine = SamplingEngine(
                        base, decode, shared_weights=loaded.shared_weights, tokenizer=loaded.tokenizer
                    )
                    self._engines[loaded.base_model] = engine
            return engine, engine.add_variant(loaded.model, loaded.lora, loaded.shared_weights)
        except ValueError:
            return None
