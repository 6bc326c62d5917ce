"""tinker-cookbook interop, both ways.

* tinker-cookbook -> envsuite: :class:`CookbookEnvAdapter`, :class:`CookbookGroupBuilderAdapter`,
  dataset adapters, and :func:`register_cookbook_env` to put a cookbook env in the catalog.
* envsuite -> tinker-cookbook: :class:`EnvForCookbook`, :class:`GroupBuilderForCookbook` and
  :class:`CompleterForCookbook`, for tinker-cookbook's ``do_group_rollout``.
Nothing here imports tinker-cookbook until it is used.
"""

from envsuite.adapters.cookbook._from_cookbook import (
    CookbookCatalogEnv,
    CookbookCatalogGroupBuilder,
    CookbookDatasetAdapter,
    CookbookDatasetBuilderAdapter,
    CookbookEnvAdapter,
    CookbookEnvLike,
    CookbookGroupBuilderAdapter,
    CookbookGroupBuilderLike,
    register_cookbook_env,
    stop_reason_from_metrics,
)
from envsuite.adapters.cookbook._to_cookbook import (
    COOKBOOK_MISSING,
    CompleterForCookbook,
    EnvForCookbook,
    GroupBuilderForCookbook,
)

__all__ = [
    # tinker-cookbook envs in envsuite
    "CookbookCatalogEnv",
    "CookbookCatalogGroupBuilder",
    "CookbookDatasetAdapter",
    "CookbookDatasetBuilderAdapter",
    "CookbookEnvAdapter",
    "CookbookEnvLike",
    "CookbookGroupBuilderAdapter",
    "CookbookGroupBuilderLike",
    "register_cookbook_env",
    "stop_reason_from_metrics",
    # envsuite envs in tinker-cookbook
    "COOKBOOK_MISSING",
    "CompleterForCookbook",
    "EnvForCookbook",
    "GroupBuilderForCookbook",
]
