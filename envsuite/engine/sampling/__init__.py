"""The sampling engine: one thread per model batching every request it is given (continuous batching).

See ``_engine`` for the loop (collect, admit with a joint prefill, decode), ``_requests`` for its
limits, requests and results, ``_kv_batch`` for the running batch over one KV cache
(``_kv_cache_layer`` for its in-place layers), ``_llama_decode`` for the lean decode step of
Llama-family models (``_captured_step``: its layers as one native call), ``_prefix_cache`` for the KV kept across the turns of an episode, and
``_token_choice`` for per-row sampling and stop detection, ``_grammar`` for constrained rows' grammars,
``_step_choice`` and ``_step_timing`` for the decode step's ways timed whole per row bucket.
"""

from envsuite.engine.sampling._captured_step import CapturedLayers, ProductCode
from envsuite.engine.sampling._engine import SamplingEngine
from envsuite.engine.sampling._grammar import (
    CompiledGrammar,
    GrammarCompiler,
    RowGrammar,
    TokenMasks,
    token_masks,
)
from envsuite.engine.sampling._kv_batch import KVBatch, PrefillOutput, kv_bytes_per_position, prefill
from envsuite.engine.sampling._llama_decode import LlamaDecoder, llama_decoder
from envsuite.engine.sampling._prefix_cache import PrefixCache, PrefixCacheStats, PrefixMatch
from envsuite.engine.sampling._requests import (
    DecodeStepPlan,
    EngineClosedError,
    EngineConfig,
    EngineRequest,
    EngineResult,
    FinishReason,
    GeneratedSequence,
    KVStats,
    PromptTooLongError,
    SampledToken,
)
from envsuite.engine.sampling._step_choice import (
    STEP_CHOICE_ENV,
    STEP_WAYS,
    Products,
    StepChoice,
    StepMode,
    StepWay,
    step_cache_file,
)
from envsuite.engine.sampling._step_timing import apply_modes, engine_plan
from envsuite.engine.sampling._token_choice import (
    RowSampling,
    StopMatcher,
    TokenChoice,
    choose_tokens,
    make_generator,
)

__all__ = [
    # the engine
    "EngineConfig",
    "SamplingEngine",
    "KVStats",
    "DecodeStepPlan",
    # requests and results
    "EngineRequest",
    "EngineResult",
    "FinishReason",
    "GeneratedSequence",
    "SampledToken",
    "StopMatcher",
    # the decode step's ways timed whole per row bucket, the fastest run
    "STEP_CHOICE_ENV",
    "STEP_WAYS",
    "Products",
    "StepChoice",
    "StepMode",
    "StepWay",
    "apply_modes",
    "engine_plan",
    "step_cache_file",
    # token choice (one token per row, each row its own settings and generator)
    "RowSampling",
    "TokenChoice",
    "choose_tokens",
    "make_generator",
    # constrained sampling (a Constraint compiled per tokenizer; per-row token masks)
    "CompiledGrammar",
    "GrammarCompiler",
    "RowGrammar",
    "TokenMasks",
    "token_masks",
    # the running batch over one KV cache (rows join and leave without copying the others)
    "KVBatch",
    "PrefillOutput",
    "prefill",
    "kv_bytes_per_position",
    "LlamaDecoder",
    "llama_decoder",
    "CapturedLayers",
    "ProductCode",
    # the prefix cache (KV reused across the turns of an episode)
    "PrefixCache",
    "PrefixCacheStats",
    "PrefixMatch",
    # errors
    "EngineClosedError",
    "PromptTooLongError",
]
