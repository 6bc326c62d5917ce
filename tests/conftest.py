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
# Under pytest-xdist the workers share the run's directory (made by the controlling process, whose
# environment they inherit; calibrations lock per machine key): each shape is measured once per run.
_SHARED_KERNEL_CACHE = "ENVSUITE_TEST_KERNEL_CACHE"
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get(_SHARED_KERNEL_CACHE):
    _KERNEL_CACHE = os.environ[_SHARED_KERNEL_CACHE]
else:
    _KERNEL_CACHE = tempfile.mkdtemp(prefix="envsuite-test-kernels-")
    os.environ[_SHARED_KERNEL_CACHE] = _KERNEL_CACHE
    atexit.register(shutil.rmtree, _KERNEL_CACHE, ignore_errors=True)
os.environ["ENVSUITE_KERNEL_CACHE"] = _KERNEL_CACHE
# Engines build and measure their kernels before their first step (not in the background, the
# default), so each test knows which plan its engine runs.
os.environ["ENVSUITE_KERNEL_SETUP"] = "wait"
# Engines run the fixed decode step (the team where it fits, else the captured step) rather than the
# way timed fastest here, which can differ from run to run: tests/test_step_choice.py turns the timing on.
os.environ["ENVSUITE_STEP_CHOICE"] = "fixed"

TEST_MODEL = "tiny-random"


# --------------------------------------------------------------------------------------------------
# A real PostgreSQL server on loopback, started once per test session when a test asks for it.
# --------------------------------------------------------------------------------------------------

import pytest  # noqa: E402

# --------------------------------------------------------------------------------------------------
# The env registry as each test found it: ids a test registers are removed and ones it replaces put back
# after it, so no test sees another's scratch ids whatever the order (pytest-xdist reorders files).
# --------------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _registry_as_the_test_found_it():  # type: ignore[no-untyped-def]
    from envsuite.catalog.registration import registry

    before = {spec.id: spec for spec in registry.all_specs()}  # loads the plugins first
    yield
    after = {spec.id: spec for spec in registry.all_specs()}
    for env_id in after.keys() - before.keys():
        registry.unregister(env_id)
    for env_id, spec in before.items():
        # A replaced spec is put back; a removed one stays removed (a fixture of a wider scope may have
        # registered it for its module, whose own per-test teardown removes it).
        if env_id in after and after[env_id] is not spec:
            registry.register(spec, override=True)


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
