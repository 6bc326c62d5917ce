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
    DERIVED_INPUTS,
    LOSS_SPECS,
    RATIO_MASK,
    SAMPLER_LOGPROBS,
    SEQUENCE_INDEX,
    LossFn,
    LossInputError,
    LossSpec,
    check_ratio_masks,
    cispo,
    cross_entropy,
    default_ratio_mask,
    dro,
    elementwise_loss,
    gspo,
    importance_sampling,
    parse_loss_fn,
    ppo,
    resolve_config,
    stable_reinforce,
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
    "check_ratio_masks",
    "default_ratio_mask",
    "RATIO_MASK",
    "elementwise_loss",
    "parse_loss_fn",
    "resolve_config",
    "cispo",
    "cross_entropy",
    "dro",
    "gspo",
    "importance_sampling",
    "ppo",
    "stable_reinforce",
    # inputs the backend derives from sampling records (stable_reinforce)
    "DERIVED_INPUTS",
    "SAMPLER_LOGPROBS",
    "SEQUENCE_INDEX",
]
