"""Tools for env authors: the conformance checker every catalog env must pass."""

from envsuite.testing._checker import (
    CHECKS,
    CheckOutcome,
    CheckResult,
    ConformanceReport,
    check_env,
    check_env_async,
)
from envsuite.testing._reward_probes import GENERIC_PROBES, ProbeTally
from envsuite.testing._reward_probes import summarize as summarize_probes

__all__ = [
    "CHECKS",
    "GENERIC_PROBES",
    "CheckOutcome",
    "CheckResult",
    "ConformanceReport",
    "ProbeTally",
    "check_env",
    "check_env_async",
    "summarize_probes",
]
