"""Several LoRA training clients on one local backend and on ``envsuite serve`` (issue 59, item 4).

SkyRL's Tinker server trains many LoRA clients of one base model in one process; so do the local
backend and ``envsuite serve``. Each training client has its own adapter, AdamW state and worker thread;
its sampling clients are variants of the service's one sampling engine for that base model
(``_shared_bases``), so the clients' rows decode in the same engine steps. Two roles here, with
different ranks, seeds and data, on the tiny random model:

* in process: two clients trained side by side (their calls queued together, so their steps run at the
  same time on their worker threads) follow the loss and weight trajectories each follows alone, a
  step of one leaves the other's adapter bit for bit as it was, and their sampling clients, sampled at
  once, give each its own greedy tokens;
* adapters initialized on several threads at once (``envsuite serve`` builds models on two loader
  threads) are each their seed's, and the caller's RNG is left alone;
* through a real ``envsuite serve`` on 127.0.0.1 (the command, a child process) and the tinker SDK: one
  ``ServiceClient`` runs two cookbook-style RL loops at once (``asyncio.gather``), and each samples the
  tokens, gets the rewards and logprobs, and ends near the adapter that the same loop gives alone in
  process.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tinker
import torch
from safetensors.torch import load_file
from tinker import types

from envsuite.backends.local import (
    LocalFuture,
    LocalSamplingClient,
    LocalServiceClient,
    resolve_checkpoint_path,
)
from envsuite.engine.weights import LoraSpec, adapter_state, add_lora, load_base_model
from envsuite.models import resolve_model
from tests.conftest import TEST_MODEL
from tests.test_serve import sdk, served_command

ADAPTER_FILE = "adapter.safetensors"
"""A LoRA checkpoint's weights (docs/backend.md: checkpoints are plain directories)."""
ADAM = types.AdamParams(learning_rate=5e-2)
"""Large, so three steps make the two adapters sample different tokens from each other and from the base."""
STEPS = 3
TRAJECTORY_ATOL = 1e-6
"""Side by side against alone, per adapter weight (and per loss, relative). Both runs do the same
operations on the same inputs in the same order; the neighbour shares only the CPU. Measured: equal
bit for bit. The bound leaves room for a math library whose reduction split depends on the threads a
call finds free (a few float32 ulps per product over three steps); a neighbour's gradient or step
leaking in would move weights by about the learning rate, 5e-2, four orders of magnitude above it."""
LOGPROB_ATOL = 1e-4
"""Logprobs of the same tokens, shared engine against alone: a mixed step sums each row's adapter term
apart from the base product, the merged weights sum them in one (tests/test_multi_adapter_sampling.py);
measured here at most 6e-6, sampler's and trainer's, over three RL steps through the server."""


@dataclass(frozen=True)
class Role:
    """One training client: its adapter's shape and seed, and the text it learns (SFT) or is paid for (RL)."""

    name: str
    rank: int
    seed: int
    tokens: tuple[int, ...]
    """The sequence its SFT datum teaches; its first four tokens are its RL prompt."""
    parity: int
    """RL reward: the share of sampled tokens whose id has this parity."""


ROLES = (
    Role("asker", rank=4, seed=1, tokens=(1, 28, 4003, 17, 902, 311, 64, 2), parity=0),
    Role("answerer", rank=8, seed=2, tokens=(1, 77, 5120, 9, 1402, 33, 808, 2), parity=1),
)


def _sft_datum(role: Role) -> types.Datum:
    tokens = list(role.tokens)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(np.array(tokens[1:], dtype=np.int64)),
            "weights": types.TensorData.from_numpy(np.ones(len(tokens) - 1, np.float32)),
        },
    )


def _adapter(path: str, root: Path) -> dict[str, torch.Tensor]:
    """The adapter tensors of a saved checkpoint (a directory, or a ``tinker://`` path under ``root``)."""
    return load_file(str(resolve_checkpoint_path(path, root) / ADAPTER_FILE))


def _distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The L2 distance between two adapters, all tensors together."""
    assert a.keys() == b.keys()
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(a[n] - b[n]) for n in a])))


def _max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[name] - b[name]).abs().max()) for name in a)


def _greedy(sampler: LocalSamplingClient, role: Role) -> LocalFuture[types.SampleResponse]:
    """A greedy request (submitted, not awaited: the caller decides what runs together)."""
    params = types.SamplingParams(max_tokens=10, temperature=0.0, stop=[])
    return sampler.sample(types.ModelInput.from_ints(list(role.tokens[:4])), 2, params)


@dataclass
class Trained:
    """What one client's SFT steps gave: the loss of each step, its adapter after the last, its greedy
    samples after the last."""

    losses: list[float]
    adapter: dict[str, torch.Tensor]
    tokens: list[list[int]]
    logprobs: list[list[float]]


def _sequences(response: types.SampleResponse) -> tuple[list[list[int]], list[list[float]]]:
    return [list(s.tokens) for s in response.sequences], [list(s.logprobs or []) for s in response.sequences]


def _trained_alone(role: Role, root: Path) -> Trained:
    """``role``'s client on a service of its own, one call at a time."""
    with LocalServiceClient(log_dir=root) as service:
        client = service.create_lora_training_client(TEST_MODEL, rank=role.rank, seed=role.seed).result()
        losses = []
        for _ in range(STEPS):
            losses.append(
                client.forward_backward([_sft_datum(role)], "cross_entropy").result().metrics["loss:sum"]
            )
            client.optim_step(ADAM).result()
        adapter = _adapter(client.save_weights_for_sampler("final").result().path, root)
        sampler = client.save_weights_and_get_sampling_client().result()
        tokens, logprobs = _sequences(_greedy(sampler, role).result(timeout=120))
    return Trained(losses, adapter, tokens, logprobs)


