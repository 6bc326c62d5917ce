"""Every built-in loss against an independent computation: its value and its gradient, on fixed datums.

The references are the per-token formulas of the tinker docs (and, for ``stable_reinforce``, Tapered
Off-Policy REINFORCE, Le Roux et al. 2025) written out here in numpy over log-probabilities taken from
transformers directly, never through envsuite's loss code. The gradient check: a loss's gradient with
respect to the weights is ``sum_t g_t * dlogp_t/dweights`` with ``g_t = dL/dlogp_t``, which is exactly
the gradient of ``cross_entropy`` with weights ``-g_t``. One optimizer step of each, from the same
LoRA init, with Adam made linear in the gradient (``beta1 = beta2 = 0`` and a large ``eps``: the step
is ``lr * g / (|g| + eps)``), must land on the same weights; a gradient off by a few percent moves the
logprobs after the step visibly (checked below).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from tinker import types
from transformers import AutoModelForCausalLM

from envsuite.backends.local import LocalServiceClient
from envsuite.models import resolve_model
from tests.conftest import TEST_MODEL

TOKENS = [5, 17, 300, 42, 9000, 12, 77, 1024, 3]
T = len(TOKENS) - 1
ADVANTAGES = np.array([1.0, -1.0, 0.5, 2.0, -0.3, 0.0, 1.5, -2.0], dtype=np.float32)
SHIFTS = np.linspace(-0.5, 0.5, T).astype(np.float32)
LINEAR_ADAM = types.AdamParams(learning_rate=10.0, beta1=0.0, beta2=0.0, eps=1000.0)
SEED = 3


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServiceClient]:
    service = LocalServiceClient(log_dir=tmp_path_factory.mktemp("grad"))
    yield service
    service.close()


@pytest.fixture(scope="module")
def reference_model() -> Any:
    return AutoModelForCausalLM.from_pretrained(str(resolve_model(TEST_MODEL).path), dtype=torch.float32)


def _logp(model: Any, tokens: list[int]) -> np.ndarray:
    """log p(tokens[t+1] | tokens[:t+1]) from transformers (a fresh adapter changes nothing: B = 0)."""
    with torch.no_grad():
        logits = model(torch.tensor([tokens[:-1]])).logits[0]
    logp = torch.log_softmax(logits, dim=-1)
    return logp[torch.arange(len(tokens) - 1), torch.tensor(tokens[1:])].numpy().astype(np.float64)


def _datum(tokens: list[int] = TOKENS, **inputs: np.ndarray) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": np.array(tokens[1:]), **inputs},
    )


def _as_cross_entropy(datum: types.Datum, grad_T: np.ndarray) -> types.Datum:
    """The datum with cross-entropy weights whose gradient is ``sum_t grad_T[t] * dlogp_t``."""
    return types.Datum(
        model_input=datum.model_input,
        loss_fn_inputs={
            "target_tokens": datum.loss_fn_inputs["target_tokens"],
            "weights": (-grad_T).astype(np.float32),
        },
    )


def _after_one_step(
    service: LocalServiceClient, data: list[types.Datum], loss_fn: str, config: dict[str, float] | None = None
) -> np.ndarray:
    """Logprobs of a probe datum after one linear-Adam step of ``loss_fn`` on ``data`` from the same init."""
    client = service.create_lora_training_client(TEST_MODEL, rank=4, seed=SEED).result()
    try:
        client.forward_backward(data, loss_fn, config).result()
        client.optim_step(LINEAR_ADAM).result()
        out = client.forward([_datum()], "cross_entropy").result()
        return np.asarray(out.loss_fn_outputs[0]["logprobs"].to_numpy())
    finally:
        client.close()


def _check(
    service: LocalServiceClient,
    data: list[types.Datum],
    loss_fn: str,
    config: dict[str, float] | None,
    losses_D: list[np.ndarray],
    grads_D: list[np.ndarray],
) -> None:
    """Value (per token and summed) and gradient of ``loss_fn`` against the reference."""
    client = service.create_lora_training_client(TEST_MODEL, rank=4, seed=SEED).result()
    out = client.forward(data, loss_fn, config).result()
    client.close()
    for output, expected in zip(out.loss_fn_outputs, losses_D, strict=True):
        np.testing.assert_allclose(output["elementwise_loss"].to_numpy(), expected, rtol=1e-4, atol=1e-5)
    assert out.metrics["loss:sum"] == pytest.approx(float(sum(x.sum() for x in losses_D)), rel=1e-4, abs=1e-5)
    stepped = _after_one_step(service, data, loss_fn, config)
    reference = [_as_cross_entropy(d, g) for d, g in zip(data, grads_D, strict=True)]
    np.testing.assert_allclose(stepped, _after_one_step(service, reference, "cross_entropy"), atol=2e-4)


def _clipped_surrogate_grad(ratio: np.ndarray, adv: np.ndarray, low: float, high: float) -> np.ndarray:
    """d/dlogp of -min(r*A, clip(r)*A) where dr/dlogp = r: the unclipped term's unless the clipped one
    is strictly smaller (then 0: the clamp is flat there)."""
    clipped = np.clip(ratio, low, high)
    inside = (ratio > low) & (ratio < high)
    takes_unclipped = inside | (ratio * adv < clipped * adv)
    return np.where(takes_unclipped, -adv * ratio, 0.0)


# -- one test per loss ------------------------------------------------------------------------------


def test_cross_entropy(service: LocalServiceClient, reference_model: Any) -> None:
    weights = np.array([0, 0, 1, 1, 0.5, 1, 2, 1], dtype=np.float32)
    lp = _logp(reference_model, TOKENS)
    _check(service, [_datum(weights=weights)], "cross_entropy", None, [-weights * lp], [-weights])


def test_importance_sampling(service: LocalServiceClient, reference_model: Any) -> None:
    lp = _logp(reference_model, TOKENS)
    q = lp + SHIFTS
    ratio = np.exp(lp - q)
    datum = _datum(logprobs=q.astype(np.float32), advantages=ADVANTAGES)
    _check(service, [datum], "importance_sampling", None, [-ratio * ADVANTAGES], [-ratio * ADVANTAGES])


@pytest.mark.parametrize(("low", "high"), [(0.8, 1.2), (0.9, 1.05)])
def test_ppo(service: LocalServiceClient, reference_model: Any, low: float, high: float) -> None:
    lp = _logp(reference_model, TOKENS)
    q = lp + SHIFTS
    ratio = np.exp(lp - q)
    loss = -np.minimum(ratio * ADVANTAGES, np.clip(ratio, low, high) * ADVANTAGES)
    grad = _clipped_surrogate_grad(ratio, ADVANTAGES, low, high)
    config = {"clip_low_threshold": low, "clip_high_threshold": high}
    _check(
        service, [_datum(logprobs=q.astype(np.float32), advantages=ADVANTAGES)], "ppo", config, [loss], [grad]
    )


@pytest.mark.parametrize("config", [None, {"clip_low_threshold": 0.0, "clip_high_threshold": 1.1}])
def test_cispo(service: LocalServiceClient, reference_model: Any, config: dict[str, float] | None) -> None:
    low, high = (
        (0.8, 1.2) if config is None else (config["clip_low_threshold"], config["clip_high_threshold"])
    )
    lp = _logp(reference_model, TOKENS)
    q = lp + SHIFTS
    weight = np.clip(np.exp(lp - q), low, high)
    datum = _datum(logprobs=q.astype(np.float32), advantages=ADVANTAGES)
    _check(service, [datum], "cispo", config, [-weight * lp * ADVANTAGES], [-weight * ADVANTAGES])


@pytest.mark.parametrize("beta", [None, 0.5])
def test_dro(service: LocalServiceClient, reference_model: Any, beta: float | None) -> None:
    b = 0.05 if beta is None else beta
    lp = _logp(reference_model, TOKENS)
    q = lp + 3 * SHIFTS
    loss = -(lp * ADVANTAGES - 0.5 * b * (lp - q) ** 2)
    grad = -(ADVANTAGES - b * (lp - q))
    datum = _datum(logprobs=q.astype(np.float32), advantages=ADVANTAGES)
    _check(service, [datum], "dro", None if beta is None else {"beta": beta}, [loss], [grad])


def test_gspo_takes_one_ratio_per_datum(service: LocalServiceClient, reference_model: Any) -> None:
    """Two datums in one call: one's sequence ratio inside the clip range, the other's above it."""
    lp = _logp(reference_model, TOKENS)
    masks = [np.array([0, 0, 1, 1, 1, 1, 0, 1], np.float32), np.array([0, 1, 1, 1, 1, 1, 1, 1], np.float32)]
    data, losses, grads = [], [], []
    for mask, mean_log_ratio in zip(masks, [0.1, 0.5], strict=True):
        q = lp + SHIFTS
        q = q - (mean_log_ratio + SHIFTS[mask != 0].mean()) * (mask != 0)  # mean over M of lp - q
        s = np.exp(np.mean((lp - q)[mask != 0]))
        assert s == pytest.approx(np.exp(mean_log_ratio), rel=1e-6)
        ratio = np.full(T, s)
        losses.append(-np.minimum(ratio * ADVANTAGES, np.clip(ratio, 0.8, 1.2) * ADVANTAGES))
        grads.append(_clipped_surrogate_grad(ratio, ADVANTAGES, 0.8, 1.2))
        data.append(_datum(logprobs=q.astype(np.float32), advantages=ADVANTAGES, sequence_ratio_mask=mask))
    assert np.any(grads[1] == 0) and np.all((grads[0] != 0) == (ADVANTAGES != 0))  # both branches
    _check(service, data, "gspo", None, losses, grads)


def test_stable_reinforce_truncates_negative_sequences_only(
    service: LocalServiceClient, reference_model: Any
) -> None:
    """Sequences sampled (and recorded) by a policy one big step away from the trained one.

    A datum per sequence, and one multi-turn datum holding two sequences back to back; each sampled
    token's weight is 1 where its advantage is >= 0 and min(1, pi(s)/mu(s)) of its whole sequence s
    where it is < 0; prompt tokens carry advantage 0.
    """
    mover = service.create_lora_training_client(TEST_MODEL, rank=4, seed=SEED).result()
    mover.forward_backward([_datum(weights=np.ones(T, np.float32))], "cross_entropy").result()
    mover.optim_step(types.AdamParams(learning_rate=0.05)).result()
    sampler = mover.save_weights_and_get_sampling_client(record_stability_info=True).result()
    params = types.SamplingParams(max_tokens=4, temperature=1.0, seed=11, stop=[])
    prompt = TOKENS[:4]
    first = sampler.sample(types.ModelInput.from_ints(prompt), 3, params).result().sequences
    turn = prompt + first[0].tokens + [9, 10]
    second = sampler.sample(types.ModelInput.from_ints(turn), 1, params).result().sequences[0]
    mover.close()

    sequences = [(prompt, s, a) for s, a in zip(first, [-1.0, -0.5, 1.0], strict=True)]
    data, losses, grads, weights = [], [], [], []
    for context, seq, adv in sequences:
        tokens = context + seq.tokens
        lp = _logp(reference_model, tokens)
        q = np.asarray(seq.logprobs, np.float64)
        sampled = slice(len(context) - 1, None)
        w = 1.0 if adv >= 0 else min(1.0, float(np.exp(np.sum(lp[sampled] - q))))
        weights.append(w)
        adv_T = np.zeros(len(tokens) - 1)
        adv_T[sampled] = adv
        losses.append(-w * adv_T * lp)
        grads.append(-w * adv_T)
        datum = _datum(tokens, advantages=adv_T.astype(np.float32))
        data.append(
            datum.with_provenance(
                model_input=[
                    types.PromptProvenanceSpan(sequence_id=seq.sequence_id, length=len(context)),
                    types.SampledProvenanceSpan(sequence_id=seq.sequence_id, length=len(seq.tokens) - 1),
                ],
                loss_fn_inputs=[
                    types.PromptProvenanceSpan(
                        sequence_id=seq.sequence_id, offset=1, length=len(context) - 1
                    ),
                    types.SampledProvenanceSpan(sequence_id=seq.sequence_id, length=len(seq.tokens)),
                ],
            )
        )
    assert min(weights) < 0.99, "a negative sequence the trained policy finds less likely is truncated"
    data.append(_two_turn_datum(reference_model, prompt, first[0], second, losses, grads))
    _check(service, data, "stable_reinforce", None, losses, grads)


def _two_turn_datum(
    model: Any,
    prompt: list[int],
    one: types.SampledSequence,
    two: types.SampledSequence,
    losses: list[np.ndarray],
    grads: list[np.ndarray],
) -> types.Datum:
    """prompt + one's tokens + an observation [9, 10] + two's tokens, advantage -1 on both replies; the
    reference appended to ``losses`` / ``grads`` truncates each reply by its own sequence's ratio."""
    tokens = prompt + one.tokens + [9, 10] + two.tokens
    lp = _logp(model, tokens)
    first = np.arange(len(prompt) - 1, len(prompt) - 1 + len(one.tokens))
    second = np.arange(len(tokens) - 1 - len(two.tokens), len(tokens) - 1)
    adv_T = np.zeros(len(tokens) - 1)
    w_T = np.ones(len(tokens) - 1)
    for where, seq in ((first, one), (second, two)):
        adv_T[where] = -1.0
        w_T[where] = min(1.0, float(np.exp(np.sum(lp[where] - np.asarray(seq.logprobs)))))
    losses.append(-w_T * adv_T * lp)
    grads.append(-w_T * adv_T)
    n_one, n_two = len(one.tokens), len(two.tokens)
    return _datum(tokens, advantages=adv_T.astype(np.float32)).with_provenance(
        model_input=[
            types.PromptProvenanceSpan(sequence_id=one.sequence_id, length=len(prompt)),
            types.SampledProvenanceSpan(sequence_id=one.sequence_id, length=n_one),
            types.PromptProvenanceSpan(sequence_id=two.sequence_id, offset=len(prompt) + n_one, length=2),
            types.SampledProvenanceSpan(sequence_id=two.sequence_id, length=n_two - 1),
        ],
        loss_fn_inputs=[
            types.PromptProvenanceSpan(sequence_id=one.sequence_id, offset=1, length=len(prompt) - 1),
            types.SampledProvenanceSpan(sequence_id=one.sequence_id, length=n_one),
            types.PromptProvenanceSpan(sequence_id=two.sequence_id, offset=len(prompt) + n_one, length=2),
            types.SampledProvenanceSpan(sequence_id=two.sequence_id, length=n_two),
        ],
    )


