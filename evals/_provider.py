"""The ``envsuite`` Inspect model provider: ``--model envsuite/<name>`` for any envsuite model.

``<name>`` is a known model (``smollm2-135m-instruct``, ``tiny-random``), a local HF model directory, or
a checkpoint directory written by the local backend. ``model_args={"path": DIR}`` loads ``DIR`` under a
readable name (``envsuite bench`` names checkpoints by their label, not ``envsuite//abs/path``);
``model_args={"sampling_client": client}`` samples from ``client`` (a Tinker ``SamplingClient``, or
anything with its ``sample``: a scripted policy in tests) with ``<name>``'s chat format. Generation goes through the local sampler, whose
engine batches concurrent requests, so many Inspect samples in flight share forward passes; ``generate``
awaits a future and never blocks the event loop.

Generation settings are honoured or refused, never silently ignored:

* ``max_tokens``, ``temperature``, ``top_p``, ``top_k``, ``seed``: passed to the sampler.
* ``num_choices=n``: ``n`` samples of the prompt, returned as ``n`` choices.
* ``stop_seqs``: each reply is cut before the first stop sequence it holds (``stop_reason="stop"``). The
  sampler itself stops at the chat format's end-of-turn token, so text after a stop sequence is sampled
  and thrown away.
* ``logprobs=True``: every returned token's logprob (the sampled token's only).
* ``tools``: shown to the model in its chat format (the renderer's tool format, docs/tools.md); the
  calls it writes come back as the choice's ``tool_calls`` (``stop_reason="tool_calls"``), a call the
  renderer could not read with its ``parse_error`` set, so Inspect tells the model. ``tool_choice``
  ``"auto"`` shows the tools, ``"none"`` does not (and returns no calls).
* ``response_schema`` and a forced ``tool_choice`` (``"any"``, or one function): by constrained
  decoding (``envsuite.constraints``): the reply is a JSON document valid against the schema, or calls
  written in the family's tool format whose arguments follow each tool's schema. Only a local sampling
  client constrains (a remote Tinker sampler would drop the constraint), so elsewhere they are refused.
* refused with a :class:`UnsupportedGenerateConfig` error naming the setting: ``top_logprobs``,
  ``prompt_logprobs``, ``logit_bias``, ``frequency_penalty``, ``presence_penalty``, ``best_of`` > 1
  (the local sampler has no alternatives' logprobs, penalties or logit bias).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessage,
    ChatMessageAssistant,
    GenerateConfig,
    Logprob,
    Logprobs,
    ModelAPI,
    ModelOutput,
    ModelUsage,
    StopReason,
)
from inspect_ai.tool import ToolCall, ToolChoice, ToolFunction, ToolInfo

from envsuite.evals._messages import spec_of, to_envsuite, to_inspect_call

if TYPE_CHECKING:
    import tinker
    from tinker.lib.public_interfaces.api_future import APIFuture

    from envsuite.chat import Message, ToolSpec
    from envsuite.constraints import Constraint
    from envsuite.renderers.base import Renderer

DEFAULT_MAX_TOKENS = 256


@runtime_checkable
class Sampler(Protocol):
    """What the provider samples from: a Tinker ``SamplingClient`` of either backend (its ``sample``
    returns an ``APIFuture``), or anything with its ``sample`` returning an awaitable (a scripted policy)."""

    def sample(
        self, prompt: tinker.ModelInput, num_samples: int, sampling_params: tinker.SamplingParams
    ) -> APIFuture[tinker.SampleResponse] | Awaitable[tinker.SampleResponse]: ...


@dataclass(frozen=True)
class _LocalModel:
    sampling_client: Sampler
    renderer: Renderer


_loaded: dict[tuple[str, str | None], _LocalModel] = {}
"""The models loaded in this process (a bench run drops the ones it loaded: :func:`models_released_after`)."""


def local_model(name: str, base_url: str | None = None) -> _LocalModel:
    """One sampling client and renderer per model per process (shared by every task using it).

    With ``base_url`` the sampling goes through the Tinker API there (e.g. an ``envsuite serve``).
    """
    loaded = _loaded.get((name, base_url))
    if loaded is None:
        from envsuite import RendererConfig
        from envsuite.backends import sampling_client_for

        sampler = sampling_client_for(name, "tinker" if base_url else "local", base_url)
        loaded = _loaded[(name, base_url)] = _LocalModel(sampler, RendererConfig(model_name=name).build())
    return loaded


@contextlib.contextmanager
def models_released_after() -> Iterator[None]:
    """Models first loaded inside are closed and forgotten on the way out (ones loaded before stay):
    their weights, KV and prefix caches go with the last reference.

    Inspect keeps its model objects for the whole process; :class:`EnvsuiteModelAPI` holds only the
    model's name, so a later bench (the demo benches the base model, then the trained one) does not
    carry an earlier one's memory along.
    """
    before = set(_loaded)
    try:
        yield
    finally:
        for key in [key for key in _loaded if key not in before]:
            close = getattr(_loaded.pop(key).sampling_client, "close", None)
            if callable(close):
                close()


def forget_cached_conversations() -> None:
    """Drop the prefix caches of the local models loaded in this process (KV of finished episodes kept
    for turns that would extend them): for a bench when one of its envs finishes, whose episodes never
    return. A conversation still running elsewhere only loses speed (its next turn prefills again)."""
    for loaded in _loaded.values():
        clear = getattr(loaded.sampling_client, "clear_prefix_cache", None)
        if callable(clear):
            clear()


def sampling_params(
    renderer: Renderer,
    *,
    max_tokens: int | None,
    temperature: float | None,
    top_p: float | None = None,
    top_k: int | None = None,
    seed: int | None = None,
) -> tinker.SamplingParams:
    """The sampler's settings for one generation (unset ones: the sampler's neutral values), stopping
    at the chat format's end of turn. Shared by the provider and the bench's direct runner, so both
    sample the same tokens for the same prompt and seed."""
    import tinker

    return tinker.SamplingParams(
        max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
        temperature=1.0 if temperature is None else temperature,
        top_p=1.0 if top_p is None else top_p,
        top_k=-1 if top_k is None else top_k,
        seed=seed,
        stop=renderer.get_stop_sequences(),
    )


async def sample(
    model: _LocalModel, prompt: tinker.ModelInput, num_samples: int, params: tinker.SamplingParams
) -> tinker.SampleResponse:
    """``num_samples`` completions of ``prompt``, awaited without blocking the event loop."""
    from tinker.lib.public_interfaces.api_future import APIFuture

    future = model.sampling_client.sample(prompt, num_samples=num_samples, sampling_params=params)
    if isinstance(future, APIFuture):
        return await asyncio.wrap_future(future.future())
    return await future


class EnvsuiteModelAPI(ModelAPI):
    """Inspect ModelAPI over the envsuite local backend."""

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig = GenerateConfig(),  # noqa: B008  (Inspect's own signature)
        **model_args: object,
    ) -> None:
        super().__init__(
            model_name=model_name, base_url=base_url, api_key=api_key, api_key_vars=[], config=config
        )
        path = model_args.get("path")
        self.envsuite_model: str = str(path) if path else model_name
        """What is loaded: the name, or ``model_args["path"]`` (a directory shown under a short name)."""
        self._base_url = base_url
        self._given: _LocalModel | None = None
        client = model_args.get("sampling_client")
        if client is not None:
            from envsuite import RendererConfig

            if not isinstance(client, Sampler):
                raise TypeError(f"model_args['sampling_client'] has no sample(): {type(client).__name__}")

            self._given = _LocalModel(client, RendererConfig(model_name=self.envsuite_model).build())
        else:
            local_model(self.envsuite_model, base_url)  # load now: a bad model fails here, not mid-eval

    @property
    def _model(self) -> _LocalModel:
        if self._given is not None:
            return self._given
        # Looked up, not held: Inspect keeps this object for the whole process (see models_released_after).
        return local_model(self.envsuite_model, self._base_url)

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
        refuse_unsupported(config, tools, tool_choice)
        shown = [spec_of(info) for info in tools] if tool_choice != "none" else []
        prompt = self._model.renderer.build_generation_prompt(to_envsuite(input), tools=shown)
        constraint = reply_constraint(self._model, config, shown, tool_choice)
        params = sampling_params(
            self._model.renderer,
            max_tokens=config.max_tokens,
            temperature=config.temperature,
            top_p=config.top_p,
            top_k=config.top_k,
            seed=config.seed,
        )
        if constraint is not None:
            from envsuite.backends.local import ConstrainedSamplingParams

            params = ConstrainedSamplingParams(**params.model_dump(), constraint=constraint)
        response = await sample(self._model, prompt, config.num_choices or 1, params)
        choices = [self._choice(seq, config, bool(shown)) for seq in response.sequences]
        output_tokens = sum(len(seq.tokens) for seq in response.sequences)
        return ModelOutput(
            model=self.model_name,
            choices=choices,
            usage=ModelUsage(
                input_tokens=prompt.length,
                output_tokens=output_tokens,
                total_tokens=prompt.length + output_tokens,
            ),
        )

    def _choice(
        self, sequence: tinker.SampledSequence, config: GenerateConfig, with_tools: bool
    ) -> ChatCompletionChoice:
        """One sampled sequence as an Inspect choice: parsed, cut at a stop sequence, with logprobs."""
        renderer = self._model.renderer
        tokens = list(sequence.tokens)
        parsed = renderer.parse_response(tokens)
        content = parsed.message["content"]
        stop_reason: StopReason = "stop" if parsed.clean_stop else "max_tokens"
        cut = cut_at_stop(content, config.stop_seqs or [])
        if cut is not None:
            content, stop_reason = cut, "stop"
        calls = inspect_calls(parsed.message) if with_tools else []
        if calls:
            stop_reason = "tool_calls"
        logprobs = None
        if config.logprobs:
            values = list(sequence.logprobs or [])
            logprobs = Logprobs(
                content=[
                    Logprob(token=str(renderer.tokenizer.decode([t])), logprob=float(lp))
                    for t, lp in zip(tokens, values, strict=False)
                ]
            )
        message = ChatMessageAssistant(
            content=content, tool_calls=calls or None, model=self.model_name, source="generate"
        )
        return ChatCompletionChoice(message=message, stop_reason=stop_reason, logprobs=logprobs)


def inspect_calls(message: Message) -> list[ToolCall]:
    """A parsed reply's calls as Inspect's; an unreadable one carries ``parse_error`` (Inspect then tells
    the model), under the tool name it seems to name."""
    from envsuite.chat import tool_calls_of

    calls = [to_inspect_call(call) for call in tool_calls_of(message)]
    for i, unparsed in enumerate(message.get("unparsed_tool_calls") or []):
        named = re.search(r'"name"\s*:\s*"([^"]{1,64})"', unparsed.raw_text)
        function = named.group(1) if named else "unknown"
        calls.append(
            ToolCall(id=f"unparsed_{i}", function=function, arguments={}, parse_error=unparsed.error)
        )
    return calls


class UnsupportedGenerateConfig(ValueError):
    """A generation setting the envsuite provider cannot honour (it refuses instead of ignoring it)."""


def refuse_unsupported(
    config: GenerateConfig, tools: list[ToolInfo], tool_choice: ToolChoice = "auto"
) -> None:
    """Raise :class:`UnsupportedGenerateConfig` naming every setting the local sampler cannot honour."""
    refused = [
        name
        for name, is_set in (
            ("top_logprobs", bool(config.top_logprobs)),
            ("prompt_logprobs", bool(config.prompt_logprobs)),
            ("logit_bias", bool(config.logit_bias)),
            ("frequency_penalty", bool(config.frequency_penalty)),
            ("presence_penalty", bool(config.presence_penalty)),
            ("best_of", (config.best_of or 1) > 1),
        )
        if is_set
    ]
    if refused:
        raise UnsupportedGenerateConfig(
            f"the envsuite provider cannot honour {', '.join(refused)} (the local sampler returns only "
            "the sampled tokens' logprobs and has no penalties or logit bias); "
            "supported: max_tokens, temperature, top_p, top_k, seed, num_choices, stop_seqs, logprobs, "
            "response_schema, tools with any tool_choice"
        )


def reply_constraint(
    model: _LocalModel, config: GenerateConfig, shown: list[ToolSpec], tool_choice: ToolChoice
) -> Constraint | None:
    """The constraint a generation's reply is sampled under: ``response_schema``, a forced call (None:
    free). Refused where the sampler is not a local one, which alone applies constraints."""
    from envsuite.constraints import Constraint
    from envsuite.renderers import ToolCallRule
    from envsuite.renderers import ToolChoice as CallChoice

    schema = (
        config.response_schema.json_schema.model_dump(exclude_none=True) if config.response_schema else None
    )
    if isinstance(tool_choice, ToolFunction):
        rule = ToolCallRule(CallChoice.FUNCTION, function=tool_choice.name, parallel=False)
    else:
        rule = ToolCallRule(CallChoice.REQUIRED if tool_choice == "any" else CallChoice.AUTO)
    forced = bool(shown) and rule.choice is not CallChoice.AUTO
    if not forced and schema is None:
        return None
    from envsuite.backends.local import LocalSamplingClient

    if not isinstance(model.sampling_client, LocalSamplingClient):
        raise UnsupportedGenerateConfig(
            "response_schema and a forced tool_choice need constrained decoding, which only a local "
            f"sampling client does (this model samples through {type(model.sampling_client).__name__})"
        )
    if shown:
        return model.renderer.tool_call_constraint(shown, rule, content_schema=schema if not forced else None)
    return Constraint.json_schema(schema or {})


def cut_at_stop(text: str, stop_seqs: list[str]) -> str | None:
    """``text`` up to the earliest stop sequence in it, or None when it holds none."""
    found = [i for i in (text.find(s) for s in stop_seqs if s) if i >= 0]
    return text[: min(found)] if found else None
