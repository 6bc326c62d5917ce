"""The two generations of the official MCP SDK this adapter's client runs on, behind one set of names.

mcp 1 (1.2x: the dev install's, since openenv's ``fastmcp`` needs ``mcp<2``) keeps its types in
``mcp.types`` with camelCase fields; mcp 2 (``>=2.3``: the ``mcp`` extra) moved them to the ``mcp_types``
package with snake_case fields, parses JSON-RPC through a type adapter and yields two streams from its
HTTP client where mcp 1 yields three. Both speak the same protocol (a 1.30 client and a 2.3 server
negotiate ``2025-11-25``), so the client here may be either generation while the servers it starts run
on their own (:data:`envsuite.adapters.mcp.SERVER_PACKAGES`). Everything else in the adapter reads the
SDK only through this module.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import AsyncIterator
from typing import Any

from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.session import ClientSession
from mcp.shared.message import SessionMessage

MCP2 = importlib.util.find_spec("mcp_types") is not None
"""True where the client runs on mcp 2 (its types package is installed)."""

if MCP2:
    import mcp_types as types  # type: ignore[import-not-found,unused-ignore]
else:
    import mcp.types as types  # type: ignore[no-redef,unused-ignore]

TransportStreams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]
"""A transport as ``ClientSession`` takes it: what the server sent, what to send it."""

__all__ = [
    "MCP2",
    "ClientSession",
    "SessionMessage",
    "TransportStreams",
    "field",
    "http_streams",
    "parse_message",
    "serialize_message",
    "types",
]


def field(model: Any, snake: str, camel: str) -> Any:
    """``model``'s field by mcp 2's name or, failing that, mcp 1's (``input_schema``/``inputSchema``)."""
    return getattr(model, snake, None) if hasattr(model, snake) else getattr(model, camel, None)


def parse_message(line: bytes) -> SessionMessage:
    """One JSON-RPC line as the session's message (raises ``ValueError`` on a malformed line)."""
    if MCP2:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    return SessionMessage(types.JSONRPCMessage.model_validate_json(line))


def serialize_message(message: SessionMessage) -> str:
    """The message as one JSON line's text, framed as each SDK's own stdio client frames it."""
    if MCP2:
        return str(message.message.model_dump_json(by_alias=True, exclude_unset=True))
    return str(message.message.model_dump_json(by_alias=True, exclude_none=True))


@contextlib.asynccontextmanager
async def http_streams(url: str) -> AsyncIterator[TransportStreams]:
    """The SDK's streamable HTTP client's two streams (mcp 1 adds a session-id getter, dropped here)."""
    from mcp.client.streamable_http import streamable_http_client

    async with streamable_http_client(url) as streams:
        yield streams[0], streams[1]
