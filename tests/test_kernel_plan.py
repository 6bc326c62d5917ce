"""The engine's product kernels are chosen by measurement, and every choice samples the same.

* the calibration measures each product shape of the model once per machine key (cached, then read
  back), and what :func:`choose` picks from the timings is what the sampling engine's model and its
  lean decode step run (structure checked module by module);
* :func:`choose` keeps one layout per weight and, within it, the fastest path per row count; it
  names how far that can be from the fastest path overall;
* every product path (``F.linear``, oneDNN on plain and on reordered weights, envsuite's native rows
  and panels kernels) samples the tokens and logprobs of transformers' forward on the model as loaded,
  on the tiny random Llama and on the real SmolLM2-135M (fp32: logprobs within 1e-4);
* where the native kernels cannot be built (a compiler that fails), the engine says why, leaves their
  paths out and samples the same; a later process does not try the failed build again;
* the lean step's native RMS norm, rotary embeddings, one-token attention and SiLU(gate) * up give
  torch's values (any mask, the KV cache's strided views, grouped queries), and the engine's step uses
  them only with the native kernels on;
* the captured step (every decoder layer of a step in one native call, the default) samples exactly
  the tokens and logprobs of the same kernels called one by one, across cache reallocations and rows
  of different lengths, on every product path; it really runs (counted), and steps it does not cover
  (prompt tails) take the step-by-step path;
* ``envsuite doctor`` prints, per product shape, the path chosen at each row count and the times
  behind it.

The native kernels are built once per machine (20-60 s on two cores) by the first test that needs
them; calibrations go to the test session's own directory (conftest).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
import weakref
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tinker
import torch

from envsuite.backends.local import EngineConfig, LocalSamplingClient, load_sampling_model
from envsuite.cli import main as cli_main
from envsuite.engine.kernels import (
    ROW_BUCKETS,
    FrozenLinear,
    FusedPart,
    KernelPlan,
    Layout,
    MachineKey,
    PanelEmbedding,
    ProductPath,
    ShapeTiming,
    WeightUse,
    cache_directory,
    calibration_file,
    choose,
    kernel_plan,
    native_kernels,
    product_sites,
    usable_paths,
)
from envsuite.engine.sampling import (
    CapturedLayers,
    DecodeStepPlan,
    LlamaDecoder,
    SamplingEngine,
    llama_decoder,
)

TINY = "tiny-random"
SMOLLM2 = "smollm2-135m-instruct"
FORWARD = EngineConfig(lean_decode=False, onednn_products=False, prefix_cache_bytes=0)
"""The reference: transformers' own forward on the model as loaded (``F.linear`` products)."""


def _paths_here() -> list[ProductPath]:
    return list(usable_paths(torch.zeros(2, 2), native=native_kernels().available))


Outputs = list[list[tuple[list[int], list[float]]]]


async def _sample(client: LocalSamplingClient, max_tokens: int) -> Outputs:
    """Greedy and seeded rows of different lengths, together in one running batch."""
    tok = client.get_tokenizer()
    texts = ["Count slowly", "One", "Two words here", "A somewhat longer fourth prompt"]
    settings = [
        tinker.SamplingParams(max_tokens=max_tokens, temperature=0.0, stop=[]),
        tinker.SamplingParams(max_tokens=max_tokens, temperature=1.0, stop=[], seed=1),
        tinker.SamplingParams(max_tokens=max_tokens - 3, temperature=0.7, top_k=50, stop=[], seed=2),
        tinker.SamplingParams(max_tokens=max_tokens, temperature=1.0, top_p=0.9, stop=[], seed=3),
    ]
    futures = [
        client.sample(tinker.ModelInput.from_ints(tok.encode(text)), 2, params)
        for text, params in zip(texts, settings, strict=True)
    ]
    responses = [await future for future in futures]
    return [[(list(s.tokens), list(s.logprobs or [])) for s in r.sequences] for r in responses]


def _outputs(model_name: str, config: EngineConfig, max_tokens: int) -> Outputs:
    loaded = load_sampling_model(base_model=model_name)
    client = LocalSamplingClient(loaded.model, loaded.tokenizer, model_name, config=config)
    try:
        return asyncio.run(_sample(client, max_tokens))
    finally:
        client.close()


