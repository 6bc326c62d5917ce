"""A vLLM server as a sampling client: prompt token ids in, sampled token ids and their logprobs out.

:class:`VllmSamplingClient` has the slice of ``tinker.SamplingClient`` the completers use (``sample``
returning an awaitable ``tinker.SampleResponse``, ``get_base_model``), over vLLM's OpenAI-compatible
``/v1/completions``: the prompt goes as token ids, and the reply comes back as token ids
(``return_token_ids``) with one logprob per token, so nothing is re-tokenized on either side. Asked for
(``topk_sample_logprobs``), each position's most likely alternatives come back by token id too
(``return_tokens_as_token_ids``).

Stop conditions follow the local backend's (``envsuite.backends.local``): ``None`` stops at the model's
end-of-sequence token, ``[]`` never stops early, strings stop once the sampled text holds one, token ids
stop at any of them; an explicit list replaces the end-of-sequence default (``ignore_eos``), and the
returned tokens include the stop token(s), as vLLM returns them.

Seeds: vLLM gives every sample of one ``n > 1`` request the same seed (identical replies), so a seeded
``num_samples > 1`` call sends one request per sample, the i-th seeded ``seed + i``.

:class:`VllmEndpoint` is the server's management side: health, the models it serves, and LoRA adapters
loaded and unloaded at runtime (the server needs ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``).

Every failure to reach the server (refused, reset, cut off mid-reply, a 5xx from a dead engine) raises
:class:`VllmConnectionError`, so callers can tell a lost server from a bad request (:class:`VllmRequestError`).
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx
    import tinker

REQUEST_TIMEOUT_S = 600.0
"""One sampling request's bound (a long reply under load on 2 cores takes minutes)."""
MAX_TOPK_LOGPROBS = 20
"""The most alternatives per position (vLLM's default ``--max-logprobs``, and the local engine's bound)."""
VLLM_NEG_INF = -9999.0
"""What vLLM's OpenAI server writes for a logprob of ``-inf`` (a token top-k or top-p removed)."""


class VllmConnectionError(ConnectionError):
    """The server could not be reached or died while answering (retry elsewhere, or after a restart)."""


class VllmRequestError(ValueError):
    """The server refused the request (4xx): bad settings, an unknown adapter, a prompt too long."""


class VllmVersionMismatch(RuntimeError):
    """A reply came from another model or adapter than the one asked for."""


@dataclass(frozen=True)
class LoadedAdapter:
    """A LoRA adapter the server holds, by the name requests use."""

    name: str
    path: str


async def _post(url: str, body: dict[str, Any], timeout_s: float) -> httpx.Response:
    import httpx

    try:
        async with httpx.AsyncClient(timeout=timeout_s) as http:
            response = await http.post(url, json=body)
    except httpx.TransportError as exc:  # refused, reset, cut off, timed out
        raise VllmConnectionError(f"vLLM at {url}: {type(exc).__name__}: {exc}") from exc
    if response.status_code >= 500:
        raise VllmConnectionError(f"vLLM at {url}: {response.status_code} {response.text[:300]}")
    if response.status_code >= 400:
        raise VllmRequestError(f"vLLM at {url}: {response.status_code} {response.text[:500]}")
    return response


