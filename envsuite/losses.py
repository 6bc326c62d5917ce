"""The one list of losses: every built-in loss of the Tinker SDK's ``LossFnType``, named as the SDK names
them, so the name a command takes (``--loss-fn ppo``) is the name ``forward_backward`` gets and the name
the local engine computes, with no translation in between.

Torch-free (the trainer and the engine both read it; the engine's pure-tensor losses are in
``envsuite.engine.training``). Two older public names stay as aliases of this enum:
``envsuite.trainers.PolicyLoss`` and ``envsuite.engine.training.LossFn``.

Invariants: every member's value is a member of ``tinker.types.LossFnType``; what each loss reads beyond
the policy-gradient inputs is said here once (:attr:`LossFn.needs_learner_prompt_logprobs`), and the
trainer's one loss-input builder (``envsuite.trainers``' ``loss_data``) follows it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tinker.types import LossFnType


class LossFn(StrEnum):
    """Every built-in loss of ``tinker.types.LossFnType`` (``custom`` is ``forward_backward_custom``).

    ``logp`` is the trained model's log-probability of a target token, ``q`` the sampler's, ``A`` the
    advantage and ``ratio = exp(logp - q)`` (the engine's module docstring has the formulas)."""

    CROSS_ENTROPY = "cross_entropy"
    """Next-token loss weighted per token; as a policy loss, on-policy REINFORCE weighted by the
    advantages (no off-policy correction)."""
    IMPORTANCE_SAMPLING = "importance_sampling"
    """REINFORCE with the sampler-to-learner probability ratio (unclipped)."""
    PPO = "ppo"
    """The ratio clipped to a trust region (``[1 - ppo_clip, 1 + ppo_clip]`` in the trainer)."""
    CISPO = "cispo"
    """``logp`` weighted by the clipped, stop-gradient ratio (MiniMax-M1)."""
    DRO = "dro"
    """``logp * A`` with a quadratic penalty ``beta / 2 * (logp - q)^2`` (Direct Reward Optimization;
    ``dro_beta`` in the trainer)."""
    GSPO = "gspo"
    """``ppo`` on each reply's sequence-level ratio (its sampled tokens' geometric mean), token-level
    gradients (GSPO-token)."""
    STABLE_REINFORCE = "stable_reinforce"
    """REINFORCE with truncated sequence ratios on negative advantages only (TOPR); samples are recorded
    and datums carry provenance (tinker-cookbook 0.6.1's default)."""

    @property
    def sdk_name(self) -> LossFnType:
        """The name ``forward_backward`` takes for this loss (the SDK's ``LossFnType``): its value."""
        return self.value

    @property
    def needs_learner_prompt_logprobs(self) -> bool:
        """True when the loss's ``logprobs`` input must hold the learner's own logprob at prompt positions
        (the sampler gave none there): ``dro``'s penalty ``(logp - q)^2`` covers every position, so with
        ``q = 0`` it would pull the prompt towards probability 1."""
        return self is LossFn.DRO