def _assert_same(reference: Outputs, other: Outputs, atol: float) -> None:
    for ref_request, other_request in zip(reference, other, strict=True):
        for (ref_tokens, ref_logprobs), (tokens, logprobs) in zip(ref_request, other_request, strict=True):
            assert tokens == ref_tokens
            np.testing.assert_allclose(logprobs, ref_logprobs, atol=atol, rtol=0)


def _engine(config: EngineConfig) -> SamplingEngine:
    loaded = load_sampling_model(base_model=TINY)
    return SamplingEngine(loaded.model, lambda tokens: str(loaded.tokenizer.decode(tokens)), config)


def test_the_engine_runs_what_the_calibration_chose() -> None:
    """Each of the engine's products (fused query/key/value and gate/up, output, down, the tied LM head)
    runs the layout and per-row paths :func:`choose` picks from the measured timings, and so does the
    lean decode step (it multiplies the model's own products). The test session's calibration cache
    (conftest) is shared with the other tests: the tiny model is measured once per session."""
    config = EngineConfig()
    engine = _engine(config)
    plan = engine.kernel_plan
    assert plan is not None and plan.calibration is not None and plan.forced_path is None
    assert set(plan.paths) == set(_paths_here())
    model = engine.model
    checked = 0
    for module in model.modules():
        if isinstance(module, FrozenLinear):
            product = module.product
        elif isinstance(module, FusedPart):
            product = module.fused.product
        else:
            continue
        shape = (product.in_features, product.out_features)
        use = WeightUse.EMBEDDED if module is model.lm_head else WeightUse.OWNED  # the tiny model is tied
        expected = choose(plan.timings[shape], [p for p in plan.paths if use.allows(p.layout)])
        assert plan.choice(shape, use) == expected
        assert product.paths == expected.paths and product.layout is expected.layout
        checked += 1
    layers = model.config.num_hidden_layers
    assert checked == 7 * layers + 1  # q, k, v, o, gate, up, down per layer; the LM head
    decoder = llama_decoder(model)
    assert decoder is not None
    for weights, layer in zip(decoder.layers, model.model.layers, strict=True):
        assert weights.qkv == (layer.self_attn.q_proj.fused.product,)
        assert weights.mlp_in == (layer.mlp.gate_proj.fused.product,)
        assert weights.o is layer.self_attn.o_proj.product and weights.down is layer.mlp.down_proj.product
    assert decoder.lm_head is model.lm_head.product
    # The embedding reads the LM head's weight, in whichever layout it took (plain or panels).
    embedding = model.get_input_embeddings()
    if decoder.lm_head.layout is Layout.PANELS:
        assert isinstance(embedding, PanelEmbedding) and embedding.panels is decoder.lm_head.weight
    else:
        assert embedding.weight is decoder.lm_head.weight
    engine.close()
    # A second engine on this machine reads the same timings from the cache: nothing measured again.
    again = _engine(config)
    assert again.kernel_plan is not None and again.kernel_plan.calibration is not None
    assert again.kernel_plan.calibration.measured_shapes == 0
    assert again.kernel_plan.timings == plan.timings
    again.close()
    cache_file = plan.calibration.cache_file
    stored = json.loads(cache_file.read_text())
    assert stored["key"] == asdict(MachineKey.here())
    # The file keeps every shape measured under this key, other models' too (the session's tests share
    # it, and which of them calibrates first depends on the order they run in): this model's are there.
    assert {f"{k}x{n}" for k, n in plan.timings} <= set(stored["shapes"])


def test_a_calibration_is_reused_only_on_the_same_machine_key(tmp_path: Path) -> None:
    """Timings measured under other library versions or thread counts are another file, never read."""
    model = load_sampling_model(base_model=TINY).model
    plan = kernel_plan(model)
    assert plan.calibration is not None
    key = MachineKey.here()
    assert replace(key, threads=key.threads + 1).digest != key.digest
    assert replace(key, versions={**key.versions, "torch": "0.0"}).digest != key.digest
    assert (
        plan.calibration.cache_file
        == Path(os.environ["ENVSUITE_KERNEL_CACHE"]) / f"calibration-{key.digest}.json"
    )
    assert cache_directory(str(tmp_path)) == tmp_path
    assert cache_directory() == Path(os.environ["ENVSUITE_KERNEL_CACHE"])


def _timing(ms: dict[ProductPath, list[float]]) -> ShapeTiming:
    return ShapeTiming(8, 16, {path: tuple(times) for path, times in ms.items()})


