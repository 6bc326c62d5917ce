"""``envsuite new``: scaffold a ready-to-edit env package (env, builders, entry point, README, tests).

The generated package installs with ``pip install -e``, appears in ``envsuite list``, passes
``envsuite check`` and can be made, benchmarked and trained by id. Templates live in ``templates/``.
"""

from envsuite.scaffold._create import (
    ScaffoldError,
    ScaffoldResult,
    create_env_package,
    parse_kind,
    validate_name,
)

__all__ = [
    "ScaffoldError",
    "ScaffoldResult",
    "create_env_package",
    "parse_kind",
    "validate_name",
]
