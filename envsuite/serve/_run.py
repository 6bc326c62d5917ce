"""Running the server: uvicorn on the configured address, until interrupted."""

from __future__ import annotations

import logging

from envsuite.serve._app import create_app
from envsuite.serve._config import ServeConfig

logger = logging.getLogger("envsuite.serve")


def serve(config: ServeConfig, api_key: str | None = None) -> None:
    """Serve the Tinker API on ``config.host:config.port`` until interrupted (Ctrl-C, SIGTERM).

    Raises :class:`~envsuite.serve.ServeConfigError` before binding anything when the config is unsafe.
    """
    import uvicorn

    app = create_app(config, api_key)
    logger.info(
        "envsuite serve on http://%s:%d (device %s, state %s, key %s)",
        config.host,
        config.port,
        config.device,
        config.state_dir,
        "required" if api_key else "not required (loopback only)",
    )
    # No access log: paths are harmless, but nothing a client sends needs to reach a log file.
    uvicorn.run(app, host=config.host, port=config.port, log_level="info", access_log=False)
