"""envsuite: a gym-style catalog of token-level environments for RL on language models.

Importing this package is cheap (gymnasium and numpy only): it registers the built-in catalog (plain
data) and mirrors it into gymnasium's registry. torch, transformers, textarena and inspect_ai load only
when a feature needs them.
"""

from __future__ import annotations

from envsuite import _catalog  # noqa: F401  (registers the built-in envs)
from envsuite._make import (
    DEFAULT_MODEL,
    CatalogDatasetBuilder,
    CatalogGroupBuilder,
    RendererConfig,
    make_dataset_builder,
    make_env,
    make_group_builder,
)
from envsuite.core import (
    Action,
    Env,
    EnvContext,
    EnvGroupBuilder,
    InitialObservationOverflow,
    Message,
    MessageCompleter,
    Observation,
    RLDataset,
    RLDatasetBuilder,
    StepResult,
    StopCondition,
    StopReason,
    TokenCompleter,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
)
from envsuite.registration import (
    DeprecatedEnvError,
    EnvKind,
    EnvKwargsError,
    EnvSpec,
    RegistryError,
    UnavailableEnvError,
    UnknownEnvError,
    pprint_registry,
    register,
    registry,
    spec,
)
from envsuite.wrappers.gymnasium import make
from envsuite.wrappers.gymnasium import mirror_to_gymnasium as _mirror_to_gymnasium

# Mirror catalog ids into gymnasium's registry so gymnasium.make("envsuite/<id>") works.
registry.add_listener(_mirror_to_gymnasium)

# Games register from their own package (which builds on envsuite, hence last); no game library loads.
from games._catalog import register_games as _register_games  # noqa: E402

_register_games()

__version__ = "0.1.0"

__all__ = [
    # core contracts (envsuite.core)
    "Action",
    "Env",
    "EnvContext",
    "EnvGroupBuilder",
    "InitialObservationOverflow",
    "Message",
    "MessageCompleter",
    "Observation",
    "RLDataset",
    "RLDatasetBuilder",
    "StepResult",
    "StopCondition",
    "StopReason",
    "TokenCompleter",
    "TokensWithLogprobs",
    "Trajectory",
    "TrajectoryGroup",
    "Transition",
    # registry
    "DeprecatedEnvError",
    "EnvKind",
    "EnvKwargsError",
    "EnvSpec",
    "RegistryError",
    "UnavailableEnvError",
    "UnknownEnvError",
    "pprint_registry",
    "register",
    "registry",
    "spec",
    # making envs from an id
    "DEFAULT_MODEL",
    "CatalogDatasetBuilder",
    "CatalogGroupBuilder",
    "RendererConfig",
    "make",
    "make_dataset_builder",
    "make_env",
    "make_group_builder",
    "__version__",
]
