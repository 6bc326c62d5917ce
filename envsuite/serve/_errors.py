"""The server's own error for what a client names but the server does not have (a 404)."""

from __future__ import annotations


class NotFound(LookupError):
    """An id (session, model, sampler, episode) or path the server does not know: a 404 for the client."""
