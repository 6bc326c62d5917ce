"""Training compute: datums to model inputs (shared prefixes laid out once as token trees) and the losses."""

from envsuite.engine.training._batch import TokenBatch, build_batch
from envsuite.engine.training._losses import (
    LOSS_SPECS,
    LossFn,
    LossInputError,
    LossSpec,
    cross_entropy,
    elementwise_loss,
    importance_sampling,
    parse_loss_fn,
    ppo,
    resolve_config,
)

__all__ = [
    # batches
    "TokenBatch",
    "build_batch",
    # losses
    "LOSS_SPECS",
    "LossFn",
    "LossInputError",
    "LossSpec",
    "cross_entropy",
    "elementwise_loss",
    "importance_sampling",
    "parse_loss_fn",
    "ppo",
    "resolve_config",
]
