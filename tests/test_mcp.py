"""MCP tools with real servers: mcp-server-time over stdio inside envsuite's sandbox, and a small server
built with the SDK's own server class over streamable HTTP on 127.0.0.1. List, call, a failing call is
the tool's error result, a slow call times out as one, and closing leaves no process behind.

The client runs on whichever SDK generation this interpreter has (mcp 1.30 in the dev install; the
servers in the sandbox run on mcp 2.3 from `make install`'s mcp-servers folder); tests/test_mcp2.py runs
this file again with mcp 2.3 as the client's SDK too."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import uvicorn

from envsuite.adapters.mcp import McpServer, McpStartError, McpToolbox, server_module_available
from envsuite.chat import ToolCall
from envsuite.sandbox import Sandbox
from envsuite.tools import ToolError as CallError
from envsuite.tools import ToolInput, ToolOutcome, run_tool_call, tool_spec
from tests.support.sandbox import needs_sandbox

TIME_SERVER = McpServer.python_module("mcp_server_time", "--local-timezone", "UTC")


needs_servers = pytest.mark.skipif(
    not (server_module_available("mcp_server_time") and server_module_available("mcp_server_git")),
    reason="mcp-server-time and mcp-server-git are not installed (`make install` puts them in .venv/mcp-servers)",
)


@pytest.fixture(scope="module")
def time_box() -> Iterator[McpToolbox]:
    if needs_sandbox.args[0]:
        pytest.skip(needs_sandbox.kwargs["reason"])
    if needs_servers.args[0]:
        pytest.skip(needs_servers.kwargs["reason"])
    with McpToolbox(TIME_SERVER) as box:
        yield box


def test_a_sandboxed_stdio_server_lists_its_tools_in_the_models_format(time_box: McpToolbox) -> None:
    specs = {spec["name"]: spec for spec in map(tool_spec, time_box.tools)}
    assert set(specs) == {"get_current_time", "convert_time"}
    convert = specs["convert_time"]["parameters"]
    assert set(convert["required"]) == {"source_timezone", "time", "target_timezone"}
    assert time_box.sandbox is not None and time_box.sandbox.isolated


def test_a_call_runs_on_the_server_and_agrees_with_zoneinfo(time_box: McpToolbox) -> None:
    call = ToolCall.create(
        "convert_time",
        {"source_timezone": "Asia/Tokyo", "time": "09:30", "target_timezone": "America/New_York"},
        "call_1",
    )
    outcome = asyncio.run(run_tool_call(time_box.tools, call))
    assert outcome.ok, outcome.messages
    text = outcome.messages[0]["content"]
    today = datetime.now(ZoneInfo("Asia/Tokyo")).date()
    tokyo = datetime(today.year, today.month, today.day, 9, 30, tzinfo=ZoneInfo("Asia/Tokyo"))
    assert tokyo.astimezone(ZoneInfo("America/New_York")).isoformat() in text
    assert outcome.messages[0]["tool_call_id"] == "call_1"


def test_a_failing_call_is_the_tools_error_result(time_box: McpToolbox) -> None:
    bad_zone = ToolCall.create(
        "convert_time", {"source_timezone": "Mars/Olympus", "time": "09:30", "target_timezone": "UTC"}, "c"
    )
    outcome = asyncio.run(run_tool_call(time_box.tools, bad_zone))
    assert outcome.error is CallError.FAILED
    assert (
        outcome.messages[0]["content"].startswith("Error:")
        and "Mars/Olympus" in outcome.messages[0]["content"]
    )
    missing = ToolCall.create("convert_time", {"time": "09:30"}, "d")
    assert asyncio.run(run_tool_call(time_box.tools, missing)).error is CallError.BAD_ARGUMENTS
    # Called directly (no schema check first), the server's own refusal is still a result, not a raise.
    direct = asyncio.run(time_box.tools[1].run(ToolInput({"time": "nonsense"})))
    assert direct.metadata["error"] == "failed" and direct.messages[0]["content"].startswith("Error:")


def test_closing_a_sandboxed_server_leaves_no_process_and_no_root() -> None:
    if needs_sandbox.args[0]:
        pytest.skip(needs_sandbox.kwargs["reason"])
    box = McpToolbox(TIME_SERVER)
    box.start()
    assert box.process is not None and box.sandbox is not None
    pid, root = box.process.pid, box.sandbox.root
    assert os.path.exists(f"/proc/{pid}")
    box.close()
    assert not os.path.exists(f"/proc/{pid}")
    assert not root.exists()
    after = asyncio.run(box.tools[0].run(ToolInput({"timezone": "UTC"})))
    assert after.metadata["error"] and "not running" in after.messages[0]["content"]


def test_a_server_that_cannot_start_raises_with_its_stderr() -> None:
    if needs_sandbox.args[0]:
        pytest.skip(needs_sandbox.kwargs["reason"])
    with pytest.raises(McpStartError, match="no_such_mcp_module"):
        McpToolbox(McpServer.python_module("no_such_mcp_module", start_timeout_s=30)).start()


# -- streamable HTTP on loopback ---------------------------------------------------------------------


def _demo_server() -> Any:
    """The SDK's own server class: ``MCPServer`` in mcp 2, ``FastMCP`` in mcp 1 (same decorators)."""
    try:
        from mcp.server.mcpserver import MCPServer as Server
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:  # mcp 1
        from mcp.server.fastmcp import FastMCP as Server  # type: ignore[assignment,no-redef,unused-ignore]
        from mcp.server.fastmcp.exceptions import ToolError  # type: ignore[assignment,no-redef,unused-ignore]

    server = Server("envsuite-test")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        await asyncio.sleep(seconds)
        return "done"

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails, with a message the client sees (an anticipated failure)."""
        raise ToolError(reason)

    return server


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = _demo_server().streamable_http_app()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/mcp"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


def test_a_streamable_http_server_lists_calls_and_reports_errors(http_url: str) -> None:
    with McpToolbox(McpServer.http(http_url, call_timeout_s=1.0, name_prefix="demo_")) as box:
        tools = {t.name: t for t in box.tools}
        assert set(tools) == {"demo_add", "demo_slow", "demo_fail"}

        async def calls() -> list[ToolOutcome]:
            return [
                await run_tool_call(tools, ToolCall.create("demo_add", {"a": 2, "b": 40}, "1")),
                await run_tool_call(tools, ToolCall.create("demo_fail", {"reason": "boom"}, "2")),
                await run_tool_call(
                    tools, ToolCall.create("demo_slow", {"seconds": 30}, "3"), timeout_s=None
                ),
                await run_tool_call(tools, ToolCall.create("demo_add", {"a": 1, "b": 1}, "4")),
            ]

        added, failed, slow, after = asyncio.run(calls())
    assert added.ok and added.messages[0]["content"] == "42"
    assert failed.error is CallError.FAILED and "boom" in failed.messages[0]["content"]
    assert slow.error is CallError.FAILED and "longer than 1.0 s" in slow.messages[0]["content"]
    assert after.ok and after.messages[0]["content"] == "2"


def test_a_server_in_an_existing_sandbox_works_on_its_files() -> None:
    """A workspace episode's sandbox: mcp-server-git reads the repository its shell made; closing the
    toolbox stops the server and leaves the sandbox (the episode's) open."""
    if needs_sandbox.args[0] or needs_servers.args[0]:
        pytest.skip(
            needs_sandbox.kwargs["reason"] if needs_sandbox.args[0] else needs_servers.kwargs["reason"]
        )
    with Sandbox() as workspace:
        made = workspace.run_shell(
            "git init -q repo && cd repo && echo hi > notes.txt && git add notes.txt"
            " && git -c user.name=a -c user.email=a@b commit -qm 'first notes'"
        )
        assert made.exit_code == 0, made.stderr
        git = McpServer.python_module("mcp_server_git", "--repository", "/work/repo")
        with McpToolbox(git, sandbox=workspace) as box:
            tools = {t.name: t for t in box.tools}
            assert {"git_status", "git_log", "git_diff"} <= set(tools)
            log = asyncio.run(
                run_tool_call(tools, ToolCall.create("git_log", {"repo_path": "/work/repo"}, "1"))
            )
            outside = asyncio.run(
                run_tool_call(tools, ToolCall.create("git_status", {"repo_path": "/usr"}, "2"))
            )
            assert box.process is not None
            pid = box.process.pid
        assert log.ok and "first notes" in log.messages[0]["content"], log.messages
        assert outside.error is CallError.FAILED
        assert not os.path.exists(f"/proc/{pid}")
        assert not workspace.closed and workspace.run(["true"]).exit_code == 0
