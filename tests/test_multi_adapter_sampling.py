"""Multi-adapter sampling: rows of several LoRA adapters of one base model decode in one engine step,
and each row samples what its adapter samples alone.

The reference is each adapter's own engine on its merged weights (the single-adapter path); the shared
engine serves the unmerged base and every adapter as a variant (``SamplingEngine.add_variant``), and its
mixed steps add each row's low-rank terms to the base products. Adapters are the real tiny random Llama
with rank-4 LoRA on every target module (attention, MLP, LM head) and random non-zero ``B``, so they
sample different tokens from each other. Greedy and seeded sampling, 2 and 4 adapters: the tokens are
equal, the logprobs within :data:`LOGPROB_TOLERANCE` (the merged and the unmerged product sum the same
terms in a different order: docs/backend_sampling.md "Multi-adapter sampling").
"""

from __future__ import annotations

import concurrent.futures
import gc
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tinker import types
from transformers import PreTrainedModel

from envsuite.backends.local import (
    LocalSamplingClient,
    LocalServiceClient,
    LocalTrainingClient,
    resolve_checkpoint_path,
)
from envsuite.engine.kernels import native_kernels
from envsuite.engine.sampling import EngineConfig, EngineRequest, EngineResult, SamplingEngine
from envsuite.engine.weights import (
    LoraFactors,
    LoraSpec,
    add_lora,
    load_base_model,
    lora_factors,
    merge_lora,
    unmerged_model,
)
from envsuite.models import resolve_model

MODEL = "tiny-random"
LOGPROB_TOLERANCE = 1e-4
"""Absolute, per sampled token: fp32 rounding of a row's logits through the two summation orders, ~1e-6
on these models' logits, with two orders of magnitude of room for other vector widths."""
B_STD = 0.05
"""The adapters' random up projections: large enough that adapters sample different tokens."""


def _decode(tokens: list[int]) -> str:
    return " ".join(map(str, tokens))


def _adapter(seed: int) -> tuple[PreTrainedModel, LoraFactors, frozenset[int], Any]:
    """A merged rank-4 adapter of the tiny model with random non-zero B, its factors, its shared tensors'
    ids and the peft model that holds them (keep it while an engine is built on those ids: a freed
    tensor's id may be reused by a copy that is then wrongly kept plain)."""
    base = load_base_model(str(resolve_model(MODEL).path))
    peft = add_lora(base, LoraSpec(rank=4, seed=seed))
    generator = torch.Generator().manual_seed(1000 + seed)
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * B_STD)
    shared = frozenset(id(p) for p in peft.parameters())
    return merge_lora(peft), lora_factors(peft), shared, peft


def _requests(adapter: int, greedy: bool) -> list[EngineRequest]:
    prompts = [tuple(range(5 + adapter, 14 + 2 * adapter)), (7, 3, 11 + adapter, 2, 9)]
    return [
        EngineRequest(
            prompt_T=prompt,
            num_samples=2,
            max_tokens=10,
            temperature=0.0 if greedy else 1.0,
            seed=None if greedy else 17 * adapter + i,
        )
        for i, prompt in enumerate(prompts)
    ]


def _results(
    engine: SamplingEngine, requests: list[EngineRequest], variant: int = 0
) -> list[concurrent.futures.Future[EngineResult]]:
    return [engine.submit(request, lambda r: r, variant=variant) for request in requests]


def _alone(greedy: bool, index: int) -> list[EngineResult]:
    """What the adapter samples on its own merged weights (a fresh copy, its own engine)."""
    merged, _, _, _ = _adapter(index)
    engine = SamplingEngine(merged, _decode)
    try:
        return [future.result(timeout=120) for future in _results(engine, _requests(index, greedy))]
    finally:
        engine.close()


