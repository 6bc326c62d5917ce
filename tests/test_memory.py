"""Memory: what the local backend keeps alive, and what a training pass holds for its backward pass.

Exact checks where there are any: a dropped sampling client frees its model without waiting for the
cyclic garbage collector; the checkpointed unembedding keeps far fewer bytes for the backward pass than
the plain one, with the same logprobs and gradients. The heap check measures RSS in fresh processes, as
a difference between two runs of the same allocation pattern (one with the backend's allocator setting,
one without), never a wall-clock time. The ``envsuite`` command's restart under jemalloc is checked
in real child processes: which allocator the restarted process has mapped, with and without the opt-out.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest
import tinker
import torch
from tinker import types

from envsuite.backends.local import LocalSamplingClient, load_sampling_model
from envsuite.engine import JEMALLOC_CONF, jemalloc_path
from envsuite.engine._memory import _libc
from envsuite.engine.training import LossFn, build_batch, target_logprobs
from envsuite.engine.weights import LoraSpec, add_lora, load_base_model
from envsuite.models import resolve_model

MODEL = "tiny-random"


def test_a_dropped_sampling_client_frees_its_model_without_the_garbage_collector() -> None:
    loaded = load_sampling_model(base_model=MODEL)
    client = LocalSamplingClient(loaded.model, loaded.tokenizer, MODEL)
    model = weakref.ref(loaded.model)
    params = tinker.SamplingParams(max_tokens=4, temperature=1.0, stop=[], seed=0)
    prompt = tinker.ModelInput.from_ints(list(range(20, 60)))
    client.sample(prompt, 2, params).result(timeout=120)  # fills the prefix cache too
    client.close()
    gc.disable()
    try:
        del client, loaded
        # A reference cycle (client <-> engine, cache nodes <-> parents) would keep it until gc runs.
        assert model() is None
    finally:
        gc.enable()


def _lora_model() -> torch.nn.Module:
    model = add_lora(load_base_model(str(resolve_model(MODEL).path)), LoraSpec(rank=4, seed=1))
    return model.get_base_model()


def _datums() -> list[types.Datum]:
    generator = np.random.default_rng(0)
    shared = list(generator.integers(100, 40000, size=40))
    data = []
    for i in range(6):
        tokens = shared + list(generator.integers(100, 40000, size=30 + 7 * i))
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints([int(t) for t in tokens[:-1]]),
                loss_fn_inputs={"target_tokens": np.array(tokens[1:], dtype=np.int64)},
            )
        )
    return data


@torch.no_grad()
def _zero_grads(model: torch.nn.Module) -> None:
    for param in model.parameters():
        param.grad = None


def _saved_bytes() -> tuple[list[int], torch.autograd.graph.saved_tensors_hooks]:
    """A list that collects the byte size of every tensor autograd saves, and the hooks that fill it."""
    saved: list[int] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved.append(tensor.numel() * tensor.element_size())
        return tensor

    return saved, torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)


def test_checkpointed_unembedding_keeps_less_for_backward_with_the_same_logprobs_and_gradients() -> None:
    model = _lora_model()
    batch = build_batch(_datums(), LossFn.CROSS_ENTROPY, vocab_size=49152, pad_id=0)
    results = {}
    for checkpoint_head in (False, True):
        _zero_grads(model)
        saved, hooks = _saved_bytes()
        with hooks:
            logprobs = target_logprobs(model, batch, checkpoint_head=checkpoint_head)
        logprobs.sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results[checkpoint_head] = (logprobs.detach(), grads, sum(saved))
    plain, checkpointed = results[False], results[True]
    torch.testing.assert_close(checkpointed[0], plain[0], rtol=0, atol=0)
    assert plain[1].keys() == checkpointed[1].keys() and plain[1]
    for name, grad in plain[1].items():
        torch.testing.assert_close(checkpointed[1][name], grad, rtol=1e-5, atol=1e-7)
    distinct_positions = int(torch.unique(batch.hidden_index_N).numel())
    full_logits = distinct_positions * 49152 * 4
    # The plain pass keeps a vocab-wide row per position (the log-softmax); the checkpointed one none.
    assert plain[2] > full_logits
    assert checkpointed[2] < full_logits / 2


_FRAGMENTING_PASS = """
import sys, psutil, torch
from envsuite.backends import make_service_client
service = make_service_client("local", log_dir=sys.argv[2])
if sys.argv[1] == "training":
    service.create_lora_training_client("tiny-random", rank=4, seed=0).result()
elif sys.argv[1] == "sampling":
    service.create_sampling_client(base_model="tiny-random").result()
rss = psutil.Process().memory_info
# One large block allocated and freed: glibc's dynamic mmap threshold rises to its size.
del_me = torch.ones(24 << 18)
del del_me
before = rss().rss
# Activation-sized tensors (4 MiB), every other one freed while its neighbours live on, as in a
# training pass: from the heap they leave holes that the heap cannot give back.
blocks = [torch.ones(1 << 20) for _ in range(64)]
kept = blocks[1::2]
del blocks
print(rss().rss - before - sum(t.numel() * t.element_size() for t in kept))
"""


def _retained_after_fragmenting_pass(mode: str, tmp_path: object) -> int:
    env = {**os.environ}
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    done = subprocess.run(
        [sys.executable, "-c", _FRAGMENTING_PASS, mode, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return int(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("client", ["training", "sampling"])
def test_the_local_backend_keeps_freed_activation_sized_tensors_out_of_the_heap(
    client: str, tmp_path: object
) -> None:
    if _libc() is None:
        pytest.skip("glibc only: other C libraries size their heaps differently")
    held = 32 * (4 << 20)
    # Without the setting the freed 4 MiB tensors stay resident (what the check detects) ...
    assert _retained_after_fragmenting_pass("plain", tmp_path) > held // 2
    # ... and once a local client exists (it fixes glibc's mmap threshold) they go back to the OS.
    assert _retained_after_fragmenting_pass(client, tmp_path) < held // 8


_REPORT_ALLOCATOR = (
    "import os, sys\n"
    "from envsuite.engine import jemalloc_loaded, reexec_under_jemalloc\n"
    "reexec_under_jemalloc(sys.orig_argv[1:])\n"
    "print(jemalloc_loaded(), os.environ.get('MALLOC_CONF'), sys.argv[1:])\n"
)


@pytest.mark.skipif(jemalloc_path() is None, reason="Debian's libjemalloc2 is not installed (make install)")
@pytest.mark.parametrize("opt_out", [False, True])
def test_the_command_restarts_once_under_jemalloc_unless_told_not_to(opt_out: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MALLOC_CONF")}
    env.pop("ENVSUITE_JEMALLOC_TRIED", None)
    if opt_out:
        env["ENVSUITE_ALLOCATOR"] = "system"
    command = [sys.executable, "-c", _REPORT_ALLOCATOR, "train", "--steps", "3"]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=True)
    # The restarted process got the same arguments, jemalloc mapped and envsuite's settings.
    expected = "False None" if opt_out else f"True {JEMALLOC_CONF}"
    assert out.stdout.strip() == f"{expected} ['train', '--steps', '3']"
