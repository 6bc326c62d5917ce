"""The MCP SDK's transport contract (a read and a write stream of ``SessionMessage``) over a process
spawned in envsuite's sandbox: one JSON-RPC message per line on its stdin and stdout, as the SDK's own
``stdio_client`` frames them. Leaving the context kills the process with its tree (which is also what
ends the blocked reader: its pipe reaches end of file)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio
import anyio.to_thread

from envsuite.adapters.mcp._config import McpServer, sandbox_binds, sandbox_pythonpath
from envsuite.adapters.mcp._sdk import SessionMessage, TransportStreams, parse_message, serialize_message
from envsuite.sandbox import Sandbox, SandboxProcess


def spawn_server(box: Sandbox, server: McpServer) -> SandboxProcess:
    """Start ``server``'s command in ``box`` with the server packages and this interpreter's packages
    visible read-only (the server packages first: their mcp may be a newer generation than the client's)."""
    env = {"PYTHONPATH": sandbox_pythonpath(), "PYTHONUNBUFFERED": "1", **server.env}
    return box.spawn(server.command, env=env, limits=server.limits, ro_binds=sandbox_binds())


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return parse_message(line)
    except ValueError as exc:  # the session surfaces it to the pending request
        return exc


@contextlib.asynccontextmanager
async def process_streams(process: SandboxProcess) -> AsyncIterator[TransportStreams]:
    """The SDK's streams over ``process``'s pipes; the process is closed on exit."""
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        async with read_writer:
            while True:
                line = await anyio.to_thread.run_sync(process.stdout.readline, abandon_on_cancel=True)
                if not line:
                    return  # end of file: the server exited or was killed
                if line.strip():
                    await read_writer.send(_parse(line))

    async def writer() -> None:
        async with write_reader:
            async for message in write_reader:
                data = serialize_message(message) + "\n"
                try:
                    await anyio.to_thread.run_sync(_write, process, data.encode("utf-8"))
                except OSError:
                    await read_writer.aclose()  # a dead server: pending requests see the stream end
                    return

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(reader)
        tasks.start_soon(writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(process.close)
            tasks.cancel_scope.cancel()


def _write(process: SandboxProcess, data: bytes) -> None:
    process.stdin.write(data)
    process.stdin.flush()