@pytest.mark.parametrize("count", [2, 4])
@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
def test_each_row_samples_its_own_adapters_tokens_in_mixed_steps(count: int, greedy: bool) -> None:
    alone = [_alone(greedy, k) for k in range(count)]
    tokens_alone = [[seq.tokens for result in results for seq in result.sequences] for results in alone]
    assert len({str(tokens) for tokens in tokens_alone}) == count, "the adapters must sample differently"

    together, mixed_steps, _ = _together(count, greedy, EngineConfig())
    assert mixed_steps > 0, "the adapters' rows never shared a step"
    for k in range(count):
        for mixed, solo in zip(together[k], alone[k], strict=True):
            for seq_mixed, seq_solo in zip(mixed.sequences, solo.sequences, strict=True):
                assert seq_mixed.tokens == seq_solo.tokens
                diff = max(abs(a - b) for a, b in zip(seq_mixed.logprobs, seq_solo.logprobs, strict=True))
                assert diff <= LOGPROB_TOLERANCE


def _together(count: int, greedy: bool, config: EngineConfig) -> tuple[list[list[EngineResult]], int, int]:
    """Every adapter's requests at once on one engine of the unmerged base: the results per adapter, the
    mixed steps run, and how many of them ran as one native call."""
    merged0, factors0, shared0, _peft0 = _adapter(0)
    engine = SamplingEngine(unmerged_model(merged0, factors0), _decode, config, shared_weights=shared0)
    try:
        variants = []
        for k in range(count):
            merged, factors, shared, _peft = _adapter(k)
            variants.append(engine.add_variant(merged, factors, shared))
        futures = [_results(engine, _requests(k, greedy), variants[k]) for k in range(count)]
        together = [[future.result(timeout=120) for future in part] for part in futures]
    finally:
        engine.close()
    return together, engine.variants.mixed_steps, engine.variants.mixed_counts.captured


def test_mixed_steps_run_as_one_native_call_and_sample_what_the_step_by_step_python_samples() -> None:
    """The captured mixed step (the base's stack in one native call, each site's terms after its
    product) against the mixed step run from Python op by op: the same tokens, logprobs within rounding."""
    if not native_kernels().available:
        pytest.skip(f"native kernels unavailable: {native_kernels().reason}")
    captured, steps, native_steps = _together(2, False, EngineConfig())
    by_op, steps_by_op, native_by_op = _together(2, False, EngineConfig(captured_step=False))
    assert native_steps > 0 and steps > 0, "no mixed step ran as one native call"
    assert native_by_op == 0 and steps_by_op > 0
    for part, part_by_op in zip(captured, by_op, strict=True):
        for result, result_by_op in zip(part, part_by_op, strict=True):
            for seq, seq_by_op in zip(result.sequences, result_by_op.sequences, strict=True):
                assert seq.tokens == seq_by_op.tokens
                diff = max(abs(a - b) for a, b in zip(seq.logprobs, seq_by_op.logprobs, strict=True))
                assert diff <= LOGPROB_TOLERANCE


def test_base_rows_and_adapter_rows_share_a_step() -> None:
    """Variant 0 (the base model itself) rows ride along with an adapter's rows, with no terms added."""
    base_alone = SamplingEngine(load_base_model(str(resolve_model(MODEL).path)), _decode)
    try:
        expected = [f.result(timeout=120) for f in _results(base_alone, _requests(0, True))]
    finally:
        base_alone.close()
    merged0, factors0, shared0, _peft0 = _adapter(0)
    engine = SamplingEngine(unmerged_model(merged0, factors0), _decode, shared_weights=shared0)
    try:
        merged, factors, shared, _peft = _adapter(1)
        variant = engine.add_variant(merged, factors, shared)
        base_futures = _results(engine, _requests(0, True))
        _results(engine, _requests(1, True), variant)
        got = [f.result(timeout=120) for f in base_futures]
    finally:
        engine.close()
    assert engine.variants.mixed_steps > 0
    assert [s.tokens for r in got for s in r.sequences] == [s.tokens for r in expected for s in r.sequences]


def test_a_removed_variant_fails_its_requests_and_takes_no_more() -> None:
    merged0, factors0, shared0, _peft0 = _adapter(0)
    engine = SamplingEngine(unmerged_model(merged0, factors0), _decode, shared_weights=shared0)
    try:
        merged, factors, shared, _peft = _adapter(2)
        variant = engine.add_variant(merged, factors, shared)
        engine.remove_variant(variant)
        late = _results(engine, _requests(2, True), variant)[0]
        with pytest.raises(Exception, match="no variant"):
            late.result(timeout=60)
        # The engine itself goes on serving its own model.
        assert _results(engine, _requests(0, True))[0].result(timeout=120).sequences
    finally:
        engine.close()


