"""GRPO-style RL on any catalog env, through TokenCompleters, on the local backend or hosted Tinker.

    from envsuite.trainers import TrainConfig, run_training
    result = run_training(TrainConfig(env_id="arithmetic", log_dir="runs/arith", model="tiny-random"))

The same run from the shell: ``envsuite train arithmetic --log-dir runs/arith``. See docs/training.md.
"""

from envsuite.trainers._advantages import GroupAdvantages, compute_advantages
from envsuite.trainers._batches import AssembledBatch, BatchRollouts, assemble_batch, rollout_batch
from envsuite.trainers._checkpoints import CheckpointLog, CheckpointRecord
from envsuite.trainers._config import ConfigError, LRSchedule, PolicyLoss, TrainConfig
from envsuite.trainers._curriculum import Curriculum, CurriculumState
from envsuite.trainers._datums import TrainingDatum, loss_data, loss_datum, merge_turns, trajectory_to_datums
from envsuite.trainers._heldout import (
    EVAL_EPISODES_FILE,
    Estimate,
    HeldOutComparison,
    compare_held_out,
    episode_value,
    mean_ci,
    read_eval_rows,
)
from envsuite.trainers._kl import KLPenalty, discounted_future_sum
from envsuite.trainers._loop import StopCause, Trainer, TrainResult, run_training
from envsuite.trainers._metrics import read_rows as read_metrics
from envsuite.trainers._plots import plot_reward_curve, reward_curve_figure
from envsuite.trainers._policies import RolePolicy, RolesSection
from envsuite.trainers._prepare import preflight
from envsuite.trainers._presets import (
    Preset,
    PresetInfo,
    list_presets,
    load_config_file,
    load_preset,
    parse_preset,
)
from envsuite.trainers._role_loop import (
    POLICY_CHECKPOINTS,
    RoleCheckpoint,
    RoleCheckpointLog,
    RolePoliciesTrainer,
)
from envsuite.trainers._run_envs import EvalSet, RunEnv, resolve_run_envs
from envsuite.trainers._sections import (
    SECTIONS,
    EnvSection,
    EvalSection,
    LossSection,
    OptimizerSection,
    PolicySection,
    ReplicaSection,
    SamplingSection,
    StepSection,
    TrackingSection,
)
from envsuite.trainers._transcripts import render_trajectory
from envsuite.trainers._warm_start import NoReferenceError, reference_datums, warm_start
from envsuite.trainers.async_rl import (
    LEDGER_FILE,
    DriverSampling,
    GroupLedger,
    GroupOutcome,
    NoSamplersLeftError,
    ReplicaCore,
    ReplicaLostError,
    ReplicaSampling,
    SampledGroup,
    SamplerSettings,
    SamplingService,
    group_seed,
    open_sampling,
)

__all__ = [
    # configuration
    "ConfigError",
    "LRSchedule",
    "PolicyLoss",
    "TrainConfig",
    # the config's sections (TrainConfig.envs, .policy, ...), each checking its own settings
    "SECTIONS",
    "EnvSection",
    "EvalSection",
    "LossSection",
    "OptimizerSection",
    "PolicySection",
    "ReplicaSection",
    "SamplingSection",
    "StepSection",
    "TrackingSection",
    "preflight",
    # a policy per role (TrainConfig.roles: [policies.<name>])
    "POLICY_CHECKPOINTS",
    "RoleCheckpoint",
    "RoleCheckpointLog",
    "RolePoliciesTrainer",
    "RolePolicy",
    "RolesSection",
    # several envs and adaptive difficulty
    "Curriculum",
    "CurriculumState",
    "EvalSet",
    "RunEnv",
    "resolve_run_envs",
    # presets and config files
    "Preset",
    "PresetInfo",
    "list_presets",
    "load_config_file",
    "load_preset",
    "parse_preset",
    # the supervised warm start (warm_start_steps): reference replies imitated before GRPO
    "NoReferenceError",
    "reference_datums",
    "warm_start",
    # running
    "StopCause",
    "TrainResult",
    "Trainer",
    "run_training",
    # pieces of a step
    "AssembledBatch",
    "BatchRollouts",
    "GroupAdvantages",
    "TrainingDatum",
    "assemble_batch",
    "compute_advantages",
    "loss_data",
    "loss_datum",
    "merge_turns",
    "rollout_batch",
    "trajectory_to_datums",
    # async off-policy, the KL penalty, where groups are sampled (sampler replicas)
    "DriverSampling",
    "GroupLedger",
    "GroupOutcome",
    "KLPenalty",
    "LEDGER_FILE",
    "NoSamplersLeftError",
    "ReplicaCore",
    "ReplicaLostError",
    "ReplicaSampling",
    "SampledGroup",
    "SamplerSettings",
    "SamplingService",
    "discounted_future_sum",
    "group_seed",
    "open_sampling",
    # outputs
    "CheckpointLog",
    "CheckpointRecord",
    "plot_reward_curve",
    "read_metrics",
    "render_trajectory",
    "reward_curve_figure",
    # held-out results with confidence intervals
    "EVAL_EPISODES_FILE",
    "Estimate",
    "HeldOutComparison",
    "compare_held_out",
    "episode_value",
    "mean_ci",
    "read_eval_rows",
]
