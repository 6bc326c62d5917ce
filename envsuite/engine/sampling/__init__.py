"""The sampling engine: one thread per model batching every request it is given (continuous batching).

See ``_engine`` for the loop (collect, admit with a joint prefill, decode), ``_kv_batch`` for the running
batch over one KV cache, and ``_token_choice`` for per-row sampling and stop detection.
"""

from envsuite.engine.sampling._engine import (
    EngineClosedError,
    EngineConfig,
    EngineRequest,
    EngineResult,
    FinishReason,
    GeneratedSequence,
    PromptTooLongError,
    SamplingEngine,
)
from envsuite.engine.sampling._token_choice import StopMatcher

__all__ = [
    # the engine
    "EngineConfig",
    "SamplingEngine",
    # requests and results
    "EngineRequest",
    "EngineResult",
    "FinishReason",
    "GeneratedSequence",
    "StopMatcher",
    # errors
    "EngineClosedError",
    "PromptTooLongError",
]
