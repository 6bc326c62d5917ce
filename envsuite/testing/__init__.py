"""Tools for env authors: the conformance checker every catalog env must pass."""

from envsuite.testing._checker import (
    CHECKS,
    CheckOutcome,
    CheckResult,
    ConformanceReport,
    check_env,
    check_env_async,
)

__all__ = [
    "CHECKS",
    "CheckOutcome",
    "CheckResult",
    "ConformanceReport",
    "check_env",
    "check_env_async",
]
