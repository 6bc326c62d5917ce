"""Linear layers through oneDNN change speed, never results: values and gradients equal ``F.linear``'s
up to float rounding, for a layer alone and for a LoRA-adapted model's training step; the training
client routes its layers as its service says.

The sampling side (tokens and logprobs of the engine against transformers' forward) is in
``tests/test_sampling_fast_paths.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tinker
import torch

from envsuite.backends.local import LocalServiceClient
from envsuite.engine.kernels import OneDnnLinear, onednn_available, route_linears_through_onednn
from envsuite.engine.weights import LoraSpec, add_lora, load_base_model
from envsuite.models import resolve_model

pytestmark = pytest.mark.skipif(not onednn_available(), reason="this torch has no oneDNN")


@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_a_layer_gives_f_linear_values_and_gradients(bias: bool) -> None:
    generator = torch.Generator().manual_seed(0)
    plain = torch.nn.Linear(48, 80, bias=bias)
    routed = OneDnnLinear.replacing(plain)
    assert routed.weight is plain.weight and routed.state_dict().keys() == plain.state_dict().keys()
    x = torch.randn(3, 5, 48, generator=generator)
    grad_out = torch.randn(3, 5, 80, generator=generator)
    results = []
    for layer in (plain, routed):
        layer.zero_grad()
        inputs = x.clone().requires_grad_(True)
        out = layer(inputs)
        out.backward(grad_out)
        assert inputs.grad is not None and layer.weight.grad is not None
        grads = [inputs.grad, layer.weight.grad] + ([layer.bias.grad] if bias else [])
        results.append((out.detach(), *grads))
    for expected, got in zip(*results, strict=True):
        torch.testing.assert_close(got, expected)
    with torch.inference_mode():
        torch.testing.assert_close(routed(x), plain(x))


def test_a_frozen_layer_keeps_no_input_for_its_backward() -> None:
    """A frozen base layer (LoRA) only needs its weight to pass the gradient on, as ``F.linear`` does."""
    layer = OneDnnLinear.replacing(torch.nn.Linear(16, 8).requires_grad_(False))
    x = torch.randn(4, 16, requires_grad=True)
    out = layer(x)
    assert out.grad_fn is not None
    saved = [t for t in out.grad_fn.saved_tensors if t is not None]
    assert len(saved) == 1 and saved[0].data_ptr() == layer.weight.data_ptr()


def test_a_lora_training_step_gives_the_same_loss_and_adapter_gradients() -> None:
    """The tiny model with rank-4 adapters on every linear layer, its layers routed through oneDNN or not:
    the same logits, loss and LoRA gradients."""
    path = str(resolve_model("tiny-random").path)
    spec = LoraSpec(rank=4, seed=3)
    tokens = torch.tensor([[5, 17, 99, 3, 42, 7, 7, 120, 64, 2]])
    outcomes = []
    for route in (False, True):
        model = add_lora(load_base_model(path), spec)
        if route:
            assert route_linears_through_onednn(model) > 0
        model.train()
        out = model(input_ids=tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(out.logits[0], tokens[0, 1:])
        loss.backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
        assert grads and all(g is not None for g in grads.values())
        outcomes.append((out.logits.detach(), loss.detach(), grads))
    (logits, loss, grads), (routed_logits, routed_loss, routed_grads) = outcomes
    torch.testing.assert_close(routed_logits, logits, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(routed_loss, loss, atol=1e-6, rtol=1e-5)
    assert routed_grads.keys() == grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(routed_grads[name], grad, atol=1e-6, rtol=1e-4, msg=name)


@pytest.mark.parametrize("onednn", [True, False], ids=["onednn", "f-linear"])
def test_the_training_client_routes_its_layers_as_the_service_says(tmp_path: Path, onednn: bool) -> None:
    """``LocalServiceClient(onednn_products=...)`` decides whether a training step runs OneDnnLinear."""
    calls = [0]

    def count(module: torch.nn.Module, _args: tuple[object, ...]) -> None:
        calls[0] += isinstance(module, OneDnnLinear)

    service = LocalServiceClient(log_dir=tmp_path, onednn_products=onednn)
    trainer = service.create_lora_training_client("tiny-random", rank=4, seed=0).result()
    tokens = trainer.get_tokenizer().encode("User: hello there\nA: general kenobi")
    datum = tinker.Datum(
        model_input=tinker.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": np.array(tokens[1:])},
    )
    handle = torch.nn.modules.module.register_module_forward_pre_hook(count)
    try:
        trainer.forward_backward([datum], "cross_entropy").result()
    finally:
        handle.remove()
        trainer.close()
    assert (calls[0] > 0) == onednn
