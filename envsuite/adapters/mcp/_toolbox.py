"""An MCP server's tools as envsuite :class:`~envsuite.tools.Tool`\\ s: start, list, call, shut down.

:class:`McpToolbox` owns one client session in a thread of its own with its own event loop, so its tools
can be called from any env's loop (a session's anyio task group must be entered and left in one task;
envs are stepped from many). Invariants:

* :meth:`McpToolbox.start` connects, initializes and lists every tool (all pages) within the server's
  ``start_timeout_s``, or raises :class:`McpStartError` with the server's stderr tail and leaves nothing
  running;
* an :class:`McpTool`'s ``run`` never raises: the server's ``is_error`` results, protocol errors, a dead
  server and a call past ``call_timeout_s`` are all a :class:`~envsuite.tools.ToolResult` whose
  ``metadata["error"]`` is set, its message ``Error: ...`` (so :func:`~envsuite.tools.run_tool_call`
  counts it as a failed call and the model reads why);
* :meth:`McpToolbox.close` (idempotent, also on interpreter exit) ends the session, kills a sandboxed
  server with its whole tree and removes its sandbox; no process outlives it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import threading
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from envsuite.adapters.mcp._config import McpServer, Transport, server_env
from envsuite.adapters.mcp._sdk import ClientSession, TransportStreams, field, http_streams
from envsuite.adapters.mcp._sdk import types as mcp_types
from envsuite.adapters.mcp._transport import process_streams, spawn_server
from envsuite.chat import Message, canonical_json
from envsuite.sandbox import Sandbox, SandboxConfig, SandboxProcess
from envsuite.tools import ToolError, ToolInput, ToolResult, error_message

_LIVE: weakref.WeakSet[McpToolbox] = weakref.WeakSet()
_SHARED: dict[tuple[McpServer, SandboxConfig | None], McpToolbox] = {}
_SHARED_LOCK = threading.Lock()


class McpStartError(RuntimeError):
    """The server could not be started, reached, initialized or listed."""


@dataclass(frozen=True)
class McpTool:
    """One server tool, shown to the model under ``name`` (the server's name plus the config's prefix)."""

    name: str
    description: str
    parameters_schema: dict[str, Any]
    remote_name: str
    toolbox: McpToolbox

    async def run(self, input: ToolInput) -> ToolResult:
        return await self.toolbox.call(
            self.remote_name, input.arguments, call_id=input.call_id, name=self.name
        )


class McpToolbox:
    """A connection to one MCP server and its tools (see the module docstring). Use as a context manager
    (sync or async) or call :meth:`start` and :meth:`close`."""

    def __init__(
        self,
        server: McpServer,
        *,
        sandbox_config: SandboxConfig | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        """``sandbox``: run a sandboxed stdio server in this existing sandbox (a workspace episode's, so
        the server works on the episode's files; the sandbox stays open after :meth:`close`); by
        default the toolbox makes its own from ``sandbox_config`` and removes it on close."""
        self.server = server
        self.sandbox_config = sandbox_config
        self.sandbox: Sandbox | None = sandbox
        """The sandbox a sandboxed stdio server runs in."""
        self._owns_sandbox = sandbox is None
        self.process: SandboxProcess | None = None
        """The sandboxed server's process (its pid, its stderr)."""
        self._tools: list[McpTool] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: ClientSession | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._closed = False

    # -- lifetime -----------------------------------------------------------------------------------

    def start(self) -> list[McpTool]:
        """Connect and list the tools (blocking); idempotent while open, safe from many threads."""
        with self._start_lock:
            with self._lock:
                if self._closed:
                    raise McpStartError("this toolbox was closed; make a new one")
                if self._thread is not None:
                    return list(self._tools)
                ready: concurrent.futures.Future[list[mcp_types.Tool]] = concurrent.futures.Future()
                self._thread = threading.Thread(
                    target=self._main, args=(ready,), name="mcp-toolbox", daemon=True
                )
                self._thread.start()
            try:
                listed = ready.result(timeout=self.server.start_timeout_s)
            except BaseException as exc:
                detail = self._stderr_tail()
                self.close()
                timed_out = isinstance(exc, concurrent.futures.TimeoutError)
                reason = "timed out" if timed_out else f"{type(exc).__name__}: {exc}"
                raise McpStartError(
                    f"MCP server {self._describe()} did not start: {reason}\n{detail}".strip()
                ) from exc
            prefix = self.server.name_prefix
            self._tools = [
                McpTool(
                    prefix + t.name,
                    t.description or "",
                    dict(field(t, "input_schema", "inputSchema")),
                    t.name,
                    self,
                )
                for t in listed
            ]
            _LIVE.add(self)
            return list(self._tools)

    @property
    def tools(self) -> list[McpTool]:
        """The listed tools (empty before :meth:`start`)."""
        return list(self._tools)

    @property
    def closed(self) -> bool:
        """Closed after a start (a toolbox is started once; make a new one to reconnect)."""
        return self._closed

    def close(self) -> None:
        """End the session and stop the server (idempotent)."""
        with self._lock:
            self._closed = self._closed or self._thread is not None
            thread, self._thread = self._thread, None
            loop, stop = self._loop, self._stop
        if thread is None:
            return
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=30)
        if self.process is not None:
            self.process.close()  # a server that outlived its session's exit
        if self.sandbox is not None and self._owns_sandbox:
            self.sandbox.close()
        _LIVE.discard(self)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.close)

    # -- calls --------------------------------------------------------------------------------------

    async def call(
        self, tool: str, arguments: dict[str, Any], *, call_id: str | None = None, name: str | None = None
    ) -> ToolResult:
        """Call ``tool`` on the server from any event loop; every failure is an error result."""
        shown = name or tool
        loop, session = self._loop, self._session
        if loop is None or session is None or self._thread is None:
            return _error(f"{shown}: the MCP server is not running", call_id, shown)
        timeout = self.server.call_timeout_s
        future = asyncio.run_coroutine_threadsafe(session.call_tool(tool, arguments), loop)
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except TimeoutError:
            return _error(f"{shown} took longer than {timeout} s", call_id, shown, ToolError.TIMEOUT)
        except Exception as exc:  # protocol errors, a dead server: the model's error message
            return _error(f"{shown} failed: {type(exc).__name__}: {exc}", call_id, shown)
        text = _content_text(result)
        if field(result, "is_error", "isError"):
            return _error(text or f"{shown} reported an error", call_id, shown)
        message: Message = {"role": "tool", "content": text, "name": shown}
        if call_id:
            message["tool_call_id"] = call_id
        return ToolResult([message])

    # -- the session's thread -------------------------------------------------------------------------

    def _main(self, ready: concurrent.futures.Future[list[mcp_types.Tool]]) -> None:
        with contextlib.suppress(BaseException):  # a failure before ready is reported through it
            asyncio.run(self._serve(ready))
        if not ready.done():
            ready.set_exception(McpStartError("the session ended before its tools were listed"))

    async def _serve(self, ready: concurrent.futures.Future[list[mcp_types.Tool]]) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            async with self._streams() as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                listed = await _list_all(session)
                self._session = session
                if not ready.set_running_or_notify_cancel():
                    return
                ready.set_result(listed)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
        finally:
            self._session = None

    @contextlib.asynccontextmanager
    async def _streams(self) -> AsyncIterator[TransportStreams]:
        server = self.server
        if server.transport is Transport.STREAMABLE_HTTP:
            assert server.url is not None
            async with http_streams(server.url) as streams:
                yield streams
        elif server.sandboxed:
            if self.sandbox is None:
                self.sandbox = Sandbox(self.sandbox_config)
            self.process = spawn_server(self.sandbox, server)
            async with process_streams(self.process) as streams:
                yield streams
        else:
            from mcp.client.stdio import StdioServerParameters, stdio_client

            command, *args = server.command
            params = StdioServerParameters(command=command, args=args, env=server_env(server))
            async with stdio_client(params) as streams:
                yield streams

    def _stderr_tail(self) -> str:
        return self.process.stderr_tail(2000) if self.process is not None else ""

    def _describe(self) -> str:
        return self.server.url or " ".join(self.server.command)


