"""tinker-cookbook interop. Most of it needs nothing: envsuite's contracts are tinker-cookbook 0.5.8's.

* tinker-cookbook -> envsuite: their envs, group builders and datasets run in envsuite's rollouts,
  trainer and checker as they are. :func:`register_cookbook_env` puts one in the catalog (a factory
  from envsuite's :class:`~envsuite.core.EnvContext` to their group builder).
* envsuite -> tinker-cookbook: envsuite's group builders and completers run in their
  ``do_group_rollout`` as they are; :class:`GroupBuilderForCookbook` is needed only when a first prompt
  may overflow (their runner checks the overflow sentinel's class).

docs/interop.md lists every cookbook entry point tried and what (little) differs. Nothing here
imports tinker-cookbook until it is used.
"""

from envsuite.adapters.cookbook._from_cookbook import (
    COOKBOOK_TAG,
    CookbookCatalogEnv,
    CookbookCatalogGroupBuilder,
    CookbookGroupBuilderLike,
    register_cookbook_env,
)
from envsuite.adapters.cookbook._to_cookbook import (
    COOKBOOK_MISSING,
    EnvForCookbook,
    GroupBuilderForCookbook,
    cookbook_module,
)

__all__ = [
    # tinker-cookbook envs in envsuite's catalog
    "COOKBOOK_TAG",
    "CookbookCatalogEnv",
    "CookbookCatalogGroupBuilder",
    "CookbookGroupBuilderLike",
    "register_cookbook_env",
    # envsuite envs in tinker-cookbook's rollouts
    "COOKBOOK_MISSING",
    "EnvForCookbook",
    "GroupBuilderForCookbook",
    "cookbook_module",
]