def test_choose_keeps_one_layout_and_the_fastest_of_its_paths_per_row_count() -> None:
    buckets = len(ROW_BUCKETS)
    fast, slow = [1.0] * buckets, [2.0] * buckets
    # Panels fastest for small row counts, reordered for large ones, within 10% of each other there.
    panels = [1.0] * 4 + [1.1] * 4
    reordered = [1.5] * 4 + [1.0] * 4
    timing = _timing(
        {
            ProductPath.F_LINEAR: slow,
            ProductPath.ONEDNN: [3.0] * 4 + [1.2] * 4,
            ProductPath.ROWS: [1.4] * 4 + [5.0] * 4,
            ProductPath.ONEDNN_REORDERED: reordered,
            ProductPath.PANELS: panels,
        }
    )
    choice = choose(timing, list(timing.ms))
    assert choice.layout is Layout.PANELS and choice.paths == (ProductPath.PANELS,) * buckets
    assert choice.best == (ProductPath.PANELS,) * 4 + (ProductPath.ONEDNN_REORDERED,) * 4
    assert choice.worst_ratio == pytest.approx(1.1) and choice.ms == tuple(panels)
    # Restricted to plain weights: per row count the fastest plain path (rows, then oneDNN).
    plain = choose(timing, [ProductPath.F_LINEAR, ProductPath.ONEDNN, ProductPath.ROWS])
    assert plain.layout is Layout.PLAIN
    assert plain.paths == (ProductPath.ROWS,) * 4 + (ProductPath.ONEDNN,) * 4
    assert plain.worst_ratio == pytest.approx(1.0)
    # One layout fastest everywhere: chosen, and never slower than the best path measured.
    only = choose(
        _timing({ProductPath.F_LINEAR: fast, ProductPath.ONEDNN_REORDERED: slow}), list(ProductPath)
    )
    assert only.paths == (ProductPath.F_LINEAR,) * buckets and only.worst_ratio == 1.0
    with pytest.raises(ValueError, match="none of"):
        choose(timing, [])


@pytest.mark.parametrize("path", list(ProductPath), ids=[p.value for p in ProductPath])
def test_every_path_samples_what_the_forward_samples_on_the_tiny_model(path: ProductPath) -> None:
    if path not in _paths_here():
        pytest.skip(f"{path.value} is not usable here (native kernels: {native_kernels().reason})")
    reference = _outputs(TINY, FORWARD, max_tokens=24)
    got = _outputs(TINY, EngineConfig(prefix_cache_bytes=0, product_path=path.value), max_tokens=24)
    _assert_same(reference, got, atol=1e-5)


def test_every_path_samples_what_the_forward_samples_on_smollm2() -> None:
    """The real model (135M parameters, SmolLM2's shapes): each path, the lean step, the same tokens."""
    reference = _outputs(SMOLLM2, FORWARD, max_tokens=10)
    for path in _paths_here():
        got = _outputs(SMOLLM2, EngineConfig(prefix_cache_bytes=0, product_path=path.value), max_tokens=10)
        _assert_same(reference, got, atol=1e-4)


