"""The decode step's ways are chosen by timing the whole step (issue 51 item 2, ``_step_choice``).

* :func:`choose_step` picks, per row bucket, the fastest way measured where one products setting holds
  the fastest way at every bucket; otherwise the setting with the least worst-case loss, and says it;
* an engine times every way it can run at the buckets its batches reach (here up to 8 rows), caches
  them per machine key and model shape (a second engine measures nothing), and runs, per bucket, the
  way chosen from them: its layout, its captured step, the team or the step by op, or its layers one
  by one;
* whichever way it chose from cached times, it samples transformers' tokens and logprobs;
* ``envsuite doctor`` prints each way's time per bucket and the way chosen.

No wall-clock time is asserted: choices are checked against the times that were measured or written.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tinker

from envsuite.backends.local import EngineConfig, LocalSamplingClient, load_sampling_model
from envsuite.cli import main as cli_main
from envsuite.engine.kernels import ROW_BUCKETS, ProductPath, cache_directory, kernel_plan, native_kernels
from envsuite.engine.sampling import SamplingEngine
from envsuite.engine.sampling._step_choice import (
    STEP_CHOICE_ENV,
    STEP_WAYS,
    Products,
    StepMode,
    StepWay,
    choose_step,
    model_signature,
    step_cache_file,
)

TINY = "tiny-random"
BUCKETS = (1, 2, 4, 8)
SMALL = EngineConfig(max_batch_size=8)
"""An engine whose batches reach the buckets of 1-8 rows only (what it measures)."""
FORWARD = EngineConfig(lean_decode=False, onednn_products=False, prefix_cache_bytes=0)


@pytest.fixture(autouse=True)
def _measured(monkeypatch: pytest.MonkeyPatch) -> None:
    if not native_kernels().available:
        pytest.skip(f"the native kernels are not built here: {native_kernels().reason}")
    monkeypatch.setenv(STEP_CHOICE_ENV, "measure")


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A kernel cache of the test's own holding the session's product timings of the tiny model (each
    test then times or writes its own step times; the products are measured once per session)."""
    kernel_plan(load_sampling_model(base_model=TINY).model)  # the session's cache (conftest)
    for file in cache_directory().glob("calibration-*.json"):
        shutil.copy(file, tmp_path)
    return tmp_path


def _way(name: str) -> StepWay:
    return StepWay.parse(name)


def test_choose_step_is_the_fastest_way_where_one_setting_holds_it() -> None:
    """One products setting fastest at every bucket: each bucket runs its fastest way (any mode)."""
    ms = {
        1: {_way("calibrated/team"): 3.0, _way("calibrated/layers"): 2.0, _way("torch/layers"): 2.5},
        16: {_way("calibrated/team"): 9.0, _way("calibrated/captured"): 8.0, _way("torch/layers"): 8.5},
    }
    products, modes, ratio = choose_step(ms)
    assert products is Products.CALIBRATED and ratio == 1.0
    assert modes == {1: StepMode.LAYERS, 16: StepMode.CAPTURED}
    for bucket, times in ms.items():
        assert StepWay(products, modes[bucket]) == min(times, key=lambda w: times[w])


def test_choose_step_takes_the_least_worst_loss_and_says_it() -> None:
    """Settings fastest at different buckets (one layout per weight): the setting whose worst bucket
    loses least, its fastest mode per bucket, the loss named."""
    ms = {
        1: {_way("calibrated/team"): 10.0, _way("reordered/layers"): 11.0},
        16: {_way("calibrated/team"): 14.0, _way("reordered/layers"): 10.0},
    }
    products, modes, ratio = choose_step(ms)
    assert products is Products.REORDERED and modes == {1: StepMode.LAYERS, 16: StepMode.LAYERS}
    assert ratio == pytest.approx(1.1)


def _engine(config: EngineConfig) -> SamplingEngine:
    loaded = load_sampling_model(base_model=TINY)
    return SamplingEngine(loaded.model, lambda tokens: str(loaded.tokenizer.decode(tokens)), config)