# ---------------------------------------------------------------------------------- through the backend

ADAM = types.AdamParams(learning_rate=5e-2)


def _train(trainer: LocalTrainingClient, tokens: list[int]) -> None:
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": np.array(tokens[1:]),
            "weights": np.ones(len(tokens) - 1, np.float32),
        },
    )
    for _ in range(3):
        trainer.forward_backward([datum], "cross_entropy").result()
        trainer.optim_step(ADAM).result()


def _sample(client: LocalSamplingClient, k: int) -> list[Any]:
    params = types.SamplingParams(max_tokens=10, temperature=1.0, seed=5 + k, stop=[])
    prompt = types.ModelInput.from_ints([1, 28, 4003 + k, 17])
    return [client.sample(prompt, 2, params), client.sample(prompt, 1, replace_seed(params, None))]


def replace_seed(params: types.SamplingParams, seed: int | None) -> types.SamplingParams:
    """Greedy (temperature 0) for the second request: both modes in one run."""
    return types.SamplingParams(max_tokens=params.max_tokens, temperature=0.0, seed=seed, stop=[])


def test_lora_sampling_clients_of_one_base_share_an_engine_and_sample_as_alone(tmp_path: Path) -> None:
    """Two training clients' snapshots (one policy per role) share one engine; requests in flight together
    decode in the same steps and give what each adapter samples on its own engine."""
    service = LocalServiceClient(log_dir=tmp_path)
    trainers = [service.create_lora_training_client(MODEL, rank=4, seed=k).result() for k in range(2)]
    for k, trainer in enumerate(trainers):
        _train(trainer, [1, 28, 4003, 17, 902, 311 + 50 * k, 64, 2])
    paths = [
        trainer.save_weights_for_sampler(f"alone-{k}").result().path for k, trainer in enumerate(trainers)
    ]
    alone = []
    for k, path in enumerate(paths):
        own = LocalSamplingClient.load(model_path=str(resolve_checkpoint_path(path, tmp_path)))
        alone.append([future.result() for future in _sample(own, k)])
        own.close()
    samplers = [trainer.save_weights_and_get_sampling_client().result() for trainer in trainers]
    engine = samplers[0]._engine
    assert samplers[1]._engine is engine  # one engine for both adapters of the base model
    futures = [_sample(sampler, k) for k, sampler in enumerate(samplers)]
    together = [[future.result() for future in part] for part in futures]
    assert engine.variants.mixed_steps > 0
    assert alone[0][0].sequences[0].tokens != alone[1][0].sequences[0].tokens
    for k in range(2):
        for mixed, solo in zip(together[k], alone[k], strict=True):
            for seq_mixed, seq_solo in zip(mixed.sequences, solo.sequences, strict=True):
                assert seq_mixed.tokens == seq_solo.tokens
                assert np.allclose(seq_mixed.logprobs, seq_solo.logprobs, atol=LOGPROB_TOLERANCE, rtol=0)
    samplers[0].close()  # its variant goes; the other client keeps sampling
    assert _sample(samplers[1], 1)[0].result().sequences[0].tokens == alone[1][0].sequences[0].tokens
    service.close()


def test_a_dropped_lora_client_frees_its_variant_without_the_garbage_collector(tmp_path: Path) -> None:
    """The shared engine keeps a client's merged model only while the client lives (no reference cycle)."""
    service = LocalServiceClient(log_dir=tmp_path)
    trainer = service.create_lora_training_client(MODEL, rank=4, seed=0).result()
    keep = trainer.save_weights_and_get_sampling_client().result()  # holds the shared engine
    sampler = trainer.save_weights_and_get_sampling_client().result()
    engine, variant = sampler._engine, sampler._variant
    assert keep._engine is engine and variant != keep._variant
    _sample(sampler, 0)[0].result()
    model = weakref.ref(engine.variants.by_id[variant].model)
    gc.disable()
    try:
        del sampler
        deadline = time.monotonic() + 30
        while model() is not None and time.monotonic() < deadline:
            time.sleep(0.05)  # the engine thread drops the variant between two steps
        assert model() is None and variant not in engine.variants.by_id
    finally:
        gc.enable()
    assert _sample(keep, 0)[0].result().sequences
    service.close()