_FALLBACK_CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    from envsuite.backends.local import EngineConfig, LocalSamplingClient, load_sampling_model
    from envsuite.engine.kernels import ProductPath, kernel_plan, native_kernels

    status = native_kernels()
    loaded = load_sampling_model(base_model="tiny-random")
    plan = kernel_plan(load_sampling_model(base_model="tiny-random").model)
    try:
        kernel_plan(loaded.model, path="rows")
        refused = ""
    except ValueError as exc:
        refused = str(exc)
    config = EngineConfig(prefix_cache_bytes=0) if sys.argv[1] == "engine" else EngineConfig(
        prefix_cache_bytes=0, onednn_products=False)
    client = LocalSamplingClient(loaded.model, loaded.tokenizer, "tiny-random", config=config)
    import tinker
    tok = client.get_tokenizer()
    params = tinker.SamplingParams(max_tokens=12, temperature=1.0, stop=[], seed=5)
    response = client.sample(tinker.ModelInput.from_ints(tok.encode("Hello there")), 3, params).result()
    client.close()
    print(json.dumps({
        "available": status.available, "reason": status.reason, "refused": refused,
        "paths": [p.value for p in plan.paths],
        "samples": [[list(s.tokens), list(s.logprobs or [])] for s in response.sequences],
    }))
    """
)


def test_a_failed_native_build_falls_back_to_torchs_kernels(tmp_path: Path) -> None:
    """A compiler that fails: the engine says why, measures and runs torch's paths only, samples what
    the model as loaded samples; the next process reads the failure instead of building again."""
    compiler = tmp_path / "broken-cxx"
    compiler.write_text("#!/bin/sh\necho 'broken-cxx: no' >&2\nexit 1\n")
    compiler.chmod(0o755)
    env = {
        **os.environ,
        "CXX": str(compiler),
        "ENVSUITE_NATIVE_CACHE": str(tmp_path / "native"),
        "ENVSUITE_KERNEL_CACHE": str(tmp_path / "kernels"),
        "OMP_NUM_THREADS": "1",
    }

    def child(mode: str) -> dict[str, object]:
        done = subprocess.run(
            [sys.executable, "-c", _FALLBACK_CHILD, mode],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
        return result

    first = child("engine")
    assert first["available"] is False and "the build failed" in str(first["reason"])
    failure = next((tmp_path / "native").glob("*/build-failed.txt"))
    assert "broken-cxx: no" in failure.read_text()
    assert set(first["paths"]) == {"f-linear", "onednn", "onednn-reordered"}  # type: ignore[arg-type]
    assert "'rows' is not usable here" in str(first["refused"]) and "the build failed" in str(
        first["refused"]
    )
    reference = child("as-loaded")
    assert reference["reason"] == f"an earlier build failed (see {failure})"
    for (tokens, logprobs), (ref_tokens, ref_logprobs) in zip(
        first["samples"],
        reference["samples"],
        strict=True,  # type: ignore[call-overload]
    ):
        assert tokens == ref_tokens
        np.testing.assert_allclose(logprobs, ref_logprobs, atol=1e-5, rtol=0)


def test_doctor_prints_the_choice_per_shape_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``envsuite doctor`` reports the engine's choice from the cached timings (here timings that make
    ``F.linear`` the fastest everywhere: nothing measured, every row count on it); ``--recalibrate``
    measures again, and prints per shape and row count the path the engine then runs."""
    model = load_sampling_model(base_model=TINY).model
    sites = product_sites(model)
    slow = [1.0] * len(ROW_BUCKETS)
    timings = {
        p.value: [0.5] * len(ROW_BUCKETS) if p is ProductPath.F_LINEAR else slow for p in _paths_here()
    }
    cached = calibration_file(tmp_path)
    cached.write_text(json.dumps({"shapes": {f"{k}x{n}": timings for k, n in (s.shape for s in sites)}}))
    doctor = ["doctor", "--model", TINY, "--kernel-cache", str(tmp_path)]
    assert cli_main(doctor) == 0
    out = capsys.readouterr().out
    shapes = {(site.shape, site.use) for site in sites}
    assert "(0 shapes measured now" in out
    assert "decode step: the lean step" in out and "next-token choice: " in out
    chosen = [line.rsplit("-> ", 1)[1] for line in out.splitlines() if line[:8].strip().isdigit()]
    assert chosen == ["f-linear"] * len(ROW_BUCKETS) * len(shapes)
    assert cli_main([*doctor, "--recalibrate"]) == 0
    out = capsys.readouterr().out
    assert f"({len({site.shape for site in sites})} shapes measured now" in out
    plan = kernel_plan(model, cache=str(tmp_path))
    assert plan.calibration is not None and plan.calibration.measured_shapes == 0  # the doctor's timings
    assert f"CPU: {MachineKey.here().cpu}" in out and str(cached) in out
    lines = out.splitlines()
    for site in sites:
        choice = plan.choice(site.shape, site.use)
        k, n = site.shape
        head = next(i for i, line in enumerate(lines) if line.startswith(f"product {k} -> {n}"))
        rows_lines = lines[head + 2 : head + 2 + len(ROW_BUCKETS)]
        assert [line.split()[0] for line in rows_lines] == [str(rows) for rows in ROW_BUCKETS]
        assert [line.rsplit("-> ", 1)[1] for line in rows_lines] == [path.value for path in choice.paths]


