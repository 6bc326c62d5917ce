"""Running the server: uvicorn on the configured address, until interrupted."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from envsuite.serve._app import create_app
from envsuite.serve._config import ServeConfig

logger = logging.getLogger("envsuite.serve")


def serve(
    config: ServeConfig, api_key: str | None = None, capture_keys: Mapping[str, str] | None = None
) -> None:
    """Serve the Tinker API on ``config.host:config.port`` until interrupted (Ctrl-C, SIGTERM).

    Raises :class:`~envsuite.serve.ServeConfigError` before binding anything when the config is unsafe.
    ``capture_keys`` (capture set name -> key) as :func:`~envsuite.serve.create_app` takes them.
    """
    import uvicorn

    app = create_app(config, api_key, capture_keys)
    logger.info(
        "envsuite serve on http://%s:%d (device %s, state %s, key %s)",
        config.host,
        config.port,
        config.device,
        config.state_dir,
        "required" if api_key else "not required (loopback only)",
    )
    if config.sampling_engine == "vllm":
        logger.info(
            "the Tinker and OpenAI routes sample on vLLM (%s)", config.vllm_url or "a server started here"
        )
    if capture_keys:
        logger.info("capture keys for: %s", ", ".join(sorted(capture_keys)))
    # No access log: paths are harmless, but nothing a client sends needs to reach a log file.
    uvicorn.run(app, host=config.host, port=config.port, log_level="info", access_log=False)
