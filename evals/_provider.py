"""The ``envsuite`` Inspect model provider: ``--model envsuite/<name>`` for any envsuite model.

``<name>`` is a known model (``smollm2-135m-instruct``, ``tiny-random``), a local HF model directory, or
a checkpoint directory written by the local backend. Generation goes through the local sampler, whose
engine batches concurrent requests, so many Inspect samples in flight share forward passes; ``generate``
awaits a future and never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Any

from inspect_ai.model import (
    ChatMessage,
    GenerateConfig,
    ModelAPI,
    ModelOutput,
    ModelUsage,
)
from inspect_ai.tool import ToolChoice, ToolInfo

from envsuite.evals._messages import to_envsuite

DEFAULT_MAX_TOKENS = 256


@dataclass(frozen=True)
class _LocalModel:
    sampling_client: Any
    renderer: Any


@functools.lru_cache(maxsize=8)
def local_model(name: str) -> _LocalModel:
    """One sampling client and renderer per model per process (shared by every task using it)."""
    from envsuite import RendererConfig
    from envsuite.backends import local_sampling_client

    return _LocalModel(local_sampling_client(name), RendererConfig(model_name=name).build())


class EnvsuiteModelAPI(ModelAPI):
    """Inspect ModelAPI over the envsuite local backend."""

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig = GenerateConfig(),  # noqa: B008  (Inspect's own signature)
        **model_args: Any,
    ) -> None:
        super().__init__(
            model_name=model_name, base_url=base_url, api_key=api_key, api_key_vars=[], config=config
        )
        self._model = local_model(model_name)

    def max_connections(self) -> int:
        # Many samples in flight let the engine batch them; it bounds its own batch size.
        return 64

    async def generate(
        self,
        input: list[ChatMessage],
        tools: list[ToolInfo],
        tool_choice: ToolChoice,
        config: GenerateConfig,
    ) -> ModelOutput:
        import tinker

        renderer = self._model.renderer
        prompt = renderer.build_generation_prompt(to_envsuite(input))
        params = tinker.SamplingParams(
            max_tokens=config.max_tokens or DEFAULT_MAX_TOKENS,
            temperature=1.0 if config.temperature is None else config.temperature,
            top_p=1.0 if config.top_p is None else config.top_p,
            top_k=-1 if config.top_k is None else config.top_k,
            seed=config.seed,
            stop=renderer.get_stop_sequences(),
        )
        future = self._model.sampling_client.sample(prompt, num_samples=1, sampling_params=params)
        response = await asyncio.wrap_future(future.future()) if hasattr(future, "future") else await future
        tokens = list(response.sequences[0].tokens)
        parsed = renderer.parse_response(tokens)
        output = ModelOutput.from_content(
            model=self.model_name,
            content=parsed.message["content"],
            stop_reason="stop" if parsed.clean_stop else "max_tokens",
        )
        output.usage = ModelUsage(
            input_tokens=prompt.length, output_tokens=len(tokens), total_tokens=prompt.length + len(tokens)
        )
        return output
