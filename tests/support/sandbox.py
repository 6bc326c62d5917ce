"""Whether envsuite's sandbox isolates on this machine, checked once for every test file that runs it
(``make install`` installs bubblewrap; without it those tests skip saying why)."""

from __future__ import annotations

import pytest

from envsuite.sandbox import SandboxConfig, SandboxSupport, SandboxUnavailableError, sandbox_support

SUPPORT: SandboxSupport | None
try:
    SUPPORT = sandbox_support(SandboxConfig())
    WHY_NOT = ""
except SandboxUnavailableError as exc:
    SUPPORT, WHY_NOT = None, str(exc)

needs_sandbox = pytest.mark.skipif(SUPPORT is None, reason=f"no isolation here: {WHY_NOT}")
"""Skips a test (or, as ``pytestmark``, a file) where the default sandbox cannot run."""
