"""Test-wide settings: offline hub, no Tinker key, and the tiny model for anything that samples."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
# The hosted Tinker client hangs silently on a fake key; tests must never reach it.
os.environ.pop("TINKER_API_KEY", None)
# Kernel calibrations (measured speeds of this machine's matrix-product paths) go to a directory of the
# test session's own, so a test never reads the user's cached choices or leaves its own behind.
_KERNEL_CACHE = tempfile.mkdtemp(prefix="envsuite-test-kernels-")
os.environ["ENVSUITE_KERNEL_CACHE"] = _KERNEL_CACHE
atexit.register(shutil.rmtree, _KERNEL_CACHE, ignore_errors=True)
# Engines build and measure their kernels before their first step (not in the background, the
# default), so each test knows which plan its engine runs.
os.environ["ENVSUITE_KERNEL_SETUP"] = "wait"

TEST_MODEL = "tiny-random"


# --------------------------------------------------------------------------------------------------
# A real PostgreSQL server on loopback, started once per test session when a test asks for it.
# --------------------------------------------------------------------------------------------------

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def postgres_server():  # type: ignore[no-untyped-def]
    from tests.support.postgres import find_bindir, running_server

    if find_bindir() is None:
        pytest.skip(
            "no PostgreSQL server binaries here (`make install` installs the Debian postgresql package)"
        )
    with running_server() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server) -> str:  # type: ignore[no-untyped-def]
    """A fresh empty database on the session's server."""
    return str(postgres_server.create_database())


# --------------------------------------------------------------------------------------------------
# Ray, started once per test session (about 6.5 s here) by the tests that run the ray executor.
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def ray_session():  # type: ignore[no-untyped-def]
    """A real 2-CPU local Ray (local_mode is gone); envsuite's RayExecutor reuses it and leaves it up."""
    import ray

    for attempt in range(3):
        try:
            ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
            break
        except Exception:
            # Ray gives its raylet a fixed 30 s to register; a machine under heavy load can miss that.
            ray.shutdown()
            if attempt == 2:
                raise
    try:
        yield
    finally:
        ray.shutdown()