def test_the_engine_runs_the_way_measured_fastest(cache: Path) -> None:
    """The engine times every way at the buckets up to its batch size, caches them, and runs at each
    bucket the fastest way of the chosen setting (the fastest measured where one setting holds them
    all); a second engine reads the times back."""
    config = EngineConfig(max_batch_size=8, kernel_cache=str(cache))
    engine = _engine(config)
    try:
        choice = engine.step_choice
        assert choice is not None and set(choice.ms) == set(BUCKETS) and choice.measured_now == BUCKETS
        for bucket in BUCKETS:
            measured = choice.ms[bucket]
            assert {w.products for w in measured} == set(Products)  # every setting timed
            own = {w: t for w, t in measured.items() if w.products is choice.products}
            assert choice.way(bucket) == min(own, key=lambda w: own[w])
            if choice.worst_ratio == 1.0:
                assert choice.way(bucket) == choice.best(bucket)
            decoder = engine._decoder
            assert decoder is not None
            index = ROW_BUCKETS.index(bucket)
            mode = choice.modes[bucket]
            if decoder.captured is not None:
                assert decoder.captured_at[index] == (mode is not StepMode.LAYERS)
                if mode is not StepMode.LAYERS:
                    assert decoder.captured.team_by_bucket[index] == (mode is StepMode.TEAM)
        assert engine.decode_step_plan.native_kernels == choice.products.native
    finally:
        engine.close()
    again = _engine(config)
    try:
        assert again.step_choice is not None and again.step_choice.measured_now == ()
        assert again.step_choice.ms == choice.ms
    finally:
        again.close()


def _write_times(directory: Path, fastest: dict[int, StepWay]) -> None:
    """Cached step times for the tiny model where ``fastest[bucket]`` is the one fast way."""
    signature = model_signature(load_sampling_model(base_model=TINY).model.config)
    times = {str(b): {w.name: (1.0 if w == f else 5.0) for w in STEP_WAYS} for b, f in fastest.items()}
    step_cache_file(directory).write_text(json.dumps({"models": {signature: times}}))


async def _sample(client: LocalSamplingClient) -> list[list[tuple[list[int], list[float]]]]:
    tok = client.get_tokenizer()
    params = [
        tinker.SamplingParams(max_tokens=12, temperature=0.0, stop=[]),
        tinker.SamplingParams(max_tokens=12, temperature=1.0, stop=[], seed=1),
        tinker.SamplingParams(max_tokens=9, temperature=0.7, top_k=50, stop=[], seed=2),
    ]
    texts = ["Count slowly", "One", "A somewhat longer third prompt"]
    futures = [
        client.sample(tinker.ModelInput.from_ints(tok.encode(t)), 2, p)
        for t, p in zip(texts, params, strict=True)
    ]
    return [[(list(s.tokens), list(s.logprobs or [])) for s in (await f).sequences] for f in futures]


def _outputs(config: EngineConfig) -> list[list[tuple[list[int], list[float]]]]:
    loaded = load_sampling_model(base_model=TINY)
    client = LocalSamplingClient(loaded.model, loaded.tokenizer, TINY, config=config)
    try:
        return asyncio.run(_sample(client))
    finally:
        client.close()


