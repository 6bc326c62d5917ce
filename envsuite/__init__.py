"""envsuite: a gym-style catalog of token-level environments for RL on language models.

Importing this package is cheap (gymnasium and numpy only): it registers the built-in catalog and the
``envsuite.envs`` entry-point plugins (plain data; the games are one such plugin, ``envsuite.games``) and
mirrors them into gymnasium's registry. torch, transformers, textarena and inspect_ai load only when a
feature needs them.

Layers import only downward: this core (contracts, catalog, renderers, backends, engine, envs, adapters)
<- ``envsuite.games``, ``envsuite.evals``, ``envsuite.trainers``, ``envsuite.leaderboard`` <- the CLI
(``envsuite.cli``). ``tests/test_architecture.py`` enforces it.
"""

from __future__ import annotations

from envsuite.adapters.gymnasium import make
from envsuite.adapters.gymnasium import mirror_to_gymnasium as _mirror_to_gymnasium
from envsuite.catalog import _entries  # noqa: F401  (registers the built-in envs)
from envsuite.catalog._make import (
    DEFAULT_MAX_CONTEXT_TOKENS,
    DEFAULT_MODEL,
    CatalogDatasetBuilder,
    CatalogGroupBuilder,
    RendererConfig,
    available_spec,
    env_context,
    episode_seed,
    make_dataset_builder,
    make_env,
    make_group_builder,
)
from envsuite.catalog._mixture import (
    ConcatDataset,
    MixtureDataset,
    MixtureDatasetBuilder,
    make_mixture_dataset_builder,
    round_robin_slots,
)
from envsuite.catalog._select import is_env_pattern, select_envs
from envsuite.catalog.registration import (
    DeprecatedEnvError,
    EnvFamily,
    EnvKind,
    EnvKwargsError,
    EnvSpec,
    RegistryError,
    Rung,
    UnavailableEnvError,
    UnknownEnvError,
    catalog_env_families,
    catalog_reward_ranges,
    env_family,
    family_order,
    pprint_registry,
    register,
    registry,
    spec,
)
from envsuite.core import (
    STOP_METRIC_PREFIX,
    Action,
    ActionExtra,
    Env,
    EnvContext,
    EnvGroupBuilder,
    InitialObservationOverflow,
    InvalidActionError,
    Message,
    MessageCompleter,
    Observation,
    ProbeExpectation,
    RewardProbe,
    RLDataset,
    RLDatasetBuilder,
    RolloutError,
    StepResult,
    StopCondition,
    StopReason,
    TokenCompleter,
    TokensWithLogprobs,
    Tool,
    ToolCall,
    ToolResult,
    ToolSpec,
    Trajectory,
    TrajectoryGroup,
    Transition,
    stop_reason_from_metrics,
    tokens_outside_vocabulary,
    tool,
)
from envsuite.errors import UsageError

# Plugins (the games among them) register now rather than on the first lookup, so that
# gymnasium.make("envsuite/<id>") finds every id after `import envsuite`. Registration is plain data:
# no plugin's game or model library loads here.
registry.load_plugins()
# Mirror catalog ids into gymnasium's registry so gymnasium.make("envsuite/<id>") works.
registry.add_listener(_mirror_to_gymnasium)

__version__ = "0.1.0"

__all__ = [
    # core contracts (envsuite.core)
    "STOP_METRIC_PREFIX",
    "Action",
    "ActionExtra",
    "Env",
    "EnvContext",
    "EnvGroupBuilder",
    "InitialObservationOverflow",
    "InvalidActionError",
    "Message",
    "MessageCompleter",
    "Observation",
    "ProbeExpectation",
    "RewardProbe",
    "RLDataset",
    "RLDatasetBuilder",
    "RolloutError",
    "StepResult",
    "StopCondition",
    "StopReason",
    "TokenCompleter",
    "TokensWithLogprobs",
    "Trajectory",
    "TrajectoryGroup",
    "Transition",
    "stop_reason_from_metrics",
    "tokens_outside_vocabulary",
    # errors a user can fix (the CLI shows them as one line)
    "UsageError",
    # tool calling (envsuite.core, from envsuite.tools and envsuite.chat)
    "Tool",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "tool",
    # registry
    "DeprecatedEnvError",
    "EnvFamily",
    "EnvKind",
    "EnvKwargsError",
    "EnvSpec",
    "RegistryError",
    "Rung",
    "UnavailableEnvError",
    "UnknownEnvError",
    "catalog_env_families",
    "catalog_reward_ranges",
    "env_family",
    "family_order",
    "pprint_registry",
    "register",
    "registry",
    "spec",
    # choosing envs: ids, family:NAME, tag:NAME, globs
    "is_env_pattern",
    "select_envs",
    # making envs from an id
    "DEFAULT_MAX_CONTEXT_TOKENS",
    "DEFAULT_MODEL",
    "CatalogDatasetBuilder",
    "CatalogGroupBuilder",
    "RendererConfig",
    "available_spec",
    "env_context",
    "episode_seed",
    "make",
    "make_dataset_builder",
    "make_env",
    "make_group_builder",
    # several envs as one RL dataset
    "ConcatDataset",
    "MixtureDataset",
    "MixtureDatasetBuilder",
    "make_mixture_dataset_builder",
    "round_robin_slots",
    "__version__",
]
