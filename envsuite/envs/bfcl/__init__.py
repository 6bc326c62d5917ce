"""BFCL (the Berkeley Function Calling Leaderboard, v4) as catalog envs ``bfcl/<category>`` (optional extra).

Its single-turn categories (simple, multiple, parallel, parallel_multiple, the live ones, irrelevance and
live relevance) from the data inside the installed ``bfcl-eval`` wheel, each reply scored by BFCL's own
per-entry evaluation (its AST checker, or its relevance rule): a category's mean reward is BFCL's accuracy
on it. Install: ``pip install 'envsuite[bfcl]' && pip install --no-deps bfcl-eval==2026.3.23`` (the
wheel's own requirements pin numpy 1.26 and every vendor SDK; its checker needs none of them). Without it
every id is listed unavailable, saying so. Its multi-turn categories (base, miss_func, miss_param,
long_context) are multi-turn tool episodes on BFCL's own simulated APIs (:class:`BfclMultiTurnEnv`),
scored by BFCL's multi-turn checker.
"""

from __future__ import annotations

from envsuite.envs.bfcl._catalog import ENTRY_POINT, NAMESPACE, TIED, env_id, register_bfcl
from envsuite.envs.bfcl._categories import BY_NAME, CATEGORIES, Category, Scoring
from envsuite.envs.bfcl._env import NO_CALL_REPLY, BfclEnv
from envsuite.envs.bfcl._multi_env import MULTI_TURN_CATEGORIES, BfclMultiTurnEnv
from envsuite.envs.bfcl._upstream import BFCL_VERSION, CHECKER_MODEL, Verdict, load_entries, missing, score

__all__ = [
    # the env and its categories
    "BY_NAME",
    "CATEGORIES",
    "NO_CALL_REPLY",
    "BfclEnv",
    "BfclMultiTurnEnv",
    "MULTI_TURN_CATEGORIES",
    "Category",
    "Scoring",
    # BFCL itself
    "BFCL_VERSION",
    "CHECKER_MODEL",
    "Verdict",
    "load_entries",
    "missing",
    "score",
    # the catalog
    "ENTRY_POINT",
    "NAMESPACE",
    "TIED",
    "env_id",
    "register_bfcl",
]
