"""The tool-use env families (catalog ids ``tools/...``) and the episode base they share.

* ``tools/calculator``: arithmetic beyond the model, with a ``calculator`` tool.
* ``tools/search``: questions about a fictional world answerable only through a ``search`` tool (BM25
  over the corpus shipped with envsuite); ``tools/search_multihop`` chains two look-ups.
* ``tools/kv_store``: a key-value store the model must read and change through tools to reach a goal.

Write a new one by subclassing :class:`ToolUseEnv` (docs/tools.md).
"""

from envsuite.envs.tool_use._arith import CalculatorError, evaluate
from envsuite.envs.tool_use._atlas import Document, Question, build_atlas, load_atlas
from envsuite.envs.tool_use._env import Score, ToolUseEnv
from envsuite.envs.tool_use.calculator import CalculatorEnv, calculator
from envsuite.envs.tool_use.kv_store import KVStoreEnv, Store
from envsuite.envs.tool_use.retrieval import SearchEnv, make_search_tool, search_atlas

__all__ = [
    # the episode base
    "Score",
    "ToolUseEnv",
    # families
    "CalculatorEnv",
    "KVStoreEnv",
    "SearchEnv",
    # tools and what they work on
    "CalculatorError",
    "Document",
    "Question",
    "Store",
    "build_atlas",
    "calculator",
    "evaluate",
    "load_atlas",
    "make_search_tool",
    "search_atlas",
]
