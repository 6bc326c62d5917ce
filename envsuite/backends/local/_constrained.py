"""Constraints through the Tinker SDK's types: envsuite's extensions that the real SDK drops harmlessly.

:class:`ConstrainedSamplingParams` is a ``tinker.SamplingParams`` with a ``constraint``. Code that only
forwards sampling params (a TokenCompleter, tinker-cookbook's rollouts) carries it to
``LocalSamplingClient.sample`` unchanged; the real SDK serializes the params as its own
``SamplingParams`` (pydantic writes the declared type's fields), so against the hosted service the
constraint is dropped and sampling is free, never an error.

:class:`ConstrainedSampledSequence` is a ``tinker.SampledSequence`` that also carries the masked logprobs
and whether the document is complete; it is what a constrained local request returns, and anything that
reads a ``SampledSequence`` reads it as one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tinker

from envsuite.constraints import Constraint, ConstraintOutcome


class ConstrainedSamplingParams(tinker.SamplingParams):
    """``tinker.SamplingParams`` plus the language every sample must belong to (local backend only)."""

    constraint: Constraint | None = None


@dataclass(frozen=True)
class ConstrainedSampledSequence(tinker.SampledSequence):
    """A constrained sample: ``logprobs`` are without the mask (what training compares against);
    ``constrained_logprobs_np`` are under the masked distribution the tokens were drawn from."""

    constrained_logprobs_np: np.ndarray | None = field(default=None, repr=False)
    """float32, one per token: the logprob under the mask, renormalized (at most 0 more than ``logprobs``
    at temperature 1: the difference is the log of the probability mass the mask kept)."""
    constraint_outcome: ConstraintOutcome | None = None
    """COMPLETE: the tokens (less a final stop token) are a document of the constraint's language."""

    @property
    def constrained_logprobs(self) -> list[float]:
        return [] if self.constrained_logprobs_np is None else self.constrained_logprobs_np.tolist()


def constraint_of(params: tinker.SamplingParams, constraint: Constraint | None) -> Constraint | None:
    """The request's constraint, from the ``constraint`` keyword or ``ConstrainedSamplingParams``."""
    carried = params.constraint if isinstance(params, ConstrainedSamplingParams) else None
    if constraint is not None and carried is not None and constraint != carried:
        raise ValueError("two different constraints: one in sampling_params, another as constraint=")
    found = constraint if constraint is not None else carried
    if found is not None and not isinstance(found, Constraint):
        raise TypeError(f"constraint must be an envsuite.constraints.Constraint, got {type(found).__name__}")
    return found
