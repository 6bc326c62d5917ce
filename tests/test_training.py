"""LocalTrainingClient: tinker types out, ordered calls, learning, seeding, sampling snapshots, faults."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tinker import types

from envsuite.backends import Backend, HostedBackendUnavailable, make_service_client
from envsuite.backends.local import LocalServiceClient, LocalTrainingClient, NonFiniteError
from envsuite.engine.training import training_passes
from envsuite.models import UnknownModelError
from tests.conftest import TEST_MODEL

TOKENS = [1, 28, 4003, 17, 902, 311, 64, 2]


def _datum(tokens: list[int] = TOKENS, **inputs: np.ndarray) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": np.array(tokens[1:]), **inputs},
    )


def _logprobs(client: LocalTrainingClient, tokens: list[int] = TOKENS) -> np.ndarray:
    return (
        client.forward([_datum(tokens)], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    )


@pytest.fixture
def service(tmp_path: object) -> LocalServiceClient:
    return LocalServiceClient(log_dir=str(tmp_path))


def test_forward_backward_returns_tinker_types_per_datum(service: LocalServiceClient) -> None:
    client = service.create_lora_training_client(TEST_MODEL, rank=4, seed=0).result()
    short = [1, 2, 3]
    out = client.forward_backward([_datum(), _datum(short)], "cross_entropy").result()
    assert isinstance(out, types.ForwardBackwardOutput)
    assert [o["logprobs"].to_numpy().shape for o in out.loss_fn_outputs] == [(7,), (2,)]
    # Padding in a mixed-length batch does not change a datum's logprobs.
    np.testing.assert_allclose(
        out.loss_fn_outputs[1]["logprobs"].to_numpy(), _logprobs(client, short), atol=1e-5
    )
    step = client.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    assert isinstance(step, types.OptimStepResponse) and step.metrics is not None
    assert client.step == 1


@pytest.mark.parametrize("full", [False, True])
def test_cross_entropy_training_lowers_the_loss(service: LocalServiceClient, full: bool) -> None:
    if full:
        client = service.create_training_client(TEST_MODEL, full_finetune=True).result()
    else:
        client = service.create_lora_training_client(TEST_MODEL, rank=8, seed=1).result()
    losses = []
    for _ in range(5):
        out = client.forward_backward([_datum()], "cross_entropy").result()
        client.optim_step(types.AdamParams(learning_rate=1e-2 if not full else 1e-3)).result()
        losses.append(out.metrics["loss:sum"])
    assert losses[-1] < losses[0] - 1.0
    info = client.get_info()
    assert info.is_lora is (not full) and info.model_name == TEST_MODEL


@pytest.mark.parametrize("pass_tokens", [2048, 40])
def test_datums_sharing_a_prompt_train_exactly_as_separate_datums(
    service: LocalServiceClient, pass_tokens: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GRPO groups (a shared system prompt, one problem per group, several replies) share their common
    tokens in one row of the batch; nothing a caller sees changes. With a small pass budget the same
    batch is trained in several passes of whole rows (how long multi-turn batches keep memory bounded),
    again with nothing changed."""
    from envsuite.backends.local import _trainer_core

    monkeypatch.setattr(_trainer_core, "_PASS_TOKENS", pass_tokens)
    system = [1, *range(300, 320)]  # 21 tokens shared by every group: over the sharing threshold
    problems = [[600, 601, 602], [700, 701]]
    replies = [[41, 42, 43, 2], [41, 50], [77, 78, 79, 80, 81, 82, 2], []]  # [] = the bare prompt
    group = [system + problem + reply + [5] for problem in problems for reply in replies]
    lone = [1, 900, 901, 902, 903, 2]  # shares nothing: its own row

    def rl_datum(tokens: list[int], seed: int) -> types.Datum:
        rng = np.random.default_rng(seed)
        n = len(tokens) - 1
        return _datum(
            tokens,
            logprobs=rng.uniform(-3, -0.1, n).astype(np.float32),
            advantages=rng.uniform(-1, 1, n).astype(np.float32),
        )

    data = [rl_datum(t, i) for i, t in enumerate([*group, lone])]
    together = service.create_lora_training_client(TEST_MODEL, rank=4, seed=5).result()
    apart = service.create_lora_training_client(TEST_MODEL, rank=4, seed=5).result()
    packed = together.forward_backward(data, "importance_sampling").result()
    single = [apart.forward_backward([d], "importance_sampling").result() for d in data]
    for out, alone in zip(packed.loss_fn_outputs, single, strict=True):
        for key in ("logprobs", "elementwise_loss"):
            np.testing.assert_allclose(
                out[key].to_numpy(), alone.loss_fn_outputs[0][key].to_numpy(), rtol=1e-4, atol=1e-5
            )
    assert packed.metrics["loss:sum"] == pytest.approx(sum(o.metrics["loss:sum"] for o in single), rel=1e-4)
    # Same accumulated gradient: the prompt's hidden states get every member's share.
    norm_packed = together.optim_step(types.AdamParams(learning_rate=1e-3)).result().metrics
    norm_apart = apart.optim_step(types.AdamParams(learning_rate=1e-3)).result().metrics
    assert norm_packed is not None and norm_apart is not None
    assert norm_packed["grad_norm:mean"] == pytest.approx(norm_apart["grad_norm:mean"], rel=1e-4)
    assert norm_packed["grad_norm:mean"] > 0


