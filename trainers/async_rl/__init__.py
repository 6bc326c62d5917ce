"""The trainer's sampling machinery (trainer v2): where groups are sampled, async off-policy steps,
streaming minibatches and sampler replicas.

* ``_samplers``: the :class:`SamplingService` contract and the trainer's own sampler
  (:class:`DriverSampling`, ``samplers=0``); every group seeded from (run seed, stream, step, index).
* ``_replicas``, ``_replica_sampling``: N sampler replicas (in process, spawned processes or Ray
  actors), each with its own engine, reached only through ``envsuite.backends.local``'s replica API
  (:class:`~envsuite.backends.local.ReplicaWeights`): ``envsuite.trainers`` imports nothing of
  ``envsuite.engine``.
* ``_steps``: async off-policy training with a staleness bound, resumable exactly (``groups.jsonl``).
* ``_stream``: a step trained on groups as they arrive (streaming minibatches), shared by both.

The synchronous GRPO loop (``envsuite.trainers``' ``_loop``) drives all of it.
"""

from envsuite.trainers.async_rl._replica_sampling import ReplicaSampling, open_sampling
from envsuite.trainers.async_rl._replicas import NoSamplersLeftError, ReplicaCore, ReplicaLostError
from envsuite.trainers.async_rl._samplers import (
    BusyMeter,
    DriverSampling,
    SampledGroup,
    SamplerSettings,
    SamplingService,
    group_seed,
)
from envsuite.trainers.async_rl._steps import LEDGER_FILE, AsyncSteps, GroupLedger, GroupOutcome, async_steps
from envsuite.trainers.async_rl._stream import TrainedStep, train_streaming

__all__ = [
    # where groups are sampled
    "BusyMeter",
    "DriverSampling",
    "SampledGroup",
    "SamplerSettings",
    "SamplingService",
    "group_seed",
    "open_sampling",
    # sampler replicas
    "NoSamplersLeftError",
    "ReplicaCore",
    "ReplicaLostError",
    "ReplicaSampling",
    # async off-policy steps and streaming minibatches
    "LEDGER_FILE",
    "AsyncSteps",
    "GroupLedger",
    "GroupOutcome",
    "TrainedStep",
    "async_steps",
    "train_streaming",
]