async def _list_all(session: ClientSession) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    while True:
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools += page.tools
        cursor = field(page, "next_cursor", "nextCursor")
        if not cursor:
            return tools


def _content_text(result: mcp_types.CallToolResult) -> str:
    """The result's text blocks joined; other blocks (images, resources) as JSON; else the structured part."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        else:
            parts.append(canonical_json(block.model_dump(mode="json", by_alias=True, exclude_none=True)))
    structured = field(result, "structured_content", "structuredContent")
    if not parts and structured is not None:
        parts.append(canonical_json(structured))
    return "\n".join(parts)


def _error(text: str, call_id: str | None, name: str, kind: ToolError = ToolError.FAILED) -> ToolResult:
    return ToolResult([error_message(text, call_id, name)], metadata={"error": kind.value})


def shared_toolbox(server: McpServer, sandbox_config: SandboxConfig | None = None) -> McpToolbox:
    """The process's one toolbox for ``server`` (for stateless servers shared by many episodes: one
    start, not one per episode); start it with :meth:`McpToolbox.start`. Closed at interpreter exit;
    a closed one, or one whose sandboxed server died, is replaced on the next request."""
    key = (server, sandbox_config)
    with _SHARED_LOCK:
        box = _SHARED.get(key)
        if box is not None and box.process is not None and box.process.poll() is not None:
            box.close()  # the server died (its CPU budget, a crash): the next episode gets a fresh one
        if box is None or box.closed:
            box = _SHARED[key] = McpToolbox(server, sandbox_config=sandbox_config)
        return box


@atexit.register
def _close_all() -> None:
    for toolbox in list(_LIVE):
        toolbox.close()
