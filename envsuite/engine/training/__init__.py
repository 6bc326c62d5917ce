"""Training compute: datums to model inputs (shared prefixes laid out once as token trees) and the losses."""

from envsuite.engine.training._batch import (
    CheckedData,
    TokenBatch,
    build_batch,
    check_data,
    lay_out,
    training_passes,
)
from envsuite.engine.training._logprobs import LOGIT_ROWS, target_logprobs
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
    "CheckedData",
    "TokenBatch",
    "build_batch",
    "check_data",
    "lay_out",
    "training_passes",
    # the trained model's logprobs (chunked, checkpointed unembedding)
    "LOGIT_ROWS",
    "target_logprobs",
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
