"""vLLM as a sampling engine, over HTTP only: a server envsuite starts from the vLLM venv (or one the user
runs), a sampling client with tinker's ``sample`` over its ``/v1/completions``, and LoRA policies
published to it as peft adapters (docs/vllm.md). Nothing here imports vLLM; torch loads only where
an envsuite model name is resolved.
"""

from __future__ import annotations

from envsuite.backends.vllm._adapters import PeftAdapter, write_peft_adapter
from envsuite.backends.vllm._client import (
    MAX_TOPK_LOGPROBS,
    LoadedAdapter,
    VllmConnectionError,
    VllmEndpoint,
    VllmRequestError,
    VllmSamplingClient,
    VllmVersionMismatch,
)
from envsuite.backends.vllm._server import (
    VLLM_PYTHON_VAR,
    VllmServer,
    VllmServerSettings,
    VllmStartError,
    VllmUnavailable,
    find_vllm_python,
)
from envsuite.backends.vllm._session import (
    SCHEME,
    is_vllm_url,
    running_vllm,
    served_base,
    vllm_sampling_client,
)

__all__ = [
    # the server
    "VLLM_PYTHON_VAR",
    "VllmServer",
    "VllmServerSettings",
    "VllmStartError",
    "VllmUnavailable",
    "find_vllm_python",
    # sampling and adapters over HTTP
    "MAX_TOPK_LOGPROBS",
    "LoadedAdapter",
    "PeftAdapter",
    "VllmConnectionError",
    "VllmEndpoint",
    "VllmRequestError",
    "VllmSamplingClient",
    "VllmVersionMismatch",
    "write_peft_adapter",
    # for the commands that sample a named model
    "SCHEME",
    "is_vllm_url",
    "running_vllm",
    "served_base",
    "vllm_sampling_client",
]
