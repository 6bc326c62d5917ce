"""``envsuite serve-env ID``: serve a catalog env over OpenEnv's HTTP/WebSocket protocol.

OpenEnv's own clients (``GenericEnvClient``, and the trainers that take OpenEnv envs) reset and step
it; ``reset(seed=...)`` replays an episode. Another envsuite reaches it as ``openenv:http://HOST:PORT``.
"""

from __future__ import annotations

import argparse

from envsuite.cli._args import Subparsers, parse_env_args
from envsuite.errors import UsageError


def add_parser(sub: Subparsers) -> None:
    """Add ``envsuite serve-env`` to the command's sub-parsers."""
    p = sub.add_parser(
        "serve-env",
        help="serve a catalog env over OpenEnv's protocol",
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("env_id", metavar="ENV_ID")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", default="smollm2-135m-instruct", help="model whose tokenizer renders prompts")
    p.add_argument("--renderer", default=None, help="chat format (default: the model's own)")
    p.add_argument("--max-sessions", type=int, default=256, help="concurrent OpenEnv sessions")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env keyword argument")


def run(args: argparse.Namespace) -> int:
    """Serve the env until interrupted (loopback only: OpenEnv's protocol carries no key)."""
    from envsuite.adapters.openenv import serve
    from envsuite.http_guard import is_loopback

    if not is_loopback(args.host):
        # envsuite serve and serve-sandbox bind beyond loopback only with a key; OpenEnv's clients send
        # none (HTTP and WebSocket alike), so this server would be open to anyone who can reach it.
        raise UsageError(
            f"binding {args.host} would expose the env to the network, and OpenEnv's protocol carries no "
            "key: serve on 127.0.0.1 and reach it through an authenticating proxy or an SSH tunnel"
        )

    print(f"serving {args.env_id} over OpenEnv at http://{args.host}:{args.port} (Ctrl-C stops)", flush=True)
    serve(
        args.env_id,
        host=args.host,
        port=args.port,
        model=args.model,
        renderer_name=args.renderer,
        max_sessions=args.max_sessions,
        **parse_env_args(args.env_arg),
    )
    return 0
