"""A supervised warm start: before the first GRPO step, imitate the env's own reference replies.

GRPO learns only from groups whose members' rewards differ; a model that never succeeds gives it nothing
(the embedded SmolLM2 on ``workspace/shell_intro``: no success in about 700 episodes, docs/workspace.md).
``warm_start_steps = N`` runs N supervised steps first, each a ``cross_entropy`` ``forward_backward`` and
an ``optim_step`` over the first reply of the reference probe (:class:`~envsuite.core.RewardProbe` with
``FULL_MARKS``, the conformance checker's reference) of one env of each group of train batch ``i`` (``i``
modulo the number of batches), at the run's peak learning rate. Only the reply's tokens are weighted; the prompt is context.

Invariants: it uses the train split alone (the held-out set is never imitated); it runs only in a fresh
run (a resumed run's checkpoint already holds its effect, and batch ``i`` of the warm start is batch
``i`` of the GRPO steps, as in tinker-cookbook's SL-then-RL recipes); an env without a reference probe
contributes nothing, and a warm start that finds none at all is an error rather than a silent no-op.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tinker

from envsuite.core import InitialObservationOverflow, ProbeExpectation, RLDataset
from envsuite.renderers import reply_to_tokens
from envsuite.trainers._clients import PolicyClients
from envsuite.trainers._config import TrainConfig
from envsuite.trainers._metrics import Row


class NoReferenceError(ValueError):
    """The warm start found no env with a reference reply to imitate."""


@dataclass(frozen=True)
class WarmStartStep:
    """One supervised step's numbers."""

    datums: int
    reply_tokens: int
    nll_per_token: float


async def reference_datums(train_data: RLDataset, batch: int) -> list[tinker.Datum]:
    """One datum per group of train batch ``batch`` whose env has a reference reply: the first
    prompt, then the reply's tokens as targets weighted 1 (the prompt's weighted 0)."""
    data: list[tinker.Datum] = []
    for builder in train_data.get_batch(batch):
        envs_G = await builder.make_envs()
        try:
            env = envs_G[0]
            start = await env.initial_observation()
            if isinstance(start, InitialObservationOverflow):
                continue
            prompt, stop = start
            reference = next(
                (p for p in env.reward_probes() if p.expect is ProbeExpectation.FULL_MARKS), None
            )
            renderer = getattr(env, "renderer", None)
            if reference is None or renderer is None:
                continue
            data.append(_datum(prompt.to_ints(), reply_to_tokens(renderer, reference.reply, stop)))
        finally:
            await builder.cleanup()
    return data


def _datum(prompt_T: list[int], reply_T: list[int]) -> tinker.Datum:
    tokens_T = prompt_T + reply_T
    weights_T = np.zeros(len(tokens_T) - 1, dtype=np.float32)
    weights_T[len(prompt_T) - 1 :] = 1.0
    return tinker.Datum(
        model_input=tinker.ModelInput.from_ints(tokens_T[:-1]),
        loss_fn_inputs={
            "target_tokens": tinker.TensorData.from_numpy(np.asarray(tokens_T[1:], dtype=np.int64)),
            "weights": tinker.TensorData.from_numpy(weights_T),
        },
    )


async def warm_start(config: TrainConfig, clients: PolicyClients, train_data: RLDataset) -> Row:
    """Run ``config.steps.warm_start_steps`` supervised steps; the ``warm_start/...`` numbers (the
    caller makes the first sampler after it, on the warm-started weights)."""
    steps: list[WarmStartStep] = []
    for index in range(config.steps.warm_start_steps):
        batch = index % len(train_data)  # more warm-start steps than batches: the batches again
        data = await reference_datums(train_data, batch)
        if not data:
            raise NoReferenceError(
                f"warm_start_steps: no env of train batch {batch} of {config.env_id!r} has a reference "
                "reply (a FULL_MARKS reward probe) to imitate"
            )
        out = await clients.forward_backward(data, "cross_entropy", None)
        await clients.optim_step(config.optimizer.adam(config.optimizer.learning_rate))
        weights_D = [d.loss_fn_inputs["weights"].to_numpy() for d in data]
        n_tokens = int(sum(np.sum(w) for w in weights_D))
        nll = -sum(float(np.sum(lp * w)) for lp, w in zip(out.logprobs_D, weights_D, strict=True))
        steps.append(WarmStartStep(len(data), n_tokens, nll / max(n_tokens, 1)))
    return {
        "warm_start/steps": len(steps),
        "warm_start/datums": sum(s.datums for s in steps),
        "warm_start/nll_first": steps[0].nll_per_token if steps else float("nan"),
        "warm_start/nll_last": steps[-1].nll_per_token if steps else float("nan"),
    }
