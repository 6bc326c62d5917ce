"""BFCL v4's single-turn categories as catalog entries: plain data, nothing imported from BFCL."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Scoring(enum.StrEnum):
    """How BFCL scores a category (``bfcl_eval.eval_checker.eval_runner``)."""

    AST = "ast"
    """The calls must match a ground-truth answer, argument by argument (BFCL's AST checker)."""
    IRRELEVANCE = "irrelevance"
    """No function fits the question: a reply with no decodable call scores 1."""
    RELEVANCE = "relevance"
    """Some function fits: a reply with at least one decodable call scores 1 (arguments unchecked)."""


@dataclass(frozen=True)
class Category:
    """One BFCL category as a catalog env ``bfcl/<name>``."""

    name: str
    """The catalog name (``simple`` is BFCL's ``simple_python``)."""
    bfcl_name: str
    """BFCL's own category name (its data file ``BFCL_v4_<bfcl_name>.json``)."""
    n_items: int
    """Entries in ``bfcl-eval`` 2026.3.23 (a test checks it against the installed data)."""
    description: str

    @property
    def scoring(self) -> Scoring:
        if "irrelevance" in self.bfcl_name:
            return Scoring.IRRELEVANCE
        if "relevance" in self.bfcl_name:
            return Scoring.RELEVANCE
        return Scoring.AST


CATEGORIES: tuple[Category, ...] = (
    Category("simple", "simple_python", 400, "one Python function, one call to make"),
    Category("simple_java", "simple_java", 100, "one Java method, one call (arguments as Java literals)"),
    Category("simple_javascript", "simple_javascript", 50, "one JavaScript function, one call (JS literals)"),
    Category("multiple", "multiple", 200, "several functions, one call to the right one"),
    Category("parallel", "parallel", 200, "one function called several times in one reply"),
    Category("parallel_multiple", "parallel_multiple", 200, "several functions, several calls in one reply"),
    Category("irrelevance", "irrelevance", 240, "no function fits the question: make no call"),
    Category("live_simple", "live_simple", 258, "user-contributed: one function, one call"),
    Category("live_multiple", "live_multiple", 1053, "user-contributed: several functions, one call"),
    Category("live_parallel", "live_parallel", 16, "user-contributed: one function, several calls"),
    Category(
        "live_parallel_multiple",
        "live_parallel_multiple",
        24,
        "user-contributed: several functions, several calls",
    ),
    Category("live_irrelevance", "live_irrelevance", 884, "user-contributed: no function fits, make no call"),
    Category("live_relevance", "live_relevance", 16, "user-contributed: some function fits, make a call"),
)
"""The single-turn categories, in BFCL's order (``ALL_CATEGORIES``)."""

BY_NAME: dict[str, Category] = {c.name: c for c in CATEGORIES}
