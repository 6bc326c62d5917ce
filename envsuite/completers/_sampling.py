"""Completers backed by a Tinker-style sampling client (the hosted service or the local backend).

Both completers await the client's future, so many calls can be in flight on one event loop and the
local engine batches them together. A ``seed`` makes a completer reproducible as a whole: each call's
sampling seed is derived from the completer's seed, the prompt's tokens and how many calls before it
had the same prompt. So repeated calls still differ (group members must not all get the same reply),
a rerun repeats them, and, because no seed depends on the order in which concurrent calls arrive, a
multi-turn rollout whose calls interleave differently (threads finishing in another order, batching)
still samples the same replies.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Protocol

from envsuite.core import (
    Message,
    MessageCompleter,
    Observation,
    StopCondition,
    TokenCompleter,
    TokensWithLogprobs,
)
from envsuite.errors import UsageError

if TYPE_CHECKING:
    import tinker

    from envsuite.constraints import Constraint
    from envsuite.renderers.base import Renderer


class SamplingClientLike(Protocol):
    """The slice of ``tinker.SamplingClient`` (or ``LocalSamplingClient``) the completers use."""

    def sample(
        self, prompt: tinker.ModelInput, num_samples: int, sampling_params: tinker.SamplingParams
    ) -> Awaitable[tinker.SampleResponse]: ...

    def get_base_model(self) -> str: ...


class _SamplingSettings:
    def __init__(
        self, max_tokens: int, temperature: float, top_p: float, top_k: int, seed: int | None
    ) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.seed = seed
        self._calls_per_prompt: Counter[bytes] = Counter()

    def params(
        self, stop: StopCondition, prompt: tinker.ModelInput, max_tokens: int | None = None
    ) -> tinker.SamplingParams:
        import tinker

        return tinker.SamplingParams(
            max_tokens=self.max_tokens if max_tokens is None else max(1, min(self.max_tokens, max_tokens)),
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            stop=stop,
            seed=self._call_seed(prompt),
        )

    def _call_seed(self, prompt: tinker.ModelInput) -> int | None:
        """The call's seed: a hash of (completer seed, prompt tokens, earlier calls with that prompt)."""
        if self.seed is None:
            return None
        key = hashlib.blake2b(repr(prompt.to_ints()).encode(), digest_size=16).digest()
        occurrence = self._calls_per_prompt[key]
        self._calls_per_prompt[key] += 1
        digest = hashlib.blake2b(repr((self.seed, key, occurrence)).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") >> 1  # 63 bits

    def describe(self) -> str:
        return (
            f"max_tokens={self.max_tokens}, temperature={self.temperature}, top_p={self.top_p}, "
            f"top_k={self.top_k}, seed={self.seed}"
        )


class SamplingTokenCompleter(TokenCompleter):
    """A :class:`~envsuite.core.TokenCompleter` that samples one reply per call from a sampling client.

    The reply's tokens include the stop token when sampling stopped cleanly; its logprobs are the
    sampler's (see the sampling backend's docs for what they are at temperatures other than 1); its
    ``sequence_id`` and ``prompt_cache_hit_tokens`` are the sampler's, as tinker-cookbook 0.6.1's
    ``TinkerTokenCompleter`` reports them.
    """

    def __init__(
        self,
        sampling_client: SamplingClientLike,
        max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = -1,
        seed: int | None = None,
    ) -> None:
        self.sampling_client = sampling_client
        self.settings = _SamplingSettings(max_tokens, temperature, top_p, top_k, seed)

    takes_constraints = True

    async def __call__(
        self,
        model_input: Observation,
        stop: StopCondition,
        *,
        max_tokens: int | None = None,
        constraint: Constraint | None = None,
    ) -> TokensWithLogprobs:
        """One reply; under ``constraint`` (envsuite's extension) where the sampler applies constraints
        (a local one: it has ``compile_constraint``), refused where it would drop it (a remote one)."""
        params = self.settings.params(stop, model_input, max_tokens)
        if constraint is not None:
            from envsuite.backends.local import ConstrainedSamplingParams

            if not hasattr(self.sampling_client, "compile_constraint"):
                raise UsageError(
                    f"{type(self.sampling_client).__name__} does not apply constraints (only a local "
                    "sampling client does); run without constrained actions"
                )
            params = ConstrainedSamplingParams(**params.model_dump(), constraint=constraint)
        response = await self.sampling_client.sample(model_input, 1, params)
        sequence = response.sequences[0]
        return TokensWithLogprobs(
            tokens=list(sequence.tokens),
            maybe_logprobs=sequence.logprobs,
            stop_reason="length" if sequence.stop_reason == "length" else "stop",
            sequence_id=getattr(sequence, "sequence_id", None),
            prompt_cache_hit_tokens=int(getattr(response, "prompt_cache_hit_tokens", 0) or 0),
        )


class SamplingMessageCompleter(MessageCompleter):
    """A :class:`~envsuite.core.MessageCompleter` that renders, samples, and parses one assistant reply.

    A truncated reply (no stop sequence within ``max_tokens``) is still returned as a message: it
    holds whatever text was sampled.
    """

    def __init__(
        self,
        sampling_client: SamplingClientLike,
        renderer: Renderer,
        max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = -1,
        seed: int | None = None,
    ) -> None:
        self.sampling_client = sampling_client
        self.renderer = renderer
        self.settings = _SamplingSettings(max_tokens, temperature, top_p, top_k, seed)

    async def __call__(self, messages: list[Message]) -> Message:
        prompt = self.renderer.build_generation_prompt(messages)
        params = self.settings.params(self.renderer.get_stop_sequences(), prompt)
        response = await self.sampling_client.sample(prompt, 1, params)
        parsed = self.renderer.parse_response(list(response.sequences[0].tokens))
        return parsed.message

    def identity(self) -> str:
        model = self.sampling_client.get_base_model()
        model_path = getattr(self.sampling_client, "model_path", None)
        weights = f", weights={model_path}" if model_path else ""
        return (
            f"SamplingMessageCompleter(model={model}{weights}, renderer={self.renderer.name}, "
            f"{self.settings.describe()})"
        )