def test_calls_run_in_submission_order(service: LocalServiceClient) -> None:
    client = service.create_lora_training_client(TEST_MODEL, rank=4, seed=2).result()
    before = _logprobs(client)
    client.forward_backward([_datum()], "cross_entropy")
    client.optim_step(types.AdamParams(learning_rate=1e-2))
    after = client.forward([_datum()], "cross_entropy")  # queued behind the step, not waited for
    assert after.result().loss_fn_outputs[0]["logprobs"].to_numpy().sum() > before.sum()


async def test_futures_are_awaitable(service: LocalServiceClient) -> None:
    client = await service.create_lora_training_client(TEST_MODEL, rank=4, seed=0)
    out = await client.forward([_datum()], "cross_entropy")
    assert out.metrics["loss:sum"] > 0


def test_seeded_init_is_reproducible_and_leaves_global_rng_alone(service: LocalServiceClient) -> None:
    state = torch.get_rng_state()
    runs = []
    for seed in (5, 5, 6):
        client = service.create_lora_training_client(TEST_MODEL, rank=4, seed=seed).result()
        client.forward_backward([_datum()], "cross_entropy").result()
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        runs.append(_logprobs(client))
    assert torch.equal(state, torch.get_rng_state())
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.allclose(runs[0], runs[2])


def test_lora_switches_pick_the_adapted_layers(service: LocalServiceClient) -> None:
    client = service.create_lora_training_client(
        TEST_MODEL, rank=2, seed=0, train_mlp=False, train_unembed=False
    ).result()
    assert client.get_info().lora_rank == 2
    with pytest.raises(ValueError, match="at least one"):
        service.create_lora_training_client(
            TEST_MODEL, train_mlp=False, train_attn=False, train_unembed=False
        )


def test_new_sampling_client_after_each_save_sees_current_weights(service: LocalServiceClient) -> None:
    client = service.create_lora_training_client(TEST_MODEL, rank=4, seed=3).result()
    prompt = types.ModelInput.from_ints(TOKENS)
    first = client.save_weights_and_get_sampling_client().result()
    old = first.compute_logprobs(prompt).result()
    client.forward_backward([_datum()], "cross_entropy").result()
    client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    second = client.save_weights_and_get_sampling_client("after-step").result()
    new = second.compute_logprobs(prompt).result()
    np.testing.assert_allclose(new[1:], _logprobs(client), atol=1e-4)
    assert first.compute_logprobs(prompt).result() == old  # the earlier snapshot is unchanged
    assert not np.allclose(new[1:], old[1:])