@pytest.mark.parametrize("head_dim", [16, 64, 128])
def test_native_step_kernels_give_torchs_values(head_dim: int) -> None:
    if not native_kernels().available:
        pytest.skip(f"native kernels unavailable: {native_kernels().reason}")
    generator = torch.Generator().manual_seed(head_dim)
    # Lengths below, at and past whole blocks of 16 keys (scores come 16 at a time, the last L % 16 as one
    # block padded with empty keys).
    for rows, kv_heads, group, length in ((1, 3, 3, 1), (2, 2, 3, 32), (3, 2, 5, 37), (9, 1, 8, 130)):
        # The cache's views: rows x kv heads x length of buffers with room on both sides.
        keys = torch.randn(rows + 2, kv_heads, length + 20, head_dim, generator=generator)[
            1:-1, :, 5 : 5 + length
        ]
        values = torch.randn(rows + 2, kv_heads, length + 20, head_dim, generator=generator)[
            1:-1, :, 5 : 5 + length
        ]
        query = torch.randn(rows, kv_heads, group, head_dim, generator=generator)
        mask = torch.ones(rows, length, dtype=torch.bool)
        for row in range(rows):
            mask[row, : (row * 7) % length] = False  # left padding, as the engine's rows have it
        # Whole blocks of 16 keys masked, and holes after a row's first token (their keys are skipped).
        holes = mask.clone()
        holes[:, 16:40] = False
        holes[:, 64:96] = False
        assert holes.any(dim=1).all()
        for row_mask in (None, mask, holes):
            wanted = torch.nn.functional.scaled_dot_product_attention(
                query,
                keys,
                values,
                attn_mask=None if row_mask is None else row_mask[:, None, None, :],
                scale=0.1,
            )
            got = torch.ops.envsuite.decode_attention(query, keys, values, row_mask, 0.1)
            torch.testing.assert_close(got, wanted, rtol=1e-5, atol=1e-6)
    hidden = torch.randn(5, 1, 3 * head_dim + 7, generator=generator) * 4
    weight = torch.randn(3 * head_dim + 7, generator=generator)
    torch.testing.assert_close(
        torch.ops.envsuite.rms_norm(hidden, weight, 1e-5),
        torch.nn.functional.rms_norm(hidden, (hidden.shape[-1],), weight, 1e-5),
    )
    # The fused q/k/v product split into heads, query and key rotated (transformers' rotate_half).
    rows, heads, kv_heads = 4, 6, 2
    qkv = torch.randn(rows, 1, (heads + 2 * kv_heads) * head_dim, generator=generator)
    cos, sin = (torch.randn(rows, 1, head_dim, generator=generator) for _ in range(2))
    qk = qkv[..., : (heads + kv_heads) * head_dim].view(rows, 1, -1, head_dim).transpose(1, 2)
    half = head_dim // 2
    rotated = torch.cat((-qk[..., half:], qk[..., :half]), dim=-1)
    qk = qk * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)
    value = qkv[..., (heads + kv_heads) * head_dim :].reshape(rows, 1, -1, head_dim).transpose(1, 2)
    query_got, key_got, value_got = torch.ops.envsuite.rotary_split(qkv, cos, sin, heads, kv_heads)
    torch.testing.assert_close(query_got, qk[:, :heads])
    torch.testing.assert_close(key_got, qk[:, heads:])
    assert torch.equal(value_got, value)
    gate_up = torch.randn(rows, 1, 2 * 3 * head_dim, generator=generator) * 4
    gate, up = gate_up.chunk(2, dim=-1)
    torch.testing.assert_close(torch.ops.envsuite.silu_mul(gate_up), torch.nn.functional.silu(gate) * up)
    with pytest.raises(RuntimeError, match="head size a multiple of 16"):
        torch.ops.envsuite.decode_attention(
            torch.zeros(1, 1, 1, 24), torch.zeros(1, 1, 2, 24), torch.zeros(1, 1, 2, 24), None, 1.0
        )