def test_two_training_clients_side_by_side_train_and_sample_as_each_alone(tmp_path: Path) -> None:
    alone = [_trained_alone(role, tmp_path / f"alone-{role.name}") for role in ROLES]
    assert alone[0].tokens != alone[1].tokens, "the two adapters must sample differently"

    root = tmp_path / "together"
    with LocalServiceClient(log_dir=root) as service:
        clients = [
            service.create_lora_training_client(TEST_MODEL, rank=role.rank, seed=role.seed).result()
            for role in ROLES
        ]
        assert clients[0].model_id != clients[1].model_id
        losses: list[list[float]] = [[], []]
        for _ in range(STEPS - 1):
            # Both clients' calls are queued before any is waited for: their passes and steps overlap.
            backward = [
                c.forward_backward([_sft_datum(r)], "cross_entropy")
                for c, r in zip(clients, ROLES, strict=True)
            ]
            steps = [client.optim_step(ADAM) for client in clients]
            for k in range(2):
                losses[k].append(backward[k].result().metrics["loss:sum"])
                steps[k].result()

        # The asker's last step alone: the answerer's adapter is bit for bit what it was.
        before = _adapter(clients[1].save_weights_for_sampler("before").result().path, root)
        losses[0].append(
            clients[0].forward_backward([_sft_datum(ROLES[0])], "cross_entropy").result().metrics["loss:sum"]
        )
        clients[0].optim_step(ADAM).result()
        after = _adapter(clients[1].save_weights_for_sampler("after").result().path, root)
        assert all(torch.equal(before[name], after[name]) for name in before)
        losses[1].append(
            clients[1].forward_backward([_sft_datum(ROLES[1])], "cross_entropy").result().metrics["loss:sum"]
        )
        clients[1].optim_step(ADAM).result()

        for k, client in enumerate(clients):
            np.testing.assert_allclose(losses[k], alone[k].losses, rtol=TRAJECTORY_ATOL, atol=0)
            adapter = _adapter(client.save_weights_for_sampler("final").result().path, root)
            assert _max_difference(adapter, alone[k].adapter) <= TRAJECTORY_ATOL

        samplers = [client.save_weights_and_get_sampling_client().result() for client in clients]
        # Both requests are submitted before either is waited for: their rows decode together.
        requests = [_greedy(sampler, role) for sampler, role in zip(samplers, ROLES, strict=True)]
        together = [_sequences(request.result(timeout=120)) for request in requests]
        engine = samplers[0]._engine  # private, read to show the rows really shared decode steps
        assert samplers[1]._engine is engine and engine.variants.mixed_steps > 0
    for (tokens, logprobs), solo in zip(together, alone, strict=True):
        assert tokens == solo.tokens
        for got, want in zip(logprobs, solo.logprobs, strict=True):
            np.testing.assert_allclose(got, want, atol=LOGPROB_ATOL, rtol=0)


