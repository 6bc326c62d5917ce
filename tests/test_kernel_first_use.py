"""First use of the kernels on a machine: sampling at once, the build and calibration in the background.

* with the calibration cache empty, an engine's plan is the first-use one (every product through
  ``F.linear``) and a background :class:`Preparation` measures the model's shapes into the cache; the
  engines made after it get the measured plan from the cache, measuring nothing, and sample the same
  tokens (logprobs within the summation-order bound of the path tests) as the first-use engine;
* with the native build not on disk either, the first-use engine steps through torch's operations
  (it does not wait for the build); a build that fails in the background raises nothing: the
  preparation ends, the failure is remembered, and the next engine measures and runs torch's paths;
* ``$ENVSUITE_KERNEL_SETUP=wait`` (the test session's setting, conftest) waits for both, and an
  unknown setting is refused.

The times themselves are measured in ``bench/first_use.py``, not here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from envsuite.backends.local import EngineConfig, load_sampling_model
from envsuite.engine.kernels import SETUP_ENV, KernelSetup, ProductPath, kernel_setup
from envsuite.engine.sampling import EngineRequest, EngineResult, SamplingEngine

TINY = "tiny-random"
PROMPT = (1, 17, 42, 99, 7)


def _engine(config: EngineConfig) -> SamplingEngine:
    loaded = load_sampling_model(base_model=TINY)
    return SamplingEngine(loaded.model, lambda tokens: str(loaded.tokenizer.decode(tokens)), config)


def _sample(engine: SamplingEngine) -> list[tuple[list[int], list[float]]]:
    request = EngineRequest(PROMPT, num_samples=3, max_tokens=16, temperature=1.0, seed=5)
    result: EngineResult = engine.submit(request, lambda r: r).result(timeout=120)
    return [(s.tokens, s.logprobs) for s in result.sequences]


def test_the_first_engine_samples_at_once_and_the_next_gets_the_measured_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SETUP_ENV, "background")
    config = EngineConfig(prefix_cache_bytes=0, kernel_cache=str(tmp_path))
    first = _engine(config)
    try:
        plan = first.kernel_plan
        assert plan is not None and plan.preparation is not None
        assert plan.forced_path is ProductPath.F_LINEAR and plan.calibration is None
        assert "first use on this machine" in plan.report()
        first_samples = _sample(first)
    finally:
        first.close()
    assert plan.preparation.wait(timeout=600) and plan.preparation.error == ""
    assert list(tmp_path.glob("calibration-*.json"))
    second = _engine(config)
    try:
        measured = second.kernel_plan
        assert measured is not None and measured.preparation is None and measured.forced_path is None
        assert measured.calibration is not None and measured.calibration.measured_shapes == 0
        second_samples = _sample(second)
    finally:
        second.close()
    for (tokens, logprobs), (ref_tokens, ref_logprobs) in zip(second_samples, first_samples, strict=True):
        assert tokens == ref_tokens
        np.testing.assert_allclose(logprobs, ref_logprobs, atol=1e-5, rtol=0)


def test_the_setup_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert kernel_setup() is KernelSetup.WAIT  # conftest: the tests wait
    monkeypatch.delenv(SETUP_ENV)
    assert kernel_setup() is KernelSetup.BACKGROUND
    monkeypatch.setenv(SETUP_ENV, "soon")
    with pytest.raises(ValueError, match="not a kernel setup"):
        kernel_setup()


_FIRST_USE_CHILD = textwrap.dedent(
    """
    import json
    from envsuite.backends.local import EngineConfig, load_sampling_model
    from envsuite.engine.sampling import EngineRequest, SamplingEngine

    def engine():
        loaded = load_sampling_model(base_model="tiny-random")
        return SamplingEngine(loaded.model, lambda t: loaded.tokenizer.decode(t), EngineConfig(prefix_cache_bytes=0))

    def sample(engine):
        request = EngineRequest((1, 17, 42, 99, 7), num_samples=3, max_tokens=16, temperature=1.0, seed=5)
        result = engine.submit(request, lambda r: r).result(timeout=120)
        engine.close()
        return [[s.tokens, s.logprobs] for s in result.sequences]

    first = engine()
    plan, step = first.kernel_plan, first.decode_step_plan
    report = {"native_loaded": plan.native_loaded, "native_step": step.native_kernels,
              "forced": plan.forced_path.value, "first_samples": sample(first)}
    report["finished"] = plan.preparation.wait(timeout=600)
    report["error"] = plan.preparation.error
    second = engine()
    report["paths"] = [p.value for p in second.kernel_plan.paths]
    report["native"] = second.kernel_plan.native
    report["measured"] = second.kernel_plan.calibration is not None
    report["second_samples"] = sample(second)
    print(json.dumps(report))
    """
)


def test_a_build_failing_in_the_background_leaves_the_engine_on_torchs_kernels(tmp_path: Path) -> None:
    """No build on disk and a compiler that fails: the first engine does not wait for it, steps through
    torch's operations, and nothing raises; the next engine measures and runs torch's paths."""
    compiler = tmp_path / "broken-cxx"
    compiler.write_text("#!/bin/sh\necho 'broken-cxx: no' >&2\nexit 1\n")
    compiler.chmod(0o755)
    env = {
        **os.environ,
        "CXX": str(compiler),
        "ENVSUITE_NATIVE_CACHE": str(tmp_path / "native"),
        "ENVSUITE_KERNEL_CACHE": str(tmp_path / "kernels"),
        SETUP_ENV: "background",
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", _FIRST_USE_CHILD], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["native_loaded"] is False and report["native_step"] is False
    assert report["forced"] == "f-linear"
    assert report["finished"] is True and report["error"] == ""
    assert "broken-cxx: no" in next((tmp_path / "native").glob("*/build-failed.txt")).read_text()
    assert "the build failed" in report["native"] and report["measured"] is True
    assert set(report["paths"]) == {"f-linear", "onednn", "onednn-reordered"}
    for (tokens, logprobs), (ref_tokens, ref_logprobs) in zip(
        report["second_samples"], report["first_samples"], strict=True
    ):
        assert tokens == ref_tokens
        np.testing.assert_allclose(logprobs, ref_logprobs, atol=1e-5, rtol=0)