def test_the_engine_steps_through_native_kernels_only_with_them_on() -> None:
    """``native_kernels`` turns the native products, step kernels and sampler on; ``product_paths``
    keeps the products among the paths it names while the step's norms, attention and sampling stay
    native; ``captured_step=False`` runs the layers one by one; without the lean step nothing of it
    runs. The engine says so in its ``decode_step_plan`` (what ``envsuite doctor`` prints)."""
    here = native_kernels().available
    torch_products = ("f-linear", "onednn", "onednn-reordered")
    configs = {
        EngineConfig(): (here, DecodeStepPlan(True, here, here, here)),
        EngineConfig(native_kernels=False): (False, DecodeStepPlan(True, False, False, False)),
        EngineConfig(product_paths=torch_products): (False, DecodeStepPlan(True, here, here, here)),
        EngineConfig(captured_step=False): (here, DecodeStepPlan(True, here, False, here)),
        EngineConfig(lean_decode=False): (here, DecodeStepPlan(False, False, False, here)),
    }
    if here:  # every product on panels: every row count's step runs as one team; on rows: none does
        configs[EngineConfig(product_path="panels")] = (
            True,
            DecodeStepPlan(True, True, True, True, ROW_BUCKETS),
        )
        configs[EngineConfig(product_path="rows")] = (True, DecodeStepPlan(True, True, True, True, ()))
    for config, (native_products, step) in configs.items():
        engine = _engine(config)
        plan = engine.decode_step_plan
        if config.product_path is None:  # calibrated: a team where this CPU's choices are all panels
            assert set(plan.team_rows) <= set(ROW_BUCKETS) and (plan.team_rows == () or plan.captured)
            plan = replace(plan, team_rows=())
        assert plan == step, config
        assert engine.kernel_plan is not None
        native_paths = {ProductPath.ROWS, ProductPath.PANELS} & set(engine.kernel_plan.paths)
        assert bool(native_paths) == native_products
        engine.close()


def _admitted_together(monkeypatch: pytest.MonkeyPatch, jobs: int) -> None:
    """An engine's first admission waits (up to 10 s) until ``jobs`` requests are queued, so two runs
    decode the same rows together at every step. Otherwise the engine thread, started by the first
    request, may admit it alone and the others a step later; oneDNN's and MKL's products round a row
    differently at different row counts, so two runs could then differ by an ulp without any fault."""
    original = SamplingEngine._collect
    started: weakref.WeakSet[SamplingEngine] = weakref.WeakSet()  # ids are reused once an engine is freed

    def collect(self: SamplingEngine) -> bool:
        if self not in started:  # the first admission only (later ones find the queue empty)
            started.add(self)
            deadline = time.monotonic() + 10.0
            while self._queue.qsize() < jobs and time.monotonic() < deadline:
                time.sleep(0.001)
        return original(self)

    monkeypatch.setattr(SamplingEngine, "_collect", collect)


def _captured_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the steps the captured stack ran (returned a residual stream, not None), by row count."""
    runs: list[int] = []
    original = CapturedLayers.run

    def counted(self: CapturedLayers, hidden: torch.Tensor, *args: Any) -> torch.Tensor | None:
        out = original(self, hidden, *args)
        if out is not None:
            runs.append(int(hidden.shape[0]))
        return out

    monkeypatch.setattr(CapturedLayers, "run", counted)
    return runs


@pytest.mark.parametrize("model_name", [TINY, SMOLLM2])
def test_the_captured_step_samples_exactly_what_the_step_by_step_kernels_sample(
    model_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Greedy and seeded rows of different lengths (padding masks), rows leaving as they finish, and
    (on the tiny model) 90 tokens, past the cache's first 64 spare columns (a reallocation mid-run)."""
    if not native_kernels().available:
        pytest.skip(f"the native kernels are not built here: {native_kernels().reason}")
    runs = _captured_runs(monkeypatch)
    _admitted_together(monkeypatch, jobs=4)  # _sample's four requests
    max_tokens = 90 if model_name == TINY else 12
    paths = _paths_here() if model_name == TINY else [None]
    for path in paths:
        name = None if path is None else path.value
        stepwise = EngineConfig(prefix_cache_bytes=0, product_path=name, captured_step=False)
        reference = _outputs(model_name, stepwise, max_tokens)
        assert not runs
        got = _outputs(model_name, replace(stepwise, captured_step=True), max_tokens)
        _assert_same(reference, got, atol=0.0)
        # Every decode step, the batch shrinking as rows finish (admission times vary: no exact sizes).
        assert len(runs) >= max_tokens - 1 and len(set(runs)) >= 2, runs
        runs.clear()