class VllmEndpoint:
    """A vLLM server's management calls (health, models, runtime LoRA adapters)."""

    def __init__(self, url: str, timeout_s: float = 120.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    async def healthy(self) -> bool:
        import httpx

        try:
            async with httpx.AsyncClient(timeout=10.0) as http:
                return (await http.get(f"{self.url}/health")).status_code == 200
        except httpx.HTTPError:
            return False

    async def models(self) -> list[str]:
        """The names the server samples under: its base model and every loaded adapter."""
        import httpx

        try:
            async with httpx.AsyncClient(timeout=self.timeout_s) as http:
                response = await http.get(f"{self.url}/v1/models")
        except httpx.TransportError as exc:
            raise VllmConnectionError(f"vLLM at {self.url}: {exc}") from exc
        response.raise_for_status()
        return [str(m["id"]) for m in response.json()["data"]]

    async def load_adapter(self, name: str, path: str) -> LoadedAdapter:
        """Load the peft-format adapter directory ``path`` as ``name``, replacing one of that name (a
        resumed run publishes its versions again)."""
        body = {"lora_name": name, "lora_path": path, "load_inplace": True}
        await _post(f"{self.url}/v1/load_lora_adapter", body, self.timeout_s)
        return LoadedAdapter(name, path)

    async def unload_adapter(self, name: str) -> None:
        await _post(f"{self.url}/v1/unload_lora_adapter", {"lora_name": name}, self.timeout_s)


class VllmSamplingClient:
    """Samples ``model`` (the server's base model name, or a loaded adapter's) on the server at ``url``.

    ``base_model`` is what :meth:`get_base_model` reports (an envsuite model name, so renderers and
    tokenizers resolve as for a local client). Every response's ``model`` is checked against ``model``
    (:class:`VllmVersionMismatch`), so a rollout's recorded version is the one that sampled it.
    """

    def __init__(
        self, url: str, model: str, base_model: str, *, timeout_s: float = REQUEST_TIMEOUT_S
    ) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.base_model = base_model
        self.timeout_s = timeout_s
        self._ids = itertools.count()
        self._client_id = uuid.uuid4().hex[:12]

    def get_base_model(self) -> str:
        return self.base_model

    async def sample(
        self,
        prompt: tinker.ModelInput,
        num_samples: int,
        sampling_params: tinker.SamplingParams,
        *,
        topk_sample_logprobs: int = 0,
    ) -> tinker.SampleResponse:
        """``topk_sample_logprobs`` (at most :data:`MAX_TOPK_LOGPROBS`) fills each sequence's
        ``topk_logprobs`` as the local engine does: the most likely tokens at each sampled position under
        the distribution sampled from (``processed_logprobs``), most likely first, tokens that
        ``top_k``/``top_p`` removed left out."""
        import tinker

        if num_samples < 1:
            raise ValueError(f"num_samples must be at least 1, got {num_samples}")
        if not 0 <= topk_sample_logprobs <= MAX_TOPK_LOGPROBS:
            raise ValueError(
                f"topk_sample_logprobs must be in [0, {MAX_TOPK_LOGPROBS}], got {topk_sample_logprobs}"
            )
        tokens = list(prompt.to_ints())
        body = _request_body(self.model, tokens, sampling_params, topk_sample_logprobs)
        seed = sampling_params.seed
        if seed is None or num_samples == 1:
            choices = await self._complete(dict(body, n=num_samples))
        else:
            replies = await asyncio.gather(
                *(self._complete(dict(body, n=1, seed=(seed + i) % 2**63)) for i in range(num_samples))
            )
            choices = [c for reply in replies for c in reply]
        return tinker.SampleResponse(sequences=[self._sequence(c, topk_sample_logprobs) for c in choices])

    async def _complete(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        reply = (await _post(f"{self.url}/v1/completions", body, self.timeout_s)).json()
        if reply.get("model") != self.model:
            raise VllmVersionMismatch(
                f"asked vLLM for {self.model!r}, the reply came from {reply.get('model')!r}"
            )
        choices: list[dict[str, Any]] = sorted(reply["choices"], key=lambda c: int(c["index"]))
        return choices

    def _sequence(self, choice: dict[str, Any], topk: int) -> tinker.SampledSequence:
        import numpy as np
        import tinker

        tokens = [int(t) for t in choice["token_ids"]]
        logprobs = [float(x) for x in choice["logprobs"]["token_logprobs"]]
        if len(logprobs) != len(tokens):
            raise VllmConnectionError(f"vLLM returned {len(tokens)} tokens but {len(logprobs)} logprobs")
        top = None
        if topk:
            from envsuite.backends._topk import topk_matrices

            top = topk_matrices([_top_row(row, topk) for row in choice["logprobs"]["top_logprobs"]])
        return tinker.SampledSequence(
            stop_reason="length" if choice.get("finish_reason") == "length" else "stop",
            sequence_id=f"vllm:{self._client_id}:{next(self._ids)}",
            tokens_np=np.asarray(tokens, dtype=np.int32),
            logprobs_np=np.asarray(logprobs, dtype=np.float32),
            topk_logprobs_np=top,
        )


def _top_row(row: dict[str, float] | None, k: int) -> list[tuple[int, float]]:
    """One position's ``top_logprobs`` (keys ``token_id:N``: ``return_tokens_as_token_ids``) as the ``k``
    most likely ``(token, logprob)`` pairs. vLLM lists the sampled token beside the top ``k`` (``k + 1``
    entries when it is not among them) and writes a removed token's ``-inf`` as -9999."""
    pairs = {int(key.rsplit(":", 1)[1]): float(value) for key, value in (row or {}).items()}
    kept = [(token, value) for token, value in pairs.items() if value > VLLM_NEG_INF]
    return sorted(kept, key=lambda pair: -pair[1])[:k]


def _request_body(
    model: str, prompt: list[int], params: tinker.SamplingParams, topk_sample_logprobs: int = 0
) -> dict[str, Any]:
    """The ``/v1/completions`` body for one prompt under tinker's sampling params (see module docs)."""
    if not prompt:
        raise ValueError("the prompt is empty")
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": params.max_tokens if params.max_tokens is not None else 16,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,
        "logprobs": topk_sample_logprobs,  # 0: the sampled token's own logprob, no alternatives
        "return_token_ids": True,
        "skip_special_tokens": False,
    }
    if topk_sample_logprobs:
        body["return_tokens_as_token_ids"] = True  # alternatives by id (``token_id:N``), not by text
    if params.seed is not None:
        body["seed"] = params.seed % 2**63
    body.update(_stop_fields(params.stop))
    return body


def _stop_fields(stop: str | Sequence[str] | Sequence[int] | None) -> dict[str, Any]:
    if stop is None:
        return {}
    items = [stop] if isinstance(stop, str) else list(stop)
    if not items:
        return {"ignore_eos": True}
    if all(isinstance(s, str) for s in items):
        if any(not s for s in items):
            raise ValueError("stop strings must be non-empty")
        return {"stop": items, "include_stop_str_in_output": True, "ignore_eos": True}
    token_ids = [s for s in items if isinstance(s, int) and not isinstance(s, bool)]
    if len(token_ids) == len(items):
        return {"stop_token_ids": token_ids, "ignore_eos": True}
    raise TypeError(f"stop must be strings or token ids, not a mix: {items!r}")
