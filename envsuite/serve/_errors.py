"""The server's own errors: what a client names but the server does not have (a 404), and a sampling
engine that is down for now (a 503 with ``Retry-After``)."""

from __future__ import annotations

import math


class NotFound(LookupError):
    """An id (session, model, sampler, episode) or path the server does not know: a 404 for the client."""


class SamplerDown(RuntimeError):
    """The vLLM server the requests sample on is down (``--sampling-engine vllm``): a 503.

    ``retry_after_s`` is when it should be back (it is being restarted), sent as ``Retry-After`` so
    clients (the tinker SDK, OpenAI clients) retry then rather than fail; None when it will not come
    back (the watchdog gave up): the 503 then says to restart ``envsuite serve``.
    """

    def __init__(self, message: str, retry_after_s: float | None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        if self.retry_after_s is None:
            return {}
        return {"Retry-After": str(max(1, math.ceil(self.retry_after_s)))}