def test_adapters_made_on_several_threads_at_once_depend_on_their_seed_only() -> None:
    """``envsuite serve`` builds two clients' models on two loader threads, and peft draws a new adapter
    from torch's global RNG: each adapter must be its seed's, and the caller's RNG left as it was."""
    base = load_base_model(str(resolve_model(TEST_MODEL).path))
    seeds = [11, 12, 13, 14] * 3
    expected = {
        seed: adapter_state(add_lora(copy.deepcopy(base), LoraSpec(rank=4, seed=seed))) for seed in set(seeds)
    }
    models = [copy.deepcopy(base) for _ in seeds]
    start = threading.Barrier(len(seeds))
    made: dict[int, dict[str, torch.Tensor]] = {}

    def make(index: int) -> None:
        start.wait()
        made[index] = adapter_state(add_lora(models[index], LoraSpec(rank=4, seed=seeds[index])))

    rng = torch.get_rng_state()
    threads = [threading.Thread(target=make, args=(i,)) for i in range(len(seeds))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    wrong = [
        i
        for i, seed in enumerate(seeds)
        if any(not torch.equal(made[i][n], t) for n, t in expected[seed].items())
    ]
    assert wrong == [], f"adapters {wrong} are not their seed's"
    assert torch.equal(torch.get_rng_state(), rng)


# ---------------------------------------------------------------------------------- through envsuite serve

GROUP = 4
"""Samples per RL step (one group, advantages centred within it)."""


@dataclass
class RolloutLog:
    """One cookbook-style RL loop's record: each step's sampled tokens, rewards, the sampler's and the
    trainer's logprobs of the sampled tokens, and where its adapter was saved before and after."""

    initial_path: str
    tokens: list[list[list[int]]] = field(default_factory=list)
    rewards: list[list[float]] = field(default_factory=list)
    sampled_logprobs: list[np.ndarray] = field(default_factory=list)
    trained_logprobs: list[np.ndarray] = field(default_factory=list)
    """``forward_backward``'s logprobs on the sampled positions: the trained weights before the step."""
    final_path: str = ""


def _reward(role: Role, tokens: Sequence[int]) -> float:
    return float(np.mean([token % 2 == role.parity for token in tokens])) if tokens else 0.0


def _rl_datum(prompt: list[int], sequence: types.SampledSequence, advantage: float) -> types.Datum:
    """tinker-cookbook's layout for ``importance_sampling``: the prompt and the sample as one sequence,
    the sampler's logprobs and the advantage on the sampled positions only."""
    sampled = list(sequence.tokens)
    tokens = prompt + sampled
    observed = len(prompt) - 1
    logprobs = [0.0] * observed + list(sequence.logprobs or [])
    advantages = [0.0] * observed + [advantage] * len(sampled)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(np.array(tokens[1:], dtype=np.int64)),
            "logprobs": types.TensorData.from_numpy(np.array(logprobs, dtype=np.float32)),
            "advantages": types.TensorData.from_numpy(np.array(advantages, dtype=np.float32)),
        },
    )


async def _saved(training: Any, name: str) -> types.SaveWeightsForSamplerResponse:
    """``save_weights_for_sampler_async`` answers a future (the SDK's and the local one alike): its result."""
    response: types.SaveWeightsForSamplerResponse = await (
        await training.save_weights_for_sampler_async(name)
    )
    return response


async def _rl_loop(service: Any, role: Role) -> RolloutLog:
    """tinker-cookbook's ``rl_loop`` in miniature, on the SDK's async calls (the local ServiceClient and
    the SDK's take the same): snapshot, sample a group, score, centre, ``importance_sampling``, step."""
    training = await service.create_lora_training_client_async(TEST_MODEL, rank=role.rank, seed=role.seed)
    prompt = list(role.tokens[:4])
    log = RolloutLog((await _saved(training, "initial")).path)
    observed = len(prompt) - 1
    for step in range(STEPS):
        sampler = await training.save_weights_and_get_sampling_client_async()
        params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=100 * role.seed + step, stop=[])
        result = await sampler.sample_async(types.ModelInput.from_ints(prompt), GROUP, params)
        rewards = [_reward(role, s.tokens) for s in result.sequences]
        mean = float(np.mean(rewards))
        data = [_rl_datum(prompt, s, r - mean) for s, r in zip(result.sequences, rewards, strict=True)]
        backward = await training.forward_backward_async(data, "importance_sampling")
        optim = await training.optim_step_async(ADAM)
        outputs = (await backward).loss_fn_outputs
        await optim
        log.tokens.append([list(s.tokens) for s in result.sequences])
        log.rewards.append(rewards)
        log.sampled_logprobs.append(np.concatenate([s.logprobs or [] for s in result.sequences]))
        log.trained_logprobs.append(np.concatenate([o["logprobs"].to_numpy()[observed:] for o in outputs]))
    log.final_path = (await _saved(training, "final")).path
    return log


async def _both(service: Any) -> list[RolloutLog]:
    return list(await asyncio.wait_for(asyncio.gather(*(_rl_loop(service, r) for r in ROLES)), timeout=300))


def test_two_cookbook_style_clients_train_side_by_side_throughserved_command(tmp_path: Path) -> None:
    """Two cookbook-style RL loops at once through ``envsuite serve`` (the command, loopback): at every
    step each client's learner scores the tokens its sampler drew within 1e-4 of the sampler's own
    logprobs, so each row was decoded with its client's current adapter (a row of the other client's
    adapter, or of an older version, would be scored far off); the clients sample different tokens
    and both adapters move. Not compared token for token with the same loop run alone in process (the
    in-process test above does that bit for bit): the served process and the test worker may round the
    last bits differently (kernel plans, rows of both adapters in one step), which flips temperature-
    sampled tokens; CI saw the asker's tokens differ that way."""
    state = tmp_path / "state"
    with served_command(state) as url, sdk(url) as service:
        assert isinstance(service, tinker.ServiceClient)
        together = asyncio.run(_both(service))

    assert together[0].tokens != together[1].tokens
    for log, role in zip(together, ROLES, strict=True):
        assert len(log.tokens) == len(log.sampled_logprobs) == len(log.trained_logprobs) >= 2, role.name
        for sampled, trained in zip(log.sampled_logprobs, log.trained_logprobs, strict=True):
            np.testing.assert_allclose(trained, sampled, atol=LOGPROB_ATOL, rtol=0)
        final = _adapter(log.final_path, state / "runs")
        assert _distance(final, _adapter(log.initial_path, state / "runs")) > 0, role.name
