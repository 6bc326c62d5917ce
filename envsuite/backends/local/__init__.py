"""The local compute backend: the Tinker client interface on PyTorch + transformers (CPU or GPU)."""

from __future__ import annotations

from envsuite.backends.local._futures import LocalFuture, completed_future, failed_future, submit
from envsuite.backends.local._sampling import LocalSamplingClient
from envsuite.backends.local._service import LocalServiceClient
from envsuite.backends.local._training import LocalTrainingClient, NonFiniteError
from envsuite.engine.sampling import EngineClosedError, EngineConfig, PromptTooLongError
from envsuite.engine.training import (
    LossFn,
    LossInputError,
    cross_entropy,
    importance_sampling,
    ppo,
)
from envsuite.engine.weights import (
    CheckpointError,
    CheckpointKind,
    SamplingModel,
    load_sampling_model,
)

__all__ = [
    # futures
    "LocalFuture",
    "completed_future",
    "failed_future",
    "submit",
    # sampling
    "EngineClosedError",
    "EngineConfig",
    "LocalSamplingClient",
    "PromptTooLongError",
    # training and checkpoints
    "CheckpointError",
    "CheckpointKind",
    "LocalServiceClient",
    "LocalTrainingClient",
    "NonFiniteError",
    "SamplingModel",
    "load_sampling_model",
    # losses
    "LossFn",
    "LossInputError",
    "cross_entropy",
    "importance_sampling",
    "ppo",
]