def test_steps_with_prompt_tails_take_the_step_by_step_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request joining with a cached prefix feeds its prompt's tail in a decode step: the captured
    stack declines nothing else, and the engine samples what the forward samples."""
    if not native_kernels().available:
        pytest.skip(f"the native kernels are not built here: {native_kernels().reason}")
    runs = _captured_runs(monkeypatch)
    engine = _engine(EngineConfig())
    decoder = engine._decoder  # the step the engine runs (no public handle on it)
    assert decoder is not None and decoder.captured is not None
    engine.close()
    tail_steps: list[int] = []
    original = LlamaDecoder.step

    def step(self: LlamaDecoder, *args: Any, **kwargs: Any) -> torch.Tensor:
        tails = kwargs.get("tails", args[4] if len(args) > 4 else ())
        if tails:
            tail_steps.append(len(runs))
        logits: torch.Tensor = original(self, *args, **kwargs)
        if tails:
            assert len(runs) == tail_steps[-1]  # the captured stack did not run this step
        return logits

    monkeypatch.setattr(LlamaDecoder, "step", step)
    reference = _second_turn(FORWARD)
    got = _second_turn(EngineConfig())  # the prefix cache on: the second turn joins, feeding its tail
    assert got[0] == reference[0]
    np.testing.assert_allclose(got[1], reference[1], atol=1e-5, rtol=0)
    assert tail_steps and runs


def _second_turn(config: EngineConfig) -> tuple[list[int], list[float]]:
    """A second turn (the first turn's prompt and reply, then a few more tokens) sent while a long
    request keeps the batch decoding: with the prefix cache on it joins with the cached first turn."""
    loaded = load_sampling_model(base_model=TINY)
    client = LocalSamplingClient(loaded.model, loaded.tokenizer, TINY, config=config)
    try:
        tok = client.get_tokenizer()
        greedy = tinker.SamplingParams(max_tokens=6, temperature=0.0, stop=[])
        long = client.sample(
            tinker.ModelInput.from_ints(tok.encode("A long request that keeps decoding")),
            1,
            tinker.SamplingParams(max_tokens=80, temperature=0.0, stop=[]),
        )
        first_prompt = tok.encode("The first turn of a conversation, long enough to cache")
        first = client.sample(tinker.ModelInput.from_ints(first_prompt), 1, greedy).result()
        second_prompt = [*first_prompt, *first.sequences[0].tokens, *tok.encode(" and more")]
        second = client.sample(tinker.ModelInput.from_ints(second_prompt), 1, greedy).result()
        long.result()
        return list(second.sequences[0].tokens), list(second.sequences[0].logprobs or [])
    finally:
        client.close()


def _assert_float32_sums(got: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> None:
    """``got`` is ``x @ weight.T`` summed in float32 in some order: within the classic bound of a k-term
    float32 dot product, ``k * 2**-24 * sum(|x_i * w_i|)``, of the exact (float64) result. A fixed
    tolerance is not enough: the AVX2 and AVX-512 builds sum in other orders than torch, and a sum of
    1536 products once missed 1e-4 by 2e-5 (CI on an AVX-512 box, the AVX2 child build); a wrong
    column or a lost panel misses this bound by orders of magnitude."""
    exact = torch.nn.functional.linear(x.double(), weight.double())
    bound = x.shape[-1] * 2.0**-24 * torch.nn.functional.linear(x.double().abs(), weight.double().abs())
    error = (got.double() - exact).abs()
    assert bool((error <= bound + 1e-30).all()), f"max error {error.max():.3g}, its bound {bound.min():.3g}+"


def _mapped(address: int) -> bool:
    """Whether ``address`` lies in one of this process's mappings (/proc/self/maps)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        low, high = (int(bound, 16) for bound in line.split()[0].split("-"))
        if low <= address < high:
            return True
    return False


def test_panels_lie_one_after_another_in_huge_page_arenas_and_multiply_as_before() -> None:
    """Panels of 64 KB or more are handed out in order from 2 MB-aligned arenas advised for transparent
    huge pages (a decode step streams them: fewer TLB misses, one long stream); smaller ones take
    torch's allocator. Either way they hold the weight's columns and multiply as ``F.linear`` does; a
    tensor of an arena's size or more gets an arena of its own, unmapped when the tensor is freed."""
    if not native_kernels().available:
        pytest.skip(f"the native kernels are not built here: {native_kernels().reason}")
    page, huge_page = 4096, 2 << 20
    previous: torch.Tensor | None = None
    generator = torch.Generator().manual_seed(581)
    for out_features, in_features in ((3072, 576), (1000, 600), (576, 1536), (40, 24)):
        weight = torch.randn(out_features, in_features, generator=generator)
        panels = torch.ops.envsuite.pack_panels(weight)
        if panels.nbytes >= 64 << 10:
            assert panels.data_ptr() % page == 0
            if previous is not None:  # right after the previous one, or at the start of a new arena
                after = previous.data_ptr() + -(-previous.nbytes // page) * page
                assert panels.data_ptr() == after or panels.data_ptr() % huge_page == 0
            previous = panels
        columns = panels.transpose(1, 2).reshape(-1, in_features)
        assert torch.equal(columns[:out_features], weight) and not columns[out_features:].any()
        x = torch.randn(5, in_features, generator=generator)
        got = torch.ops.envsuite.panel_linear(x, panels, out_features, None)
        _assert_float32_sums(got, x, weight)
    big = torch.ops.envsuite.pack_panels(torch.ones(16 * 1024, 1024))  # 64 MiB: an arena of its own
    address = big.data_ptr()
    assert address % huge_page == 0 and _mapped(address)
    del big  # the deleter unmaps its arena (a double free or a leak would show up here or in CI)
    assert not _mapped(address)


@pytest.mark.parametrize("rows", [13, 14, 15, 16, 20])
def test_rows_multiply_as_smaller_batches_do(rows: int) -> None:
    """Up to 12 rows make one pass over the whole k, 13-16 rows one pass per panel over x read k-major,
    more rows chunks of row-major x in k blocks (``_native_products.cpp``): every output is the same sum
    in the same order, so the rows come out bit for bit as when multiplied in batches of 12 and the rest
    (also with a k not a multiple of the k block, and an odd panel count: the last item is one panel)."""
    if not native_kernels().available:
        pytest.skip(f"the native kernels are not built here: {native_kernels().reason}")
    generator = torch.Generator().manual_seed(rows)
    for out_features, in_features in ((3072, 576), (1000, 600), (576, 1536)):
        weight = torch.randn(out_features, in_features, generator=generator)
        panels = torch.ops.envsuite.pack_panels(weight)
        x = torch.randn(rows, in_features, generator=generator)
        whole = torch.ops.envsuite.panel_linear(x, panels, out_features, None)
        parts = [
            torch.ops.envsuite.panel_linear(part, panels, out_features, None) for part in (x[:12], x[12:])
        ]
        assert torch.equal(whole, torch.cat(parts)), (rows, out_features, in_features)
        _assert_float32_sums(whole, x, weight)


def test_the_cpu_identity_loads_no_torch_and_names_the_widest_vector_unit(tmp_path: Path) -> None:
    """``envsuite.engine.cpu_identity`` (the key of built kernels and calibrations, and how benches name
    the CPU) reads ``/proc/cpuinfo`` without importing torch, and its vector unit follows the flags."""
    probe = (
        "import json, sys; import envsuite.engine as engine; cpu = engine.cpu_identity();"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'vector': cpu.vector_unit,"
        " 'cpus': cpu.logical_cpus, 'model': cpu.model_name}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path
    )
    seen = json.loads(done.stdout)
    assert seen["torch"] is False and seen["cpus"] == os.cpu_count() and seen["model"]
    flags: set[str] = set()
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []:
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags = set(value.split())
            break
    expected = (
        "AVX-512"
        if "avx512f" in flags
        else "AVX2"
        if "avx2" in flags
        else "NEON"
        if {"asimd", "neon"} & flags
        else "no AVX2"
    )
    assert seen["vector"] == expected


def test_forced_plans_name_their_path() -> None:
    plan = KernelPlan.forced(ProductPath.ONEDNN_REORDERED)
    assert plan.choice((8, 16)).paths == (ProductPath.ONEDNN_REORDERED,) * len(ROW_BUCKETS)
    # A weight that must stay plain (shared, or tied and the layout not panels) takes the path's plain
    # counterpart.
    for use in (WeightUse.SHARED, WeightUse.EMBEDDED):
        assert plan.choice((8, 16), use).paths == (ProductPath.ONEDNN,) * len(ROW_BUCKETS)
    panels = KernelPlan.forced(ProductPath.PANELS)
    assert panels.choice((8, 16), WeightUse.EMBEDDED).paths == (ProductPath.PANELS,) * len(ROW_BUCKETS)
    assert panels.choice((8, 16), WeightUse.SHARED).paths == (ProductPath.ROWS,) * len(ROW_BUCKETS)
    assert "forced: every product through oneDNN, reordered weight" in plan.report()
