"""The local compute backend: the Tinker client interface on PyTorch + transformers (CPU or GPU).

Every public method of the installed ``tinker`` SDK's Service/Training/Sampling/Rest clients is here,
sync and ``_async``; :func:`install` makes ``tinker.ServiceClient(...)`` build the local one.
"""

from __future__ import annotations

from envsuite.backends.local._constrained import ConstrainedSampledSequence, ConstrainedSamplingParams
from envsuite.backends.local._futures import LocalFuture, completed_future, failed_future, submit
from envsuite.backends.local._install import install, installed, is_installed, uninstall
from envsuite.backends.local._replica import ReplicaWeights, check_sampler_checkpoint
from envsuite.backends.local._rest import LocalRestClient
from envsuite.backends.local._runs import UnknownRunError, resolve_checkpoint_path, tinker_path_of
from envsuite.backends.local._sampling import LocalSamplingClient, LocalSamplingClientFuture
from envsuite.backends.local._sequences import (
    RECORD_TTL_S,
    ProvenanceError,
    SequenceRecord,
    SequenceScope,
    SequenceStore,
    provenance_inputs,
)
from envsuite.backends.local._service import LocalServiceClient
from envsuite.backends.local._training import LocalTrainingClient, LocalTrainingClientFuture, NonFiniteError
from envsuite.backends.local._unsupported import NOT_LOCAL, not_local
from envsuite.engine.sampling import EngineClosedError, EngineConfig, PromptTooLongError, SampledToken
from envsuite.engine.training import (
    LossFn,
    LossInputError,
    cispo,
    cross_entropy,
    dro,
    gspo,
    importance_sampling,
    ppo,
    stable_reinforce,
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
    # the SDK's clients, locally
    "LocalRestClient",
    "LocalSamplingClient",
    "LocalSamplingClientFuture",
    "LocalServiceClient",
    "LocalTrainingClient",
    "LocalTrainingClientFuture",
    "NOT_LOCAL",
    "not_local",
    # tinker.ServiceClient -> local
    "install",
    "installed",
    "is_installed",
    "uninstall",
    # sampling
    "ConstrainedSampledSequence",
    "ConstrainedSamplingParams",
    "EngineClosedError",
    "EngineConfig",
    "PromptTooLongError",
    "SampledToken",
    # training and checkpoints
    "CheckpointError",
    "CheckpointKind",
    "NonFiniteError",
    "SamplingModel",
    "UnknownRunError",
    "load_sampling_model",
    "resolve_checkpoint_path",
    "tinker_path_of",
    # a trainer's sampler replica: weights in, a sampling client out
    "ReplicaWeights",
    "check_sampler_checkpoint",
    # losses
    "LossFn",
    "LossInputError",
    "cispo",
    "cross_entropy",
    "dro",
    "gspo",
    "importance_sampling",
    "ppo",
    "stable_reinforce",
    # stable_reinforce's sampling records, per session
    "RECORD_TTL_S",
    "ProvenanceError",
    "SequenceRecord",
    "SequenceScope",
    "SequenceStore",
    "provenance_inputs",
]