@pytest.mark.parametrize(
    "fastest",
    [
        {1: "calibrated/layers", 2: "calibrated/captured", 4: "calibrated/team", 8: "calibrated/captured"},
        {
            1: "torch-products/layers",
            2: "torch-products/captured",
            4: "torch-products/layers",
            8: "torch-products/captured",
        },
        {1: "reordered/layers", 2: "reordered/layers", 4: "reordered/layers", 8: "reordered/layers"},
    ],
    ids=["native-modes", "torch-products", "reordered"],
)
def test_every_chosen_way_samples_what_transformers_samples(cache: Path, fastest: dict[int, str]) -> None:
    """From cached times (no measurement), the engine lays its model out and steps as the fastest
    ways say, and samples transformers' tokens and logprobs (fp32: within 1e-4)."""
    ways = {b: _way(name) for b, name in fastest.items()}
    _write_times(cache, ways)
    config = EngineConfig(max_batch_size=8, kernel_cache=str(cache))
    engine = _engine(config)
    try:
        choice = engine.step_choice
        assert choice is not None and choice.measured_now == ()
        assert {b: choice.way(b) for b in BUCKETS} == ways
        plan = engine.kernel_plan
        assert plan is not None
        if choice.products is not Products.CALIBRATED:
            assert not any(ProductPath(p).native for p in plan.paths)
        decoder = engine._decoder
        assert decoder is not None
        for bucket, way in ways.items():
            if decoder.captured is not None:
                assert decoder.captured_at[ROW_BUCKETS.index(bucket)] == (way.mode is not StepMode.LAYERS)
    finally:
        engine.close()
    reference = _outputs(FORWARD)
    for ref, got in zip(reference, _outputs(config), strict=True):
        for (ref_tokens, ref_logprobs), (tokens, logprobs) in zip(ref, got, strict=True):
            assert tokens == ref_tokens
            np.testing.assert_allclose(logprobs, ref_logprobs, atol=1e-4, rtol=0)


def test_doctor_prints_each_way_per_bucket_and_the_choice(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``envsuite doctor`` prints every way's time at every bucket and the way chosen there."""
    names = ["calibrated/layers", "calibrated/captured", "calibrated/team", "calibrated/team"] * 2
    fastest = dict(zip(ROW_BUCKETS[:-1], names, strict=False))  # 1-64 rows: the doctor's batch size
    _write_times(cache, {b: _way(n) for b, n in fastest.items()})
    assert cli_main(["doctor", "--model", TINY, "--kernel-cache", str(cache)]) == 0
    out = capsys.readouterr().out
    assert "decode step chosen by timing the whole step" in out and "buckets measured now: none" in out
    header = next(line for line in out.splitlines() if "-> chosen (ms per step)" in line)
    assert all(way.name in header for way in STEP_WAYS)
    rows = {int(line.split()[0]): line for line in out.splitlines() if " -> calibrated/" in line}
    assert set(rows) == set(fastest)
    for bucket, name in fastest.items():
        cells = rows[bucket].split()[1:-2]
        assert rows[bucket].endswith(f"-> {name}") and cells.count("1.00") == 1
        assert len(cells) == len(STEP_WAYS) and cells.count("5.00") == len(STEP_WAYS) - 1


EXIT_MID_MEASUREMENT = textwrap.dedent(
    """
    import sys, time
    from envsuite.backends.local import EngineConfig, load_sampling_model
    from envsuite.engine.sampling._step_timing import step_choice

    model = load_sampling_model(base_model="smollm2-135m-instruct").model
    assert step_choice(model, EngineConfig(kernel_cache=sys.argv[1]), wait=False) is None
    time.sleep(float(sys.argv[2]))  # then the script ends while the timing runs on its daemon thread
    """
)


@pytest.mark.parametrize("seconds", [2.0, 12.0])
def test_a_process_ending_while_its_step_timing_runs_exits_cleanly(tmp_path: Path, seconds: float) -> None:
    """The step timing (and the kernel preparation) run on daemon threads; a process that ends while
    one is inside torch's C++ aborted ("terminate called without an active exception", status -6).
    Now the exit stops them at their next stop point and waits, and nothing half-measured is cached.
    Two exit points: while the settings are laid out and calibrated, and while steps are timed."""
    if not native_kernels().available:
        pytest.skip(f"the native kernels are not built here: {native_kernels().reason}")
    env = {**os.environ, "ENVSUITE_KERNEL_SETUP": "background"}
    done = subprocess.run(
        [sys.executable, "-c", EXIT_MID_MEASUREMENT, str(tmp_path), str(seconds)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "terminate called" not in done.stderr
    assert "timing this machine's decode step ways" in done.stderr
    assert not list(tmp_path.glob("steps-*.json")), "a stopped timing cached nothing"
