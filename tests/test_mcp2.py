"""The tests that need mcp 2 in the test process itself, run in a child pytest that sees it.

The dev install keeps mcp 1.30 (openenv's ``fastmcp`` needs ``mcp<2``), while verifiers 0.4 imports
mcp 2 and envsuite's MCP client also runs on mcp 2 (the ``mcp`` extra). ``make install`` puts mcp 2.3
with the MCP servers in a folder of their own (``.venv/mcp-servers``, every other requirement of theirs
met by the venv); a child pytest with that folder first on ``PYTHONPATH`` runs on mcp 2.3 as an install
with the ``mcp`` extra does: the verifiers adapter's tests (vf-eval against ``envsuite serve``) and the
MCP client's tests again, the client now on mcp 2's API.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from envsuite.adapters.mcp import server_packages

ROOT = Path(__file__).resolve().parents[1]
MCP2_TESTS = ("tests/test_verifiers.py", "tests/test_mcp.py")
PROBE = "import mcp_types, mcp; from mcp.server.mcpserver import MCPServer; print(mcp_types.__file__)"


def test_the_verifiers_and_mcp_client_tests_pass_on_mcp_2() -> None:
    folder = server_packages()
    if folder is None:
        pytest.skip("no mcp-servers folder (`make install` makes .venv/mcp-servers with mcp 2.3)")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (folder, os.environ.get("PYTHONPATH")) if p),
    }
    probe = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert probe.returncode == 0 and probe.stdout.startswith(folder), probe.stderr  # the child sees mcp 2
    child = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *MCP2_TESTS]
    done = subprocess.run(child, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    tail = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    assert " skipped" not in done.stdout.splitlines()[-1], tail  # every test ran on mcp 2, none skipped
