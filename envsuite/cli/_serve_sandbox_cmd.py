"""``envsuite serve-sandbox``: SandboxFusion's ``run_code`` HTTP API on loopback, backed by envsuite.sandbox.

Code written for SandboxFusion's Docker server works unchanged: point it here (tinker-cookbook's
``code_rl`` grading reads ``SANDBOX_URL=http://127.0.0.1:8080/run_code``). No Docker, no network
inside the sandbox; where bubblewrap cannot run, the server refuses to start unless ``--unisolated``.
"""

from __future__ import annotations

import argparse

from envsuite.cli._args import Subparsers
from envsuite.errors import UsageError


def add_parser(subparsers: Subparsers) -> None:
    """Register ``envsuite serve-sandbox``."""
    from envsuite.sandbox import SANDBOX_API_KEY_VAR, Limits, SandboxServerConfig

    defaults, limits = SandboxServerConfig(), Limits()
    p = subparsers.add_parser(
        "serve-sandbox",
        help="serve SandboxFusion's run_code API on loopback (offline code execution, no Docker)",
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--host", default=defaults.host, help="address to listen on (anything but loopback needs a key)"
    )
    p.add_argument("--port", type=int, default=defaults.port)
    p.add_argument(
        "--api-key",
        default=None,
        help=f"key every request must carry (X-API-Key or Authorization: Bearer); default: ${SANDBOX_API_KEY_VAR}",
    )
    p.add_argument(
        "--run-timeout",
        type=float,
        default=limits.wall_s,
        help="most seconds (wall and CPU) a run may take; a request's run_timeout is capped at it",
    )
    p.add_argument(
        "--memory-mb",
        type=int,
        default=limits.memory_mb,
        help="memory per request; a request's memory_limit_MB is capped at it",
    )
    p.add_argument("--processes", type=int, default=limits.processes, help="processes per request")
    p.add_argument("--output-bytes", type=int, default=limits.output_bytes, help="stdout/stderr kept")
    p.add_argument(
        "--unisolated",
        action="store_true",
        help="run without bubblewrap (programs see this machine's files and network; results say so)",
    )


def run(args: argparse.Namespace) -> int:
    """Start the server; a machine that cannot isolate is a one-line UsageError."""
    import os
    from dataclasses import replace

    from envsuite.http_guard import check_exposure
    from envsuite.sandbox import (
        SANDBOX_API_KEY_VAR,
        Isolation,
        Limits,
        SandboxConfig,
        SandboxServerConfig,
        SandboxUnavailableError,
        sandbox_support,
        serve_fusion,
    )

    api_key = args.api_key or os.environ.get(SANDBOX_API_KEY_VAR) or None
    # Checked here too (the app checks it again) so a refusal comes before the line announcing the URL.
    what, hint = "code execution", f"--api-key or {SANDBOX_API_KEY_VAR}"
    check_exposure(args.host, api_key, what=what, key_hint=hint, error=UsageError)
    if not args.run_timeout > 0:
        raise UsageError(f"--run-timeout must be > 0, got {args.run_timeout}")
    limits = replace(
        Limits().with_time(args.run_timeout),
        memory_mb=args.memory_mb,
        processes=args.processes,
        output_bytes=args.output_bytes,
    )
    isolation = Isolation.NONE if args.unisolated else Isolation.BWRAP
    sandbox = SandboxConfig(limits=limits, isolation=isolation)
    try:
        support = sandbox_support(sandbox)
    except SandboxUnavailableError as exc:
        raise UsageError(str(exc)) from exc
    url = f"http://{args.host}:{args.port}/run_code"
    print(f"SandboxFusion run_code API at {url} ({support.describe()}); SANDBOX_URL={url}", flush=True)
    serve_fusion(SandboxServerConfig(host=args.host, port=args.port, sandbox=sandbox), api_key)
    return 0
