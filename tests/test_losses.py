"""The local backend's losses against hand computations, on the tiny model and on plain numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tinker import types
from transformers import AutoModelForCausalLM

from envsuite.backends.local import (
    LocalServiceClient,
    LocalTrainingClient,
    LossInputError,
    cross_entropy,
    importance_sampling,
    ppo,
)
from envsuite.models import resolve_model
from tests.conftest import TEST_MODEL

TOKENS = [5, 17, 300, 42, 9000, 12, 77, 1024, 3]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> LocalServiceClient:
    return LocalServiceClient(log_dir=tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="module")
def client(service: LocalServiceClient) -> LocalTrainingClient:
    return service.create_lora_training_client(TEST_MODEL, rank=4, seed=0).result()


@pytest.fixture(scope="module")
def reference_logprobs() -> np.ndarray:
    """log p(x_{t+1} | x_<=t) straight from transformers (a fresh LoRA adapter changes nothing: B = 0)."""
    model = AutoModelForCausalLM.from_pretrained(str(resolve_model(TEST_MODEL).path), dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([TOKENS[:-1]])).logits[0]
    logp = torch.log_softmax(logits, dim=-1)
    return logp[torch.arange(len(TOKENS) - 1), torch.tensor(TOKENS[1:])].numpy()


def _datum(**inputs: np.ndarray) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={"target_tokens": np.array(TOKENS[1:]), **inputs},
    )


T = len(TOKENS) - 1
WEIGHTS = np.array([0, 0, 1, 1, 0.5, 1, 2, 1], dtype=np.float32)
ADVANTAGES = np.array([1.0, -1.0, 0.5, 2.0, -0.3, 0.0, 1.5, -2.0], dtype=np.float32)


def test_cross_entropy_matches_hand_computation(
    client: LocalTrainingClient, reference_logprobs: np.ndarray
) -> None:
    out = client.forward([_datum(weights=WEIGHTS)], "cross_entropy").result()
    logprobs = out.loss_fn_outputs[0]["logprobs"].to_numpy()
    np.testing.assert_allclose(logprobs, reference_logprobs, atol=1e-5)
    expected = -float(np.sum(WEIGHTS * reference_logprobs))
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
    np.testing.assert_allclose(
        out.loss_fn_outputs[0]["elementwise_loss"].to_numpy(), -WEIGHTS * reference_logprobs, atol=1e-5
    )


def test_importance_sampling_matches_hand_computation(
    client: LocalTrainingClient, reference_logprobs: np.ndarray
) -> None:
    sampler = (reference_logprobs + np.linspace(-0.5, 0.5, T)).astype(np.float32)
    out = client.forward([_datum(logprobs=sampler, advantages=ADVANTAGES)], "importance_sampling").result()
    expected = -float(np.sum(np.exp(reference_logprobs - sampler) * ADVANTAGES))
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize(("low", "high"), [(0.8, 1.2), (0.9, 1.05)])
def test_ppo_matches_hand_computation(
    client: LocalTrainingClient, reference_logprobs: np.ndarray, low: float, high: float
) -> None:
    sampler = (reference_logprobs + np.linspace(-0.5, 0.5, T)).astype(np.float32)
    config = {"clip_low_threshold": low, "clip_high_threshold": high}
    out = client.forward([_datum(logprobs=sampler, advantages=ADVANTAGES)], "ppo", config).result()
    ratio = np.exp(reference_logprobs - sampler)
    expected = -float(np.sum(np.minimum(ratio * ADVANTAGES, np.clip(ratio, low, high) * ADVANTAGES)))
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)


def test_ppo_default_clip_is_epsilon_point_two() -> None:
    logp = torch.tensor([0.0, 0.0, 0.0, 0.0])
    sampler = torch.tensor([math.log(2.0), -math.log(2.0), math.log(2.0), -math.log(2.0)])  # ratios .5 2 .5 2
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    # min(r*A, clip(r)*A): A>0 takes the smaller (r=.5 -> .5, r=2 -> 1.2); A<0 the more negative (-.8, -2).
    np.testing.assert_allclose(ppo(logp, sampler, adv).numpy(), [-0.5, -1.2, 0.8, 2.0], atol=1e-6)


def test_pure_losses_on_plain_numbers() -> None:
    logp = torch.tensor([-1.0, -2.0])
    np.testing.assert_allclose(cross_entropy(logp, torch.tensor([1.0, 0.5])).numpy(), [1.0, 1.0])
    is_loss = importance_sampling(logp, torch.tensor([-1.0, -1.0]), torch.tensor([2.0, 1.0]))
    np.testing.assert_allclose(is_loss.numpy(), [-2.0, -math.exp(-1.0)], rtol=1e-6)


def test_losses_sum_over_datums(client: LocalTrainingClient) -> None:
    one = client.forward([_datum(weights=WEIGHTS)], "cross_entropy").result().metrics["loss:sum"]
    two = client.forward([_datum(weights=WEIGHTS), _datum(weights=WEIGHTS)], "cross_entropy").result()
    assert two.metrics["loss:sum"] == pytest.approx(2 * one, rel=1e-5)
    assert len(two.loss_fn_outputs) == 2


def test_policy_gradient_at_ratio_one_equals_weighted_cross_entropy(service: LocalServiceClient) -> None:
    """d/dθ of -exp(logp - q)·A at logp = q is -A·dlogp: one step of either loss lands on the same weights."""
    after = []
    for loss_fn in ("cross_entropy", "importance_sampling", "ppo"):
        client = service.create_lora_training_client(TEST_MODEL, rank=4, seed=11).result()
        current = (
            client.forward([_datum()], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
        )
        datum = (
            _datum(weights=ADVANTAGES)
            if loss_fn == "cross_entropy"
            else _datum(logprobs=current, advantages=ADVANTAGES)
        )
        client.forward_backward([datum], loss_fn).result()
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        after.append(
            client.forward([_datum()], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
        )
        client.close()
    assert not np.allclose(after[0], current)
    np.testing.assert_allclose(after[1], after[0], atol=1e-5)
    np.testing.assert_allclose(after[2], after[0], atol=1e-5)


@pytest.mark.parametrize(
    ("loss_fn", "inputs", "config", "message"),
    [
        ("custom", {}, None, "forward_backward_custom"),
        (
            "gspo",
            {"logprobs": WEIGHTS, "advantages": ADVANTAGES, "sequence_ratio_mask": 0 * WEIGHTS},
            None,
            "marks no token",
        ),
        ("dro", {"logprobs": WEIGHTS, "advantages": ADVANTAGES}, {"beta": -1.0}, "beta"),
        ("cispo", {"logprobs": WEIGHTS, "advantages": ADVANTAGES}, {"clip_high_threshold": 0.9}, "clip"),
        ("importance_sampling", {"advantages": ADVANTAGES}, None, "logprobs"),
        ("cross_entropy", {"weights": WEIGHTS[:3]}, None, "shape"),
        ("cross_entropy", {"advantages": ADVANTAGES}, None, "does not use"),
        ("ppo", {"logprobs": WEIGHTS, "advantages": ADVANTAGES}, {"clip_epsilon": 0.2}, "clip_epsilon"),
        (
            "ppo",
            {"logprobs": WEIGHTS, "advantages": ADVANTAGES},
            {"clip_low_threshold": 1.5},
            "clip_low_threshold",
        ),
    ],
)
def test_bad_loss_inputs_are_clear_errors(
    client: LocalTrainingClient,
    loss_fn: str,
    inputs: dict[str, np.ndarray],
    config: dict[str, float] | None,
    message: str,
) -> None:
    with pytest.raises(LossInputError, match=message):
        client.forward([_datum(**inputs)], loss_fn, config).result()


def test_out_of_vocab_tokens_and_empty_batches_are_refused(client: LocalTrainingClient) -> None:
    bad = types.Datum(
        model_input=types.ModelInput.from_ints([1, 2]),
        loss_fn_inputs={"target_tokens": np.array([3, 10**6])},
    )
    with pytest.raises(LossInputError, match="outside"):
        client.forward([bad], "cross_entropy").result()
    with pytest.raises(LossInputError, match="empty"):
        client.forward([], "cross_entropy").result()


def test_gspo_without_a_mask_takes_the_ratio_over_the_tokens_with_an_advantage(
    client: LocalTrainingClient,
) -> None:
    """tinker-cookbook 0.6.1's ``rl.train`` sends gspo datums without ``sequence_ratio_mask``: each is
    trained as if it had sent the mask of its nonzero advantages (its sampled tokens), alone or beside a
    datum that sent one; a datum whose advantages are all 0 costs 0 and leaves the gradient finite."""
    sampler = np.linspace(-4.0, -0.5, T).astype(np.float32)
    derived = (ADVANTAGES != 0).astype(np.float32)
    assert 0 < derived.sum() < T  # the derived mask leaves a token out: the ratio depends on it
    without = _datum(logprobs=sampler, advantages=ADVANTAGES)
    with_mask = _datum(logprobs=sampler, advantages=ADVANTAGES, sequence_ratio_mask=derived)
    want = client.forward([with_mask], "gspo").result().metrics["loss:sum"]
    assert client.forward([without], "gspo").result().metrics["loss:sum"] == pytest.approx(want, rel=1e-6)
    every_token = _datum(logprobs=sampler, advantages=ADVANTAGES, sequence_ratio_mask=np.ones(T, np.float32))
    assert client.forward([every_token], "gspo").result().metrics["loss:sum"] != pytest.approx(want, rel=1e-6)
    mixed = client.forward([without, every_token], "gspo").result().metrics["loss:sum"]
    other = client.forward([every_token], "gspo").result().metrics["loss:sum"]
    assert mixed == pytest.approx(want + other, rel=1e-5)
    flat = _datum(logprobs=sampler, advantages=np.zeros(T, np.float32))
    result = client.forward_backward([flat, without], "gspo").result()
    assert result.metrics["loss:sum"] == pytest.approx(want, rel=1e-5)