def test_the_gradient_check_sees_a_five_percent_error(
    service: LocalServiceClient, reference_model: Any
) -> None:
    """The check above is not vacuous: a reference gradient 5% off lands visibly elsewhere."""
    lp = _logp(reference_model, TOKENS)
    q = lp + SHIFTS
    grad = -np.exp(lp - q) * ADVANTAGES
    datum = _datum(logprobs=q.astype(np.float32), advantages=ADVANTAGES)
    stepped = _after_one_step(service, [datum], "importance_sampling")
    off = _after_one_step(service, [_as_cross_entropy(datum, 1.05 * grad)], "cross_entropy")
    assert np.abs(stepped - off).max() > 1e-2


def test_stable_reinforce_on_policy_is_importance_sampling(service: LocalServiceClient) -> None:
    """Sampled from the weights being trained (pi = mu), both losses give the gradient -A * dlogp."""
    fresh = service.create_lora_training_client(TEST_MODEL, rank=4, seed=SEED).result()
    sampler = fresh.save_weights_and_get_sampling_client(record_stability_info=True).result()
    prompt = TOKENS[:4]
    params = types.SamplingParams(max_tokens=4, temperature=1.0, seed=5, stop=[])
    sequences = sampler.sample(types.ModelInput.from_ints(prompt), 4, params).result().sequences
    fresh.close()
    data = []
    for seq, adv in zip(sequences, [1.0, -1.0, 0.5, -0.5], strict=True):
        tokens = prompt + seq.tokens
        pad = len(prompt) - 1
        datum = _datum(
            tokens,
            logprobs=np.array([0.0] * pad + list(seq.logprobs or []), np.float32),
            advantages=np.array([0.0] * pad + [adv] * len(seq.tokens), np.float32),
        )
        data.append(
            datum.with_provenance(
                model_input=[
                    types.PromptProvenanceSpan(sequence_id=seq.sequence_id, length=len(prompt)),
                    types.SampledProvenanceSpan(sequence_id=seq.sequence_id, length=len(seq.tokens) - 1),
                ],
                loss_fn_inputs=[
                    types.PromptProvenanceSpan(sequence_id=seq.sequence_id, offset=1, length=pad),
                    types.SampledProvenanceSpan(sequence_id=seq.sequence_id, length=len(seq.tokens)),
                ],
            )
        )
    np.testing.assert_allclose(
        _after_one_step(service, data, "stable_reinforce"),
        _after_one_step(service, data, "importance_sampling"),
        atol=2e-4,
    )
