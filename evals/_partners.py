"""Any Inspect-supported model as an envsuite MessageCompleter (a partner or opponent inside an env)."""

from __future__ import annotations

from dataclasses import dataclass, field

from inspect_ai.model import GenerateConfig, get_model

from envsuite.core import Message, MessageCompleter
from envsuite.evals._messages import to_inspect


@dataclass
class InspectMessageCompleter(MessageCompleter):
    """Replies through Inspect's model API, so ``openai/...``, ``vllm/...``, ``envsuite/...`` all work."""

    model: str
    max_tokens: int = 128
    temperature: float = 0.0
    _config: GenerateConfig = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._config = GenerateConfig(max_tokens=self.max_tokens, temperature=self.temperature)

    async def __call__(self, messages: list[Message]) -> Message:
        output = await get_model(self.model).generate(to_inspect(messages), config=self._config)
        return {"role": "assistant", "content": output.completion}

    def identity(self) -> str:
        return f"inspect:{self.model}(T={self.temperature},max_tokens={self.max_tokens})"
