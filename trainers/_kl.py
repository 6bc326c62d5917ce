"""A KL penalty against a frozen reference policy, with tinker-cookbook's semantics and metric name.

For every action token ``t`` of a batch, ``d_t = log p_sampler(t) - log p_ref(t)`` (the sampler's
logprob is on the datum; the reference's comes from ``compute_logprobs`` on the whole sequence). Each
action token's advantage then gains ``coef * (mean(d) - d_t)``, ``mean(d)`` over the batch's action
tokens: tokens the policy likes much more than the reference does are pushed down, the others up, and
the batch's total advantage is unchanged. With ``discount > 0`` the per-token terms are replaced by
their discounted sums over the rest of the sequence (``x_t + discount * x_{t+1} + ...``, kept on
action tokens only), so a token also answers for the KL of what follows it. ``kl_policy_base`` (logged each step) is ``mean(d)``, an
estimate of KL[policy || reference] on the sampled tokens.

The reference is the base model (default) or a sampler checkpoint, loaded once as a sampling client;
it never changes during the run.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import numpy as np
import tinker

from envsuite.trainers._datums import TrainingDatum

if TYPE_CHECKING:
    from envsuite.backends import SamplingClient, ServiceClient
    from envsuite.trainers._config import TrainConfig

Row = dict[str, float | int | str]
METRIC = "kl_policy_base"


def discounted_future_sum(x_T: np.ndarray, discount: float) -> np.ndarray:
    """``out[t] = sum_k discount**k * x[t + k]`` (one backward pass)."""
    out = np.empty_like(x_T)
    running = 0.0
    for t in range(len(x_T) - 1, -1, -1):
        running = float(x_T[t]) + discount * running
        out[t] = running
    return out


class KLPenalty:
    """Adds the penalty to datums' advantages in place, from a reference sampling client."""

    def __init__(self, reference: SamplingClient, coef: float, discount: float) -> None:
        self.reference = reference
        self.coef = coef
        self.discount = discount

    @classmethod
    async def create(cls, config: TrainConfig, service: ServiceClient) -> KLPenalty | None:
        """The run's penalty, or None when ``kl_penalty_coef`` is 0 (no reference is loaded)."""
        if config.loss.kl_penalty_coef <= 0:
            return None
        if config.loss.kl_reference_checkpoint is not None:
            reference = await service.create_sampling_client_async(
                model_path=config.loss.kl_reference_checkpoint
            )
        else:
            reference = await service.create_sampling_client_async(base_model=config.policy.model)
        return cls(reference, config.loss.kl_penalty_coef, config.loss.kl_discount_factor)

    async def reference_logprobs(self, datums_D: list[TrainingDatum]) -> list[np.ndarray]:
        """Per datum, the reference's logprob of each target token (aligned with ``mask_T``)."""

        async def one(datum: TrainingDatum) -> np.ndarray:
            targets = datum.datum.loss_fn_inputs["target_tokens"].to_numpy()
            sequence = datum.datum.model_input.append_int(int(targets[-1]))
            logprobs = await self.reference.compute_logprobs_async(sequence)
            # Position 0 has no logprob (nothing precedes it); target t is sequence token t + 1.
            return np.asarray([0.0 if x is None else x for x in logprobs[1:]], dtype=np.float32)

        return list(await asyncio.gather(*(one(d) for d in datums_D)))

    async def apply(self, datums_D: list[TrainingDatum]) -> Row:
        """Shift each datum's advantages by the penalty; returns ``{kl_policy_base: mean(d)}``."""
        if not datums_D:
            return {}
        reference_D = await self.reference_logprobs(datums_D)
        diffs_D = [
            (d.sampler_logprobs_T - ref) * d.mask_T for d, ref in zip(datums_D, reference_D, strict=True)
        ]
        n_tokens = float(sum(d.mask_T.sum() for d in datums_D))
        if n_tokens == 0:
            return {}
        mean = float(sum(diff.sum() for diff in diffs_D)) / n_tokens
        for datum, diff in zip(datums_D, diffs_D, strict=True):
            penalty = (self.coef * datum.mask_T * (mean - diff)).astype(np.float32)
            if self.discount > 0:
                # Observation positions stay at 0: the loss must not train the prompt's tokens.
                penalty = (discounted_future_sum(penalty, self.discount) * datum.mask_T).astype(np.float32)
            advantages = datum.datum.loss_fn_inputs["advantages"].to_numpy().astype(np.float32)
            datum.datum.loss_fn_inputs["advantages"] = tinker.TensorData.from_numpy(advantages + penalty)
        return {METRIC: mean}

    def close(self) -> None:
        close = getattr(self.reference, "close", None)
        if callable(close):
            close()