def test_recomputing_layers_in_backward_changes_no_result(
    service: LocalServiceClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wide passes recompute each decoder layer in backward (activation checkpointing) to bound memory;
    logprobs, losses and the gradient are those of keeping the activations."""
    from envsuite.backends.local import _trainer_core

    rng = np.random.default_rng(0)
    tokens = [1, *rng.integers(300, 4000, 40).tolist(), 2]
    datum = _datum(
        tokens,
        logprobs=rng.uniform(-3, -0.1, len(tokens) - 1).astype(np.float32),
        advantages=rng.uniform(-1, 1, len(tokens) - 1).astype(np.float32),
    )
    results = []
    for recompute_above in (10_000, 0):
        monkeypatch.setattr(_trainer_core, "_RECOMPUTE_TOKENS", recompute_above)
        client = service.create_lora_training_client(TEST_MODEL, rank=4, seed=3).result()
        out = client.forward_backward([datum], "importance_sampling").result()
        # A first optimizer step moves the adapter's zero-initialized B, so a second step's gradient
        # also reaches A: compare that one.
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        again = client.forward_backward([datum], "importance_sampling").result()
        step = client.optim_step(types.AdamParams(learning_rate=1e-2)).result().metrics
        assert step is not None
        results.append((out, again, step["grad_norm:mean"]))
    (kept, kept_again, kept_norm), (recomputed, recomputed_again, recomputed_norm) = results
    for a, b in ((kept, recomputed), (kept_again, recomputed_again)):
        np.testing.assert_allclose(
            a.loss_fn_outputs[0]["logprobs"].to_numpy(),
            b.loss_fn_outputs[0]["logprobs"].to_numpy(),
            atol=1e-6,
        )
    assert recomputed_norm == pytest.approx(kept_norm, rel=1e-5) and kept_norm > 0


def test_training_passes_group_whole_rows_within_the_budget() -> None:
    shared = list(range(100, 130))
    group = [[*shared, d, d + 1] for d in range(3)]  # one token-tree row, 36 tokens wide
    singles = [list(range(200 + 10 * k, 210 + 10 * k)) for k in range(3)]  # three 10-token rows
    long = list(range(500, 560))  # a 60-token row, wider than the budget
    tokens_D = [*group, *singles, long]
    assert training_passes(tokens_D, 40) == [[0, 1, 2], [3, 4, 5], [6]]
    assert training_passes(tokens_D, 10_000) == [[0, 1, 2, 3, 4, 5, 6]]


def test_a_nan_in_a_later_pass_leaves_no_gradient_behind(
    service: LocalServiceClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call that fails in its second pass must not keep the first pass's gradient."""
    from envsuite.backends.local import _trainer_core

    monkeypatch.setattr(_trainer_core, "_PASS_TOKENS", 8)  # one 7-token datum per pass
    client = service.create_lora_training_client(TEST_MODEL, rank=4, seed=0).result()
    rl = {"logprobs": np.full(7, -1.0, dtype=np.float32), "advantages": np.ones(7, dtype=np.float32)}
    nan = np.array([1, np.nan, 1, 1, 1, 1, 1], dtype=np.float32)
    good, bad = _datum(**rl), _datum([1, 900, 901, 902, 903, 904, 905, 2], **{**rl, "advantages": nan})
    with pytest.raises(NonFiniteError):
        client.forward_backward([good, bad], "importance_sampling").result()  # good's pass runs first
    with pytest.raises(RuntimeError, match="without gradients"):
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result()


def test_nan_loss_is_a_named_error_and_changes_nothing(service: LocalServiceClient, tmp_path: object) -> None:
    client = service.create_lora_training_client(TEST_MODEL, rank=4, seed=0).result()
    before = _logprobs(client)
    advantages = np.array([1, np.nan, 1, 1, 1, 1, 1], dtype=np.float32)
    datum = _datum(logprobs=before.astype(np.float32), advantages=advantages)
    with pytest.raises(NonFiniteError, match="importance_sampling loss is nan"):
        client.forward_backward([datum], "importance_sampling").result()
    with pytest.raises(RuntimeError, match="without gradients"):
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    np.testing.assert_array_equal(_logprobs(client), before)


def test_non_finite_weights_are_never_saved(service: LocalServiceClient) -> None:
    client = service.create_lora_training_client(TEST_MODEL, rank=4, seed=0).result()
    client.forward_backward([_datum()], "cross_entropy").result()
    with pytest.raises(NonFiniteError, match="NaN/inf"):
        client.optim_step(types.AdamParams(learning_rate=1e20, weight_decay=1e20)).result()
    with pytest.raises(NonFiniteError, match="refusing"):
        client.save_state("poisoned").result()
    assert not list(service.log_dir.rglob("poisoned"))


def test_bad_optimizer_params_fail_at_once(service: LocalServiceClient) -> None:
    client = service.create_lora_training_client(TEST_MODEL, rank=4, seed=0).result()
    with pytest.raises(ValueError, match="learning_rate"):
        client.optim_step(types.AdamParams(learning_rate=float("nan")))
    with pytest.raises(ValueError, match="beta"):
        client.optim_step(types.AdamParams(beta1=1.0))


def test_unknown_model_lists_the_known_ones(service: LocalServiceClient) -> None:
    with pytest.raises(UnknownModelError, match="tiny-random"):
        service.create_lora_training_client("tiny-randm").result()


def test_backend_choice() -> None:
    assert isinstance(make_service_client(), LocalServiceClient)
    with pytest.raises(HostedBackendUnavailable, match="TINKER_API_KEY"):
        make_service_client(Backend.TINKER)
    with pytest.raises(ValueError, match="'local', 'tinker'"):
        make_service_client("cloud")
